"""The coarse loss's softmax is a node: ``softmax_cross_entropy`` and its gradient op
both read ``softmax(logits)``, so a training step computes it once, in every style, and
nothing passes between the two ops outside the graph."""

import numpy as np
import pytest

import autodiff as ad
from autodiff import nn, optim
from autodiff.ops import losses, reductions

LABELS = np.array([0, 3, 1, 2, 3])


def np_softmax(z):
    exps = np.exp(z - z.max(axis=1, keepdims=True))
    return exps / exps.sum(axis=1, keepdims=True)


def np_loss_and_gradient(z, labels):
    """The mean cross-entropy of the rows of z and its gradient, in NumPy."""
    probs = np_softmax(z)
    rows = np.arange(len(z))
    loss = -np.log(probs[rows, labels]).mean()
    grad = probs.copy()
    grad[rows, labels] -= 1
    return loss, grad / len(z)


@pytest.fixture
def softmax_computed(monkeypatch):
    """The shapes of the logits whose softmax was computed (``softmax_rows``: by the
    softmax node, or by a gradient op not handed one), one per call."""
    calls = []
    softmax_rows = reductions.softmax_rows

    def counted(z):
        calls.append(z.shape)
        return softmax_rows(z)

    monkeypatch.setattr(reductions, "softmax_rows", counted)
    monkeypatch.setattr(losses, "softmax_rows", counted)
    return calls


@pytest.mark.parametrize("style", ["define-by-run", "define-then-run"])
def test_the_loss_and_its_gradient_read_one_softmax_node(style):
    if style == "define-by-run":
        logits = ad.tensor(np.random.default_rng(0).normal(size=(5, 4)), name="logits")
    else:
        logits = ad.Variable("logits", shape=(None, 4))
    loss = ad.softmax_cross_entropy(logits, LABELS)
    grads = ad.gradients(loss, [logits])
    nodes = ad.find_topo_sort([loss, *grads])
    (probs,) = [node for node in nodes if node.op.name == "softmax"]
    assert probs.inputs == (logits,)
    readers = sorted(node.op.name for node in nodes if probs in node.inputs)
    assert readers == ["softmax_cross_entropy", "softmax_cross_entropy_gradient"]
    assert loss.inputs[0] is logits and loss.inputs[2] is probs


def test_one_softmax_per_define_by_run_step(softmax_computed):
    rng = np.random.default_rng(1)
    for step in range(4):  # the gradient cache: built, built and compiled, then run
        z = rng.normal(size=(5, 4))
        logits = ad.tensor(z)
        loss = ad.softmax_cross_entropy(logits, LABELS)
        if step % 2:
            loss.backward()
            grad = logits.grad
        else:
            grad = ad.gradients(loss, [logits])[0].value
        assert len(softmax_computed) == step + 1  # the forward pass's, and no other
        expected_loss, expected_grad = np_loss_and_gradient(z, LABELS)
        assert float(loss.value) == pytest.approx(expected_loss, rel=1e-12)
        np.testing.assert_allclose(grad, expected_grad, rtol=1e-12, atol=1e-15)


