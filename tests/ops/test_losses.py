"""The coarse loss's exponentials are a node: ``softmax_cross_entropy`` and its gradient
op both read ``softmax_exps(logits)``, so a training step computes them once, in every
style, and nothing passes between the two ops outside the graph."""

import numpy as np
import pytest

import autodiff as ad
from autodiff import nn, optim
from autodiff.ops import losses

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
def exps_computed(monkeypatch):
    """The shapes of the logits whose exponentials were computed (``shifted_exps``: by
    the exps node, or by a gradient op not handed one), one per call."""
    calls = []
    shifted_exps = losses.shifted_exps

    def counted(z):
        calls.append(z.shape)
        return shifted_exps(z)

    monkeypatch.setattr(losses, "shifted_exps", counted)
    return calls


@pytest.mark.parametrize("style", ["define-by-run", "define-then-run"])
def test_the_loss_and_its_gradient_read_one_exps_node(style):
    if style == "define-by-run":
        logits = ad.tensor(np.random.default_rng(0).normal(size=(5, 4)), name="logits")
    else:
        logits = ad.Variable("logits", shape=(None, 4))
    loss = ad.softmax_cross_entropy(logits, LABELS)
    grads = ad.gradients(loss, [logits])
    nodes = ad.find_topo_sort([loss, *grads])
    (exps,) = [node for node in nodes if node.op.name == "softmax_exps"]
    assert exps.inputs == (logits,)
    readers = sorted(node.op.name for node in nodes if exps in node.inputs)
    assert readers == ["softmax_cross_entropy", "softmax_cross_entropy_gradient"]
    assert loss.inputs[0] is logits and loss.inputs[2] is exps


def test_one_softmax_per_define_by_run_step(exps_computed):
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
        assert len(exps_computed) == step + 1  # the forward pass's, and no other
        expected_loss, expected_grad = np_loss_and_gradient(z, LABELS)
        assert float(loss.value) == pytest.approx(expected_loss, rel=1e-12)
        np.testing.assert_allclose(grad, expected_grad, rtol=1e-12, atol=1e-15)


def test_one_softmax_per_run_of_a_symbolic_step(exps_computed):
    x, y = ad.Variable("x", shape=(None, 4)), ad.Variable("y", shape=(None,), dtype="int64")
    loss = ad.softmax_cross_entropy(x, y)
    executor = ad.Executor([loss, *ad.gradients(loss, [x])])
    rng = np.random.default_rng(2)
    for run in range(3):  # checked, then compiled runs
        z = rng.normal(size=(5, 4))
        value, dx = executor.run({x: z, y: LABELS})
        assert len(exps_computed) == run + 1
        expected_loss, expected_grad = np_loss_and_gradient(z, LABELS)
        assert float(value) == pytest.approx(expected_loss, rel=1e-12)
        np.testing.assert_allclose(dx, expected_grad, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("compiled", [True, False])
def test_one_softmax_per_step_of_nn_train(exps_computed, compiled):
    """Full-batch SGD on a linear model, against the same steps written in NumPy."""
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(6, 3)), np.array([0, 1, 2, 3, 1, 0])
    model = nn.Linear(3, 4, dtype="float64", seed=0)
    w, b = model.weight.value.copy(), model.bias.value.copy()
    steps, lr = 5, 0.5
    nn.train(model, nn.cross_entropy, optim.SGD(model.parameters(), lr=lr), x, y,
             epochs=steps, shuffle=False, progress=False, compiled=compiled)  # fmt: skip
    assert len(exps_computed) == steps
    for _ in range(steps):
        _, d_logits = np_loss_and_gradient(x @ w + b, y)
        w, b = w - lr * x.T @ d_logits, b - lr * d_logits.sum(axis=0)
    np.testing.assert_allclose(model.weight.value, w, rtol=1e-12)
    np.testing.assert_allclose(model.bias.value, b, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("labels", ["indices", "probabilities"])
def test_the_gradient_leaves_the_exps_as_they_were(labels):
    """The gradient op reads the exps node's value and writes a new array: a second
    ``gradients`` call (the cache off: the op runs again) gives the same gradient."""
    rng = np.random.default_rng(4)
    logits = ad.tensor(rng.normal(size=(5, 4)))
    targets = LABELS if labels == "indices" else np_softmax(rng.normal(size=(5, 4)))
    loss = ad.softmax_cross_entropy(logits, targets)
    exps = loss.inputs[2]
    before = exps.value.copy()
    with ad.gradient_cache.disabled():
        first, second = (ad.gradients(loss, [logits])[0].value for _ in range(2))
    np.testing.assert_array_equal(exps.value, before)
    np.testing.assert_array_equal(first, second)
    assert not np.shares_memory(first, exps.value)


def test_the_shift_is_a_whole_number_so_the_exps_differentiate_as_exp():
    """E = exp(Z - C), C a whole number near the max: piecewise constant, so dE/dZ = E,
    also where the max itself moves (its own element), as finite differences see."""
    z = np.array([[0.3, 2.6, -1.2], [1.1, 0.4, 2.2]])
    exps = losses.softmax_exps(ad.tensor(z))
    np.testing.assert_allclose(exps.value, np.exp(z - 2.0), rtol=1e-15)  # floor(2.6)
    ad.check_grads(losses.softmax_exps, [z], order=2)
    far = z.copy()
    far[1] -= 1000  # far below the batch's max: each row its own shift
    np.testing.assert_allclose(
        losses.softmax_exps(ad.tensor(far)).value, np.exp(far - [[2.0], [-998.0]]), rtol=1e-15
    )
