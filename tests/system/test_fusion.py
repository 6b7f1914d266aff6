"""Kernel fusion (autodiff/fusion.py): which nodes are grouped, the same values bit for
bit, gradients and tangents through fused nodes, and the GPU path: one ``cupy.fuse``
kernel per distinct group, and a fallback that is slower but never wrong."""

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import autodiff as ad
from autodiff import backend, fusion
from autodiff.fusion import MAX_GROUP, fuse_elementwise
from strategies import DEVICES, graphs, random_graphs, requires_gpu


def ops_of(node):
    return [ins.op.name for ins in node.attrs["program"].instructions]


def test_a_gradient_formula_becomes_one_node_with_literals_written_in():
    y, g = ad.Variable("y"), ad.Variable("g")
    (fused,), report = fuse_elementwise([g * (1 - y * y)])
    assert fused.op.name == "fused" and list(fused.inputs) == [y, g]
    assert ops_of(fused) == ["multiply", "subtract", "multiply"]
    assert str(fused.attrs["program"]) == "x1 × (1 − x0 × x0)"
    assert (report.nodes_before, report.nodes_after, report.fused_ops) == (6, 3, 3)
    assert "1 group of 3 ops" in str(report)


def test_values_read_outside_a_group_and_outputs_stay_nodes_of_their_own():
    x = ad.Variable("x")
    shared = ad.sin(x) * 2  # read by two different groups below
    a, b = ad.exp(shared) + 1, ad.tanh(shared) - 1
    out = a * 3
    new, report = fuse_elementwise([out, a, b])
    assert [n.op.name for n in new] == ["multiply", "fused", "fused"]
    assert new[0].inputs[0] is new[1]  # the output a is read by out, not folded into it
    shared_new = new[1].inputs[0]
    assert shared_new is new[2].inputs[0] and shared_new.op.name == "fused"
    assert ops_of(shared_new) == ["sin", "multiply"]
    assert ops_of(new[1]) == ["exp", "add"] and ops_of(new[2]) == ["tanh", "subtract"]
    assert report.fused_ops == 6


def test_a_value_read_twice_inside_one_group_is_computed_once():
    x = ad.Variable("x")
    s = ad.sin(x)
    (fused,), _ = fuse_elementwise([s * s + s])
    assert ops_of(fused) == ["sin", "multiply", "add"]  # one sin
    assert float(ad.evaluate(fused, {x: 0.5})) == pytest.approx(np.sin(0.5) ** 2 + np.sin(0.5))


def test_reductions_matmuls_and_shape_ops_end_a_group():
    x, w = ad.Variable("x"), ad.Variable("w")
    y = ad.tanh(ad.exp(x) @ w).sum() * 2
    (new,), report = fuse_elementwise([y])
    assert new.op.name == "multiply" and report.groups == []
    assert [n.op.name for n in ad.find_topo_sort([new])].count("fused") == 0


def test_long_chains_are_cut_into_groups_of_at_most_max_group():
    x = ad.Variable("x")
    y = x
    for _ in range(2 * MAX_GROUP + 5):
        y = ad.sin(y)
    (new,), report = fuse_elementwise([y])
    sizes = sorted(len(ops_of(n)) for n in ad.find_topo_sort([new]) if n.op.name == "fused")
    assert sizes == [5, MAX_GROUP, MAX_GROUP]
    np.testing.assert_array_equal(ad.evaluate(new, {x: 0.3}), ad.evaluate(y, {x: 0.3}))


def test_fusing_twice_changes_nothing_and_the_input_graph_is_untouched():
    x = ad.Variable("x")
    y = ad.exp(-x * x)
    nodes = ad.find_topo_sort([y])
    inputs = [n.inputs for n in nodes]
    once, _ = fuse_elementwise([y])
    twice, report = fuse_elementwise(once)
    assert twice[0] is once[0] and report.groups == []
    assert [n.inputs for n in ad.find_topo_sort([y])] == inputs


@given(st.one_of(random_graphs(), graphs()))  # passes' and memory's graphs
def test_fused_graphs_give_the_same_bits(graph):
    fused, _ = fuse_elementwise(graph.outputs)
    for a, b in zip(
        ad.evaluate(fused, graph.feed), ad.evaluate(graph.outputs, graph.feed), strict=True
    ):
        assert np.shape(a) == np.shape(b) and np.result_type(a) == np.result_type(b)
        np.testing.assert_array_equal(a, b)


