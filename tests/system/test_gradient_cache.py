"""The cache of gradient programs (autodiff/gradient_cache.py): graphs rebuilt step after
step get their gradients from a compiled program, with the same values, dtypes and
errors as a gradient graph built anew, and a graph of Nodes still behind them."""

import contextlib
import gc
import tracemalloc
import weakref

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import autodiff as ad
from autodiff import gradient_cache
from autodiff.gradient_cache import CachedGradient
from strategies import OP_CASES

OPS = sorted(name for name, cls in ad.Op.registry.items() if cls.differentiable and not cls.is_leaf)


@pytest.fixture(autouse=True)
def empty_cache():
    gradient_cache.clear()
    yield
    gradient_cache.clear()


def step(x_value, w_value, scale=1.5):
    """One define-by-run step: a new graph each call."""
    x, w = ad.tensor(x_value, name="x"), ad.tensor(w_value, name="w")
    loss = ad.sum(ad.tanh(ad.matmul(x, w)) * scale) + ad.sum(w * w)
    return loss, ad.gradients(loss, [x, w])


def counts():
    info = gradient_cache.cache_info()
    return info.hits, info.misses


def test_a_repeated_structure_is_compiled_when_it_comes_back_then_hits():
    rng = np.random.default_rng(0)
    values = [(rng.normal(size=(4, 3)), rng.normal(size=(3, 2))) for _ in range(3)]
    for i, (x, w) in enumerate(values):
        loss, grads = step(x, w)
        with gradient_cache.disabled():
            _, fresh = step(x, w)
        for got, want in zip(grads, fresh, strict=True):
            np.testing.assert_array_equal(got.value, want.value)  # bit for bit
            assert got.dtype == want.dtype
        assert all(isinstance(g, CachedGradient) for g in grads) == (i > 1)
    assert counts() == (1, 2)  # built once, built and compiled, run


@pytest.mark.parametrize(
    "change",
    [
        lambda x, w: (x[:2], w),  # another shape
        lambda x, w: (x.astype(np.float32), w.astype(np.float32)),  # another dtype
    ],
    ids=["shape", "dtype"],
)
def test_a_new_shape_or_dtype_misses_and_keeps_its_dtype(change):
    x, w = np.ones((4, 3)), np.ones((3, 2))
    step(x, w)
    x2, w2 = change(x, w)
    _, grads = step(x2, w2)
    assert counts() == (0, 2)
    assert grads[0].shape == x2.shape and grads[0].dtype == x2.dtype


def test_a_constant_number_is_part_of_the_key():
    x, w = np.ones((2, 3)), np.full((3, 1), 0.5)
    _, (_, dw2) = step(x, w, scale=2.0)
    _, (_, dw3) = step(x, w, scale=3.0)
    assert counts() == (0, 2)
    with gradient_cache.disabled():
        _, (_, want) = step(x, w, scale=3.0)
    np.testing.assert_array_equal(dw3.value, want.value)
    assert not np.array_equal(dw2.value, dw3.value)


def test_the_wiring_is_part_of_the_key():
    """x * x and x * y: same ops, same shapes, another graph."""
    x, y = ad.tensor(3.0), ad.tensor(5.0)
    (dx,) = ad.gradients(x * x, [x])
    (dx2,) = ad.gradients(x * y, [x])
    assert (float(dx.value), float(dx2.value)) == (6.0, 5.0)
    assert counts() == (0, 2)


def test_a_cached_gradient_is_a_graph_when_looked_at():
    """Drawn, differentiated again, run by an Executor: its graph is built on demand."""
    step(np.ones((2, 3)), np.ones((3, 2)))
    x = ad.tensor(np.array([[0.5, -1.0, 2.0]]), name="x")
    w = ad.tensor(np.full((3, 2), 0.25), name="w")
    loss = ad.sum(ad.tanh(ad.matmul(x, w)) * 1.5) + ad.sum(w * w)
    x1 = ad.tensor(np.array([[0.5, -1.0, 2.0]]), name="x")
    loss1 = ad.sum(ad.tanh(ad.matmul(x1, w)) * 1.5) + ad.sum(w * w)
    for _ in range(2):  # the structure with x of shape (1, 3): built, then compiled
        ad.gradients(loss1, [x1, w])
    dx, dw = ad.gradients(loss, [x, w])
    assert isinstance(dx, CachedGradient) and dx._source is not None
    value = dx.value
    assert dx.inputs and dx.op.name and dx._source is None  # now a graph
    np.testing.assert_array_equal(dx.value, value)  # its value as computed
    (ddx,) = ad.gradients(ad.sum(dx * dx), [x])  # second derivatives through it
    with gradient_cache.disabled():
        (fresh,) = ad.gradients(loss, [x])
        (want,) = ad.gradients(ad.sum(fresh * fresh), [x])
    np.testing.assert_allclose(ddx.value, want.value, rtol=1e-12)
    assert "matmul" in ad.viz.draw(dw).source  # drawn from its graph
    (again,) = ad.Executor([dw]).run({})
    np.testing.assert_allclose(again, dw.value, rtol=1e-12)