def test_one_softmax_per_run_of_a_symbolic_step(softmax_computed):
    x, y = ad.Variable("x", shape=(None, 4)), ad.Variable("y", shape=(None,), dtype="int64")
    loss = ad.softmax_cross_entropy(x, y)
    executor = ad.Executor([loss, *ad.gradients(loss, [x])])
    rng = np.random.default_rng(2)
    for run in range(3):  # checked, then compiled runs
        z = rng.normal(size=(5, 4))
        value, dx = executor.run({x: z, y: LABELS})
        assert len(softmax_computed) == run + 1
        expected_loss, expected_grad = np_loss_and_gradient(z, LABELS)
        assert float(value) == pytest.approx(expected_loss, rel=1e-12)
        np.testing.assert_allclose(dx, expected_grad, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("compiled", [True, False])
def test_one_softmax_per_step_of_nn_train(softmax_computed, compiled):
    """Full-batch SGD on a linear model, against the same steps written in NumPy."""
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(6, 3)), np.array([0, 1, 2, 3, 1, 0])
    model = nn.Linear(3, 4, dtype="float64", seed=0)
    w, b = model.weight.value.copy(), model.bias.value.copy()
    steps, lr = 5, 0.5
    nn.train(model, nn.cross_entropy, optim.SGD(model.parameters(), lr=lr), x, y,
             epochs=steps, shuffle=False, progress=False, compiled=compiled)  # fmt: skip
    assert len(softmax_computed) == steps
    for _ in range(steps):
        _, d_logits = np_loss_and_gradient(x @ w + b, y)
        w, b = w - lr * x.T @ d_logits, b - lr * d_logits.sum(axis=0)
    np.testing.assert_allclose(model.weight.value, w, rtol=1e-12)
    np.testing.assert_allclose(model.bias.value, b, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("labels", ["indices", "probabilities"])
def test_the_gradient_leaves_the_softmax_as_it_was(labels):
    """The gradient op reads the softmax node's value and writes a new array: a second
    ``gradients`` call (the cache off: the op runs again) gives the same gradient."""
    rng = np.random.default_rng(4)
    logits = ad.tensor(rng.normal(size=(5, 4)))
    targets = LABELS if labels == "indices" else np_softmax(rng.normal(size=(5, 4)))
    loss = ad.softmax_cross_entropy(logits, targets)
    probs = loss.inputs[2]
    before = probs.value.copy()
    with ad.gradient_cache.disabled():
        first, second = (ad.gradients(loss, [logits])[0].value for _ in range(2))
    np.testing.assert_array_equal(probs.value, before)
    np.testing.assert_array_equal(first, second)
    assert not np.shares_memory(first, probs.value)


def exact_logsumexp(z):
    top = z.max(axis=1, keepdims=True)
    return (np.log(np.exp(z - top).sum(axis=1, keepdims=True)) + top)[:, 0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "case", ["moderate", "column 0 far below its row", "rows far apart", "huge", "one class"]
)
def test_the_loss_reads_each_rows_logsumexp_off_the_softmax(case, dtype):
    """lse = z[k] - log(softmax(z)[k]): read at column 0 when every row's probability
    there is clear of underflow, else at each row's likeliest class; either way the
    log-sum-exp as computed from the logits, also where column 0's probability is 0."""
    rng = np.random.default_rng(5)
    z = rng.normal(scale=3, size=(6, 5))
    if case == "column 0 far below its row":
        z[2, 0] -= 2000
    elif case == "rows far apart":
        z[1] -= 1500
        z[4] += 900
    elif case == "huge":
        z *= 1e4
    elif case == "one class":
        z = z[:, :1]
    z = z.astype(dtype)
    probs = reductions.softmax_rows(z)
    np.testing.assert_allclose(probs.sum(axis=1), 1, rtol=4 * np.finfo(dtype).eps)
    lse = losses.row_logsumexp(z, probs)
    assert lse.dtype == dtype
    expected = exact_logsumexp(z.astype(np.float64))
    # Within a few roundings of the largest number involved (the logits: 30,000 "huge").
    bound = 8 * float(np.finfo(dtype).eps) * np.maximum(np.abs(z).max(axis=1), 1)
    error = np.abs(lse - expected)
    assert (error <= bound).all(), f"{case}: got {lse}, expected {expected}"


def test_the_softmax_of_rows_far_apart_matches_numpy():
    """The quick softmax shifts the whole batch by one max unless a value lies so far
    below it that its exp would lose bits; then each row by its own (as NumPy's does)."""
    rng = np.random.default_rng(6)
    for shift in (0.0, 30.0, 400.0, 5000.0):
        z = rng.normal(size=(4, 7))
        z[1] -= shift
        for dtype, rtol in ((np.float64, 1e-13), (np.float32, 2e-5)):
            rounded = z.astype(dtype)
            got = ad.softmax(ad.tensor(rounded)).value
            assert got.dtype == dtype
            np.testing.assert_allclose(got, np_softmax(rounded.astype(np.float64)), rtol=rtol)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("classes", [3, 10, 1000])
def test_the_softmax_unshifted_or_shifted_matches_numpy(classes, dtype):
    """Logits so small that every exp and every row's sum keep their bits take the
    textbook exp(z) / sum(exp(z)), unshifted; just past that bound (which shrinks with
    the number of classes: a float16 row of 1000 classes is always shifted) they are
    shifted. Either way: NumPy's softmax, no overflow, rows that sum to 1."""
    bound = reductions._SPREAD[np.dtype(dtype).char] - np.log(classes)
    rng = np.random.default_rng(classes)
    rtol = {np.float16: 4e-3, np.float32: 2e-5, np.float64: 1e-12}[dtype]
    for top in (0.5, 0.99 * bound, 1.01 * bound, 3 * bound, 80.0):
        z = rng.uniform(-1, 1, size=(6, classes))
        z[0], z[1, ::2] = 1, -1  # a row all at the top: its sum is the largest there is
        z = (z / np.abs(z).max() * abs(top)).astype(dtype)
        got = reductions.softmax_rows(z)
        assert got.dtype == dtype and np.isfinite(got).all(), f"{top}: {got}"
        expected = np_softmax(z.astype(np.float64))
        # (a probability under the dtype's smallest normal number has fewer bits: float16's)
        atol = float(np.finfo(dtype).tiny)
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=f"max |z| {top}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["moderate", "confident", "label far below its row"])
def test_the_loss_of_class_indices_against_the_exact_value(case, dtype):
    """The loss is -log(softmax) at each row's class, while no such probability is
    rounded away; else lse - z[class], read off the softmax: either way the exact
    value (from the logits, in float64) to float's rounding."""
    rng = np.random.default_rng(7)
    z, labels = rng.normal(scale=2, size=(8, 6)), rng.integers(0, 6, 8)
    rows = np.arange(8)
    if case == "confident":
        z[rows, labels] += 17  # each row's loss near 4e-7
    elif case == "label far below its row":
        z[3, labels[3]] -= 2000  # probability 0 in either dtype: a loss of about 2000
    z = z.astype(dtype)
    got = ad.softmax_cross_entropy(ad.tensor(z), labels).value
    exact = z.astype(np.float64)
    expected = np.mean(exact_logsumexp(exact) - exact[rows, labels])
    assert got.dtype == dtype and np.isfinite(got)
    # A few roundings of each row's largest number (the logits, or 1: the probabilities).
    bound = 8 * float(np.finfo(dtype).eps) * np.maximum(np.abs(exact).max(axis=1), 1).mean()
    assert abs(got - expected) <= bound, f"{case}: got {got}, expected {expected}"


@pytest.mark.parametrize("rows", ["one-hot", "one-hot and a masked row", "soft"])
def test_the_gradient_of_probability_labels_against_numpy(rows):
    """Rows that sum to exactly 1 take the short way (softmax - labels); the others
    scale the softmax by each row's mass first: both give (softmax * mass - labels) / rows."""
    rng = np.random.default_rng(7)
    z = rng.normal(size=(5, 4))
    labels = np.eye(4)[LABELS]
    if rows == "one-hot and a masked row":
        labels[2] = 0
    elif rows == "soft":
        labels = np_softmax(rng.normal(size=(5, 4))) * 0.9
    logits = ad.tensor(z)
    (grad,) = ad.gradients(ad.softmax_cross_entropy(logits, labels), [logits])
    expected = (np_softmax(z) * labels.sum(axis=1, keepdims=True) - labels) / len(z)
    np.testing.assert_allclose(grad.value, expected, rtol=1e-12, atol=1e-16)


@pytest.mark.parametrize("labels", ["indices", "probabilities"])
@pytest.mark.parametrize("layout", ["C", "Fortran", "a transposed view"])
def test_logits_in_any_memory_layout(labels, layout):
    """The gradient writes each row's class through a flat view of its result: fed
    logits that are not C-ordered (an Executor passes feeds on as they are) must give
    the same values, in the checked run and the compiled ones."""
    rng = np.random.default_rng(8)
    z, y = ad.Variable("z"), ad.Variable("y")
    loss = ad.softmax_cross_entropy(z, y)
    executor = ad.Executor([loss, *ad.gradients(loss, [z])])
    for _ in range(3):
        base = rng.normal(size=(6, 5))
        fed = {"C": base, "Fortran": np.asfortranarray(base)}.get(layout, base.T.copy().T)
        indices = rng.integers(0, 5, 6)
        targets = indices if labels == "indices" else np.eye(5)[indices]
        value, grad = executor.run({z: fed, y: targets})
        expected_loss, expected_grad = np_loss_and_gradient(base, indices)
        assert float(value) == pytest.approx(expected_loss, rel=1e-12)
        np.testing.assert_allclose(grad, expected_grad, rtol=1e-12, atol=1e-15)
