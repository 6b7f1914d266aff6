"""Memory planning, checkpointing and the parallel schedule (autodiff/memory.py).

A few exact small graphs first, as readable examples; then properties on random graphs
(no buffer holds two live values, the plan changes no result, checkpointed gradients
equal plain ones, levels are a topological grouping); then the figures that matter: a
deep chain's peak memory under checkpointing, and the plan against what NumPy allocates.
"""

import inspect
import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import autodiff as ad
from autodiff import memory
from strategies import DEVICES, chains, graphs

N = 1000  # elements of the vectors below: 8000 bytes each in float64


def vector():
    return ad.Variable("x", shape=(N,))


# Readable examples ------------------------------------------------------------------------


def tiny_chain():
    """x -> exp -> sin -> * 2, planned: (x, its three ops, the plan)."""
    x = vector()
    a = ad.exp(x)
    b = ad.sin(a)
    c = b * 2
    return x, (a, b, c), memory.plan([c], {x: np.zeros(N)})


def test_liveness_of_a_tiny_chain():
    _, (a, b, c), p = tiny_chain()
    assert p.steps == [a, b, c]
    # (step that computes it, last step that reads it); the output is read after the end.
    assert p.live == {a: (0, 1), b: (1, 2), c: (2, 3)}


def test_elementwise_chain_runs_in_place_in_one_buffer():
    a, (c, d, e), p = tiny_chain()
    assert p.buffer == {c: 0, d: 0, e: 0}
    assert p.in_place == {d: c, e: d}  # sin writes over exp's output, * over sin's
    assert p.naive_bytes == 3 * 8 * N
    assert p.peak_bytes == 8 * N
    x = np.linspace(-1, 1, N)
    (planned,) = ad.Executor([e], plan=p).run({a: x})
    np.testing.assert_array_equal(planned, np.sin(np.exp(x)) * 2)


def test_naive_freed_and_planned_bytes_of_a_small_graph():
    x = vector()
    y, z = ad.exp(x), ad.sin(x)
    w = y * z  # y and z die here: w is written over y
    out = w.sum()
    p = memory.plan([out], {x: np.zeros(N)})
    assert p.naive_bytes == 3 * 8000 + 8
    assert p.timeline() == {
        "naive": [8000, 16000, 24000, 24008],
        "freed": [8000, 16000, 24000, 8008],  # during step 2: y, z and w
        "planned": [8000, 16000, 16000, 8008],  # w in place over y
    }
    assert p.peak_bytes == 16000
    assert p.in_place == {w: y}


def test_a_dead_buffer_of_the_same_size_is_reused():
    x = ad.Variable("x", shape=(50, 50))
    h1 = x @ x  # matmul cannot work in place, but h3 can take h1's buffer
    h2 = h1 @ x
    h3 = h2 @ x
    p = memory.plan([h3], {x: np.eye(50)})
    assert [p.buffer[h] for h in (h1, h2, h3)] == [0, 1, 0]
    assert p.peak_bytes == 2 * 50 * 50 * 8


def test_views_cost_nothing_and_keep_their_base_alive():
    x = ad.Variable("x", shape=(100, 10))
    y = ad.exp(x)
    t = y.T  # a view: no bytes of its own, but y must live while t is read
    out = ad.matmul(t, x)
    p = memory.plan([out], {x: np.ones((100, 10))})
    assert p.views == {t: y}
    assert p.buffer[t] == p.buffer[y]
    assert p.held[y] == (0, 2)  # until matmul reads t
    assert p.naive_bytes == 8000 + 800


def test_summary_reads_like_a_table():
    x = vector()
    p = memory.plan([ad.sin(ad.exp(x)) * 2], {x: np.zeros(N)})
    text = p.summary()
    assert "naive" in text and "planned" in text
    assert "in place over step 0" in text
    assert "3.0x less than naive" in repr(p)


# Errors a student can act on -----------------------------------------------------------


def test_a_missing_feed_names_the_placeholder():
    x = ad.Variable("pixels")
    with pytest.raises(ValueError, match="'pixels'"):
        memory.plan([ad.exp(x)], {})


def test_a_plan_fed_other_shapes_names_both_shapes():
    x = ad.Variable("x")
    y = ad.exp(x)
    executor = ad.Executor([y], plan=memory.plan([y], {x: np.zeros(3)}))
    with pytest.raises(ad.ShapeError, match=r"'x' of shape \(3,\).*shape \(4,\)"):
        executor.run({x: np.zeros(4)})


def test_a_plan_for_other_outputs_is_refused():
    x = ad.Variable("x")
    p = memory.plan([ad.exp(x)], {x: np.zeros(3)})
    with pytest.raises(ValueError, match="other outputs"):
        ad.Executor([ad.sin(x)], plan=p)