@pytest.mark.parametrize("name", OPS)
@given(data=st.data())
def test_every_op_gives_the_same_gradients_from_the_cache(name, data):
    case = data.draw(OP_CASES[name])
    gradient_cache.clear()

    def grads():
        leaves = [ad.tensor(a) for a in case.args]
        return [g.value for g in ad.gradients(case.fn(*leaves), leaves)]

    with gradient_cache.disabled():
        want = grads()
    first, second, third = grads(), grads(), grads()
    info = gradient_cache.cache_info()
    # (dropout_mask's case makes a new Generator per call, a setting: a new key each time)
    assert info.hits + info.uncacheable >= 1 or name == "dropout_mask", info
    for values in (first, second, third):
        for got, expected in zip(values, want, strict=True):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(expected), err_msg=name)
            assert np.asarray(got).dtype == np.asarray(expected).dtype


def test_the_cache_keeps_no_forward_values_alive():
    x = ad.tensor(np.ones(1000), name="x")
    for _ in range(2):
        (dx,) = ad.gradients(ad.sum(ad.sin(x) * x), [x])
    probe = weakref.ref(x)
    del x, dx
    gc.collect()
    assert probe() is None, "a program holds the forward graph"
    assert gradient_cache.cache_info().programs == 1


def test_a_program_reads_like_the_gradient_graph():
    x = ad.tensor(np.ones(3), name="x")
    for _ in range(2):
        ad.gradients(ad.sum(ad.sin(x)), [x])
    (program,) = gradient_cache._programs.values()
    assert "# cos" in program.source and "# multiply" in program.source
    assert program.source.startswith("def run(forward):")


def test_disabled_nests_and_restores():
    x = ad.tensor(2.0)
    with gradient_cache.disabled():
        with gradient_cache.disabled():
            ad.gradients(x * x, [x])
        ad.gradients(x * x, [x])
    assert gradient_cache.enabled() and counts() == (0, 0)
    ad.gradients(x * x, [x])
    assert counts() == (0, 1)


def test_unhashable_settings_are_not_cached_and_still_right():
    x = ad.tensor(np.arange(6.0), name="x")
    index = np.array([0, 2, 2])
    for _ in range(2):
        (dx,) = ad.gradients(ad.sum(x[index] * x[index]), [x])
        np.testing.assert_array_equal(dx.value, [0, 0, 8, 0, 0, 0])
    info = gradient_cache.cache_info()
    assert info.uncacheable == 2 and info.hits == 0


def test_float32_stays_float32_from_the_cache():
    for _ in range(3):
        x = ad.tensor(np.ones(3, np.float32))
        (dx,) = ad.gradients(ad.sum(ad.exp(x) * 0.5), [x])
    assert isinstance(dx, CachedGradient) and dx.dtype == np.float32


# -- retain_graph=False: the forward values let go as the backward pass reads them ---------


def mlp_step(x, params, labels, retain_graph):
    w1, b1, w2, b2 = params
    hidden = ad.relu(ad.constant(x) @ w1 + b1)
    logits = hidden @ w2 + b2
    loss = ad.softmax_cross_entropy(logits, labels)
    grads = ad.gradients(loss, params, retain_graph=retain_graph)
    return loss, hidden, logits, grads


def mlp_data(rng, sizes=(6, 8, 3), batch=5):
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True):
        params += [
            rng.standard_normal((n_in, n_out)).astype(np.float32),
            np.zeros(n_out, np.float32),
        ]
    return x, params, rng.integers(0, sizes[-1], batch)