@given(random_graphs())
def test_gradients_and_tangents_through_fused_nodes(graph):
    output = graph.outputs[0]
    if not graph.wrt or not ad.backend.is_floating(output.dtype or "float64"):
        return
    (fused,), _ = fuse_elementwise([output])
    expected = ad.evaluate(ad.gradients(output, graph.wrt), graph.feed)
    got = ad.evaluate(ad.gradients(fused, graph.wrt), graph.feed)
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
    tangents = [ad.ones_like(x) for x in graph.wrt]
    np.testing.assert_allclose(
        ad.evaluate(ad.jvp_graph(fused, graph.wrt, tangents), graph.feed),
        ad.evaluate(ad.jvp_graph(output, graph.wrt, tangents), graph.feed),
        rtol=1e-9,
        atol=1e-9,
    )


def test_second_derivatives_through_a_fused_node():
    x = ad.tensor(0.7)
    (y,), _ = fuse_elementwise([ad.sin(x) * x * x])
    (dy,) = ad.gradients(y, [x])
    (ddy,) = ad.gradients(dy, [x])
    v = 0.7
    assert float(ad.evaluate(dy)) == pytest.approx(np.cos(v) * v * v + 2 * v * np.sin(v))
    expected = -np.sin(v) * v * v + 4 * v * np.cos(v) + 2 * np.sin(v)
    assert float(ad.evaluate(ddy)) == pytest.approx(expected)


def test_executor_fuse_runs_a_training_step_with_the_same_bits():
    from autodiff import nn

    model = nn.MLP([4, 16, 3], activation="tanh", seed=0)
    x, labels = ad.Variable("x", (None, 4), "float32"), ad.Variable("y", (None,), "int64")
    loss = nn.cross_entropy(model(x), labels)
    outputs = [loss, *ad.gradients(loss, model.parameters())]
    plain, fused = ad.Executor(outputs), ad.Executor(outputs, fuse=True)
    assert fused.fusion_report.groups and fused.optimize_report is None
    rng = np.random.default_rng(0)
    feed = {x: rng.standard_normal((8, 4)).astype("float32"), labels: rng.integers(0, 3, 8)}
    for a, b in zip(fused.run(feed), plain.run(feed), strict=True):
        assert a.dtype == b.dtype == np.float32
        np.testing.assert_array_equal(a, b)


def test_executor_fuse_refuses_feeds_that_fusion_may_have_merged_and_plans():
    x = ad.Variable("x")
    h = ad.sin(x) * 2
    executor = ad.Executor([ad.exp(h) + 1], fuse=True)
    with pytest.raises(ValueError, match="fuse=False"):
        executor.run({h: 1.0})
    plan = ad.memory.plan([h], {x: np.ones(2)})
    with pytest.raises(ValueError, match="fuse_elementwise"):
        ad.Executor([h], plan=plan, fuse=True)


def test_fused_graphs_can_be_optimised_and_planned():
    x = ad.Variable("x", shape=(100,), dtype="float64")
    y = ad.tanh(x) * ad.tanh(x) + 1
    (fused,), _ = fuse_elementwise([y])
    (small,), _ = ad.passes.optimize([fused])
    feed = {x: np.linspace(-1, 1, 100)}
    plan = ad.memory.plan([small], feed)
    assert plan.peak_bytes >= 800
    (value,) = ad.Executor([small], plan=plan).run(feed)
    np.testing.assert_array_equal(value, ad.evaluate(y, feed))


def test_programs_print_as_formulas_with_the_parentheses_they_need():
    a, b, c = ad.Variable("a"), ad.Variable("b"), ad.Variable("c")
    cases = {
        "x0 − (x1 − x2)": a - (b - c),
        "x0 − x1 − x2": a - b - c,
        "x0 ÷ (x1 × x2)": a / (b * c),
        "−(x0 + x1) × x2": -(a + b) * c,
        "(x0 + x1)**2": (a + b) ** 2,
        "exp(x0 + x1) + 0.5": ad.exp(a + b) + 0.5,
    }
    for text, expression in cases.items():
        (fused,), _ = fuse_elementwise([expression])
        assert str(fused.attrs["program"]) == text


def test_fused_functions_refuse_what_cannot_be_fused():
    with pytest.raises(ValueError, match="elementwise"):
        fusion.fused(lambda a: ad.exp(a).sum() * 2)(ad.tensor([1.0]))
    with pytest.raises(ValueError, match="elementwise"):
        fusion.fused(lambda a: ad.exp(a))(ad.tensor([1.0]))  # one op: nothing to fuse