def test_shape_inference_finds_shape_errors_before_running():
    a, b = ad.Variable("a"), ad.Variable("b")
    with pytest.raises(ad.ShapeError, match=r"matmul.*\(2, 3\).*\(2, 3\)"):
        memory.plan([a @ b], {a: np.zeros((2, 3)), b: np.zeros((2, 3))})
    with pytest.raises(ad.ShapeError, match=r"add.*\(2,\).*\(3,\)"):
        memory.plan([a + b], {a: np.zeros(2), b: np.zeros(3)})
    with pytest.raises(ad.ShapeError, match="ambiguous"):  # NumPy refuses it too
        memory.plan([a.reshape(0, -1)], {a: np.zeros((2, 0))})


def test_float32_logits_with_float64_probabilities_give_a_float64_loss():
    z, p = ad.Variable("z"), ad.Variable("p")
    loss = ad.softmax_cross_entropy(z, p)
    feed = {z: np.zeros((2, 3), "float32"), p: np.full((2, 3), 1 / 3)}
    plan = memory.plan([loss], feed)
    assert plan.specs[loss].dtype == np.float64
    (value,) = ad.Executor([loss], plan=plan).run(feed)
    assert value == pytest.approx(np.log(3))


@pytest.mark.parametrize("bad", ["sqr", 0, -2, 1.5, True])
def test_a_bad_checkpoint_value_says_what_is_allowed(bad):
    x = ad.Variable("x")
    with pytest.raises(ValueError, match="checkpoint"):
        ad.gradients(ad.tanh(ad.tanh(x)), [x], checkpoint=bad)


# Properties on random graphs ---------------------------------------------------------------


@given(graph=graphs())
def test_no_buffer_holds_two_live_values(graph):
    p = memory.plan(graph.outputs, graph.feed)
    by_buffer = {}
    for owner, interval in p.held.items():
        by_buffer.setdefault(p.buffer[owner], []).append((interval, owner))
        assert p.buffer_bytes[p.buffer[owner]] == memory.nbytes(p.specs[owner])
    for values in by_buffer.values():
        values.sort(key=lambda item: item[0])
        for (before, old), (after, new) in zip(values, values[1:], strict=False):
            # Either the old value is dead, or the new one is written over it in place,
            # by an elementwise op, at the step that reads the old one for the last time.
            assert before[1] < after[0] or (before[1] == after[0] and p.in_place[new] is old)
            assert p.specs[old].dtype == p.specs[new].dtype
    for view, owner in p.views.items():
        assert p.buffer[view] == p.buffer.get(owner)


@given(graph=graphs())
def test_a_planned_run_gives_identical_results(graph):
    expected = ad.Executor(graph.outputs).run(graph.feed)
    p = memory.plan(graph.outputs, graph.feed)
    planned = ad.Executor(graph.outputs, plan=p).run(graph.feed)
    for want, got in zip(expected, planned, strict=True):
        np.testing.assert_array_equal(got, want)
        assert np.asarray(got).dtype == np.asarray(want).dtype
    assert p.peak_bytes <= p.naive_bytes


@given(graph=graphs())
def test_levels_are_a_topological_grouping(graph):
    groups = memory.levels(graph.outputs)
    level = {node: k for k, group in enumerate(groups) for node in group}
    assert len(level) == sum(len(group) for group in groups)  # each node once
    assert set(level) == set(ad.find_topo_sort(graph.outputs))
    for node, k in level.items():
        assert all(level[x] < k for x in node.inputs)
        assert k == 0 or any(level[x] == k - 1 for x in node.inputs)  # as early as it can


@given(data=st.data())
def test_checkpointed_gradients_equal_plain_ones(data):
    graph, leaves = data.draw(chains())
    (loss,) = graph.outputs
    forward_ops = [n for n in graph.nodes if not n.op.is_leaf]
    checkpoint = data.draw(
        st.sampled_from(["sqrt", 1, 2, 3]) | st.lists(st.sampled_from(forward_ops), max_size=4)
    )
    plain = ad.Executor(ad.gradients(loss, leaves)).run(graph.feed)
    grads = ad.gradients(loss, leaves, checkpoint=checkpoint)
    checkpointed = ad.Executor(grads).run(graph.feed)
    planned = ad.Executor(grads, plan=memory.plan(grads, graph.feed)).run(graph.feed)
    for want, got, got_planned in zip(plain, checkpointed, planned, strict=True):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got_planned, want)


# Checkpointing -------------------------------------------------------------------------------


def tanh_chain(layers, size=4096):
    """h = tanh(h * w_k), k = 1..layers, on a vector; returns x, the weights and sum(h)."""
    x = ad.Variable("x", shape=(size,))
    weights = [ad.Variable(f"w{k}", shape=(size,)) for k in range(layers)]
    h = x
    for w in weights:
        h = ad.tanh(h * w)
    return x, weights, h.sum()


def chain_feed(x, weights, size=4096):
    rng = np.random.default_rng(0)
    feed = {x: rng.normal(size=size)}
    feed.update({w: 1 + 0.5 * rng.normal(size=size) for w in weights})
    return feed