@pytest.mark.parametrize("cache", ["on", "off"])
def test_retain_graph_false_lets_go_of_intermediate_values_with_the_same_gradients(cache):
    x, arrays, labels = mlp_data(np.random.default_rng(0))
    params = [ad.tensor(p) for p in arrays]
    for step_number in range(4):  # built, compiled, then run from the cache (cache on)
        with gradient_cache.disabled() if cache == "off" else contextlib.nullcontext():
            loss, hidden, logits, grads = mlp_step(x, params, labels, retain_graph=False)
        with gradient_cache.disabled():
            _, kept_hidden, _, expected = mlp_step(x, params, labels, retain_graph=True)
        for got, want in zip(grads, expected, strict=True):
            assert got.dtype == np.float32
            np.testing.assert_allclose(got.value, want.value, rtol=1e-6, atol=1e-7)
        # Values only the graph held went (the pre-activation); the loss, the leaves,
        # the gradients and what the caller holds (hidden, logits) stay.
        assert hidden.inputs[0].value is None, f"step {step_number}"
        assert hidden.value is not None and logits.value is not None
        assert kept_hidden.inputs[0].value is not None
        assert loss.value is not None and all(p.value is not None for p in params)
        assert all(isinstance(g.value, np.ndarray) for g in grads)
    if cache == "on":
        assert counts() == (2, 2)


def test_retain_graph_false_keeps_a_wrt_node_that_is_not_a_leaf():
    x = ad.tensor([0.5, -1.0])
    for _ in range(3):
        hidden = ad.tanh(x)
        loss = ad.sum(hidden * hidden)
        (d_hidden,) = ad.gradients(loss, [hidden], retain_graph=False)
        assert hidden.value is not None  # asked about: kept
        np.testing.assert_allclose(d_hidden.value, 2 * np.tanh([0.5, -1.0]))


def test_a_cached_gradient_is_still_a_graph_after_its_forward_values_went():
    x = ad.tensor(np.array([0.3, 0.7]))
    for _ in range(3):
        loss = ad.sum(ad.sin(x) * ad.exp(x))
        (dx,) = ad.gradients(loss, [x], retain_graph=False)
    assert isinstance(dx, CachedGradient) and loss.inputs[0].value is None
    expected = np.exp([0.3, 0.7]) * (np.cos([0.3, 0.7]) + np.sin([0.3, 0.7]))
    np.testing.assert_allclose(dx.value, expected)
    assert dx.op.name and dx.inputs  # built now, from the leaves: the values are recomputed
    np.testing.assert_allclose(ad.evaluate(dx), expected)
    (ddx,) = ad.gradients(ad.sum(dx), [x])  # and differentiated again
    np.testing.assert_allclose(ddx.value, 2 * np.exp([0.3, 0.7]) * np.cos([0.3, 0.7]))


def test_retain_graph_false_lowers_the_peak_memory_of_a_step():
    x, arrays, labels = mlp_data(np.random.default_rng(1), sizes=(64, 512, 512, 10), batch=256)
    params = [ad.tensor(p) for p in arrays]
    w1, b1, w2, b2, w3, b3 = params

    def peak(retain_graph):
        for _ in range(3):  # a step run from the cache (steps 1 and 2 build)
            tracemalloc.start()
            h = ad.relu(ad.relu(ad.constant(x) @ w1 + b1) @ w2 + b2)
            loss = ad.softmax_cross_entropy(h @ w3 + b3, labels)
            ad.gradients(loss, params, retain_graph=retain_graph)
            result = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            del h, loss
        return result

    kept, let_go = peak(True), peak(False)
    # Kept: 5 arrays of (256, 512) float32 (0.5 MiB each) live with the two weight
    # gradients; let go: the backward pass holds about two of them at a time.
    assert let_go < kept - 1.0 * 2**20, (kept / 2**20, let_go / 2**20)


def test_retain_graph_false_keeps_what_is_held_elsewhere_and_refuses_a_second_pass():
    # A node built once and used at every step (a module's constant), and a node the
    # caller keeps in a variable, are not the graph's alone: they keep their values.
    w = ad.tensor(np.array([1.0, 2.0]))
    shared = ad.exp(ad.constant(np.zeros(2)))
    for step_number in range(4):  # built, compiled, then from the cache
        scores = w * shared
        loss = ad.sum(ad.tanh(scores) * 3.0)
        (dw,) = ad.gradients(loss, [w], retain_graph=False)
        expected = 3.0 * (1 - np.tanh([1.0, 2.0]) ** 2)
        np.testing.assert_allclose(dw.value, expected, err_msg=f"step {step_number}")
        assert shared.value is not None and scores.value is not None
        assert loss.inputs[0].value is None  # tanh(scores) * 3: the graph's own
    with pytest.raises(ValueError, match="retain_graph=True the first time"):
        ad.gradients(loss, [w])  # its values went: PyTorch refuses too