def test_drawings_show_the_fused_formula():
    x = ad.Variable("x")
    (fused,), _ = fuse_elementwise([ad.exp(-x * x)])
    assert "exp(−x0 × x0)" in ad.viz.draw(fused).source


# -- on the GPU: one kernel per group, or the ops one by one when CuPy cannot fuse ----------


@pytest.mark.parametrize("device", DEVICES)
def test_fused_graphs_run_where_their_inputs_are(device):
    x = ad.Variable("x", shape=(5,), dtype="float32")
    y = (ad.tanh(x) * ad.sigmoid(x) + ad.sin(x) * x).sum()
    outputs = [y, *ad.gradients(y, [x])]
    feed = {x: backend.to_device(np.linspace(-2, 2, 5).astype("float32"), device)}
    for a, b in zip(
        ad.Executor(outputs, fuse=True).run(feed), ad.Executor(outputs).run(feed), strict=True
    ):
        assert backend.device_of(a) == device and a.dtype == np.float32
        np.testing.assert_allclose(backend.to_numpy(a), backend.to_numpy(b), rtol=1e-6)


@requires_gpu
def test_each_distinct_group_is_compiled_once_on_the_gpu(monkeypatch):
    xp = backend.namespace(ad.tensor([0.0], device="gpu").value)
    built = []
    real_fuse = xp.fuse

    def counting_fuse(*args, **kwargs):
        built.append(kwargs.get("kernel_name"))
        return real_fuse(*args, **kwargs)

    monkeypatch.setattr(xp, "fuse", counting_fuse)
    monkeypatch.setattr(fusion, "_kernels", {})
    monkeypatch.setattr(fusion, "_failed", {})
    tanh_grad = fusion.fused(lambda g, y: g * (1 - y * y))
    for n in (3, 4, 3):
        g, y = ad.tensor(np.ones(n), device="gpu"), ad.tensor(np.full(n, 0.5), device="gpu")
        z = tanh_grad(g, y)
        assert backend.device_of(z.value) == "gpu"
        np.testing.assert_allclose(backend.to_numpy(z.value), np.full(n, 0.75))
    assert built == ["autodiff_fused_multiply_subtract_multiply"]
    assert fusion.kernel_counts() == {"kernels": 1, "failed": 0}


@requires_gpu
def test_a_group_cupy_cannot_compile_runs_op_by_op_with_a_warning(monkeypatch):
    xp = backend.namespace(ad.tensor([0.0], device="gpu").value)

    def broken_fuse(**kwargs):
        def compile_kernel(function):
            def kernel(*inputs):
                raise NotImplementedError("this op is not supported in fusion")

            return kernel

        return compile_kernel

    monkeypatch.setattr(xp, "fuse", broken_fuse)
    monkeypatch.setattr(fusion, "_kernels", {})
    monkeypatch.setattr(fusion, "_failed", {})
    double_exp = fusion.fused(lambda a: ad.exp(a) * 2)
    with pytest.warns(RuntimeWarning, match="one at a time"):
        z = double_exp(ad.tensor([0.0, 1.0], device="gpu"))
    np.testing.assert_allclose(backend.to_numpy(z.value), 2 * np.exp([0.0, 1.0]), rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once: the second call is quiet
        double_exp(ad.tensor([2.0], device="gpu"))
    assert fusion.kernel_counts() == {"kernels": 0, "failed": 1}


@requires_gpu
def test_a_kernel_that_changes_the_dtype_is_not_used(monkeypatch):
    """float32 must stay float32: a kernel whose result differs in dtype (or shape) from
    the ops' own is dropped, once, for running the ops one at a time."""
    xp = backend.namespace(ad.tensor([0.0], device="gpu").value)

    def upcasting_fuse(**kwargs):
        return lambda function: lambda *inputs: function(*inputs).astype("float64")

    monkeypatch.setattr(xp, "fuse", upcasting_fuse)
    monkeypatch.setattr(fusion, "_kernels", {})
    monkeypatch.setattr(fusion, "_failed", {})
    monkeypatch.setattr(fusion, "_verified", set())
    square_plus_one = fusion.fused(lambda a: a * a + 1)
    with pytest.warns(RuntimeWarning, match="float64"):
        z = square_plus_one(ad.tensor(np.array([2.0], dtype=np.float32), device="gpu"))
    assert z.dtype == np.float32 and float(z.value[0]) == 5.0