def test_the_gradient_graph_reads_only_checkpoints():
    x = ad.Variable("x")
    layers = [x]
    for _ in range(9):
        layers.append(ad.tanh(layers[-1]))
    loss = layers[-1].sum()  # the chain: 9 tanh, then sum
    (dx,) = ad.gradients(loss, [x], checkpoint=3)
    forward = set(ad.find_topo_sort([loss]))
    read = {i for n in ad.find_topo_sort([dx]) if n not in forward for i in n.inputs}
    # Every third op is kept; the seed ones_like(loss) reads only the loss's shape.
    assert read & forward == {x, layers[3], layers[6], layers[9], loss}
    recomputed = [n for n in ad.find_topo_sort([dx]) if n.name.startswith("recomputed")]
    assert len(recomputed) == 6  # each tanh between checkpoints once; checkpoints are kept


def peak(layers, checkpoint):
    x, weights, loss = tanh_chain(layers)
    grads = ad.gradients(loss, [x], checkpoint=checkpoint)
    return memory.plan([loss, *grads], chain_feed(x, weights)).peak_bytes


def test_sqrt_checkpointing_shrinks_a_deep_chain_more_than_5x():
    plain, checkpointed = peak(400, None), peak(400, "sqrt")
    assert plain >= 5 * checkpointed
    # Plain: the 400 activations of 32 KiB each. Checkpointed: grows like sqrt(n).
    assert plain >= 400 * 4096 * 8
    assert peak(100, "sqrt") * 2.5 > checkpointed > peak(100, "sqrt") * 1.5


def measured_peak(executor, feed):
    """Bytes NumPy allocated at most during one run (NumPy reports to tracemalloc)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        executor.run(feed)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("checkpoint", [None, "sqrt"])
def test_the_plan_predicts_what_numpy_allocates(checkpoint):
    x, weights, loss = tanh_chain(30, size=20_000)
    feed = chain_feed(x, weights, size=20_000)
    outputs = [loss, *ad.gradients(loss, [x], checkpoint=checkpoint)]
    p = memory.plan(outputs, feed)
    measured = measured_peak(ad.Executor(outputs, plan=p), feed)
    # The rest is Python's own bookkeeping (a dict of values, array headers): ~1%.
    assert p.peak_bytes <= measured <= 1.02 * p.peak_bytes


@pytest.mark.parametrize("device", DEVICES)
def test_a_planned_run_on_each_device(device):
    x, weights, loss = tanh_chain(20, size=1000)
    feed = {k: ad.backend.to_device(v, device) for k, v in chain_feed(x, weights, 1000).items()}
    grads = ad.gradients(loss, [x, *weights], checkpoint="sqrt")
    expected = ad.Executor([loss, *grads]).run(feed)
    p = memory.plan([loss, *grads], feed)
    planned = ad.Executor([loss, *grads], plan=p).run(feed)
    for want, got in zip(expected, planned, strict=True):
        assert ad.backend.device_of(got) == device
        np.testing.assert_array_equal(ad.backend.to_numpy(got), ad.backend.to_numpy(want))


@pytest.mark.gpu
@pytest.mark.skipif(
    "gpu" not in ad.backend.available_devices()
    or ad.backend.namespace(ad.tensor([0.0], device="gpu").value).__name__ != "fakecupy",
    reason="counts the copies of the CuPy double (AUTODIFF_FAKE_GPU=1 pytest -m gpu)",
)
def test_in_place_steps_on_the_gpu_copy_nothing():
    """CuPy copies an input that overlaps ``out`` unless it is that very array: a planned
    step that overwrites its input must be handed the array the last step returned."""
    import fakecupy

    a, (c, d, e), p = tiny_chain()
    assert p.in_place == {d: c, e: d}
    x = ad.backend.to_device(np.linspace(-1, 1, N), "gpu")
    before = fakecupy.overlap_copies
    (planned,) = ad.Executor([e], plan=p).run({a: x})
    assert fakecupy.overlap_copies == before, "an in-place step was given another view"
    np.testing.assert_allclose(
        ad.backend.to_numpy(planned), np.sin(np.exp(np.linspace(-1, 1, N))) * 2
    )


def test_every_writer_names_an_op_and_writes_what_the_op_computes():
    """memory.WRITERS is keyed by op name: a renamed op would silently lose its writer."""
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0.5, 2.0, (3, 4)), rng.uniform(0.5, 2.0, (3, 4))
    attrs = {"clip": {"lo": 0.7, "hi": 1.5}, "sum": {"axis": 0, "keepdims": False},
             "matmul": {"trans_A": False, "trans_B": True}}  # fmt: skip
    for name, write in ad.memory.WRITERS.items():
        op = ad.Op.registry.get(name)
        assert op is not None, f"WRITERS names {name!r}, which is no registered op"
        arity = len(inspect.signature(op._instance.compute).parameters) - len(attrs.get(name, {}))
        inputs = [a, b][:arity]
        expected = op._instance.compute(*inputs, **attrs.get(name, {}))
        out = np.empty_like(expected)
        result = write(out, *inputs, **attrs.get(name, {}))
        np.testing.assert_array_equal(out, expected, err_msg=f"{name} wrote another value")
        assert result is out, f"{name}'s writer did not write into the array it was given"
