"""Graph passes: readable examples of each rewrite, then properties on random graphs
(values, gradients and dtypes unchanged, the input graph untouched, a fixed point)."""

import pathlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import autodiff as ad
from autodiff.passes import (
    OptimizeReport,
    PassReport,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_constants,
    optimize,
    simplify_algebra,
)
from strategies import DEVICES, random_graphs

TIGHT = {"rtol": 1e-12, "atol": 1e-12}  # rewrites are exact (up to the sign of zero)
GRADIENT = {"rtol": 1e-9, "atol": 1e-9}  # other gradient graphs: sums may be reordered

PASSES = [
    eliminate_dead_code,
    fold_constants,
    eliminate_common_subexpressions,
    simplify_algebra,
    optimize,
]


def ops_of(nodes):
    return [n.op.name for n in ad.find_topo_sort(nodes)]


def count(nodes):
    return len(ad.find_topo_sort(nodes))


# Algebra ------------------------------------------------------------------------------------


def test_times_one_is_x():
    x = ad.Variable("x")
    for y in (x * 1, 1 * x, x * ad.ones_like(x), x / 1.0, x**1):
        (result,), report = simplify_algebra(y)
        assert result is x
        assert (report.nodes_before, report.nodes_after) == (count([y]), 1)


def test_plus_zero_is_x():
    x = ad.Variable("x")
    for y in (x + 0, 0.0 + x, x - 0, x + ad.zeros_like(x)):
        (result,), _ = simplify_algebra(y)
        assert result is x


def test_zero_minus_x_and_double_negation():
    x = ad.Variable("x")
    (result,), _ = simplify_algebra(0 - x)
    assert ops_of([result]) == ["placeholder", "negative"]
    (result,), _ = simplify_algebra(ad.negative(-x))
    assert result is x
    (result,), _ = simplify_algebra(x + -ad.sin(x))  # x + (-y) = x - y
    assert ops_of([result]) == ["placeholder", "sin", "subtract"]


def test_times_zero_keeps_the_broadcast_shape():
    # x of shape (3, 1) times zeros of shape (1, 4) is zeros of shape (3, 4), not x's shape.
    for x in (ad.Variable("x", shape=(3, 1), dtype="float64"), ad.tensor(np.ones((3, 1)))):
        zeros = ad.constant(np.zeros((1, 4)))
        (result,), _ = simplify_algebra(x * zeros)
        assert result.op.name == "constant"
        assert result.value.shape == (3, 4) and result.value.dtype == np.float64
        assert not result.value.any()


def test_times_zero_is_zeros_like_x_when_x_has_the_shape():
    x = ad.Variable("x")
    (result,), _ = simplify_algebra(ad.sin(x) * 0)
    assert ops_of([result]) == ["placeholder", "sin", "zeros_like"]
    value = ad.evaluate(result, {x: np.ones((2, 3), dtype=np.float32)})
    assert value.shape == (2, 3) and value.dtype == np.float32


def test_no_rewrite_that_would_change_shape_or_dtype():
    x32 = ad.Variable("x", shape=(3,), dtype="float32")
    kept = [
        x32 * ad.constant(np.ones(3)),  # float32 * float64 ones is float64
        x32 * ad.constant(np.ones((2, 3), dtype=np.float32)),  # broadcasts to (2, 3)
        ad.Variable("y") * ad.ones_like(ad.Variable("z")),  # z may be bigger than y
        x32 * ad.zeros_like(ad.Variable("z")),  # the product's shape is unknown
    ]
    for y in kept:
        (result,), _ = simplify_algebra(y)
        assert result is y


def test_float32_stays_float32():
    x = ad.Variable("x", shape=(2,), dtype="float32")
    y = (x * 1.0 + 0.0) * ad.constant(np.ones(2, dtype=np.float32)) - ad.zeros_like(x)
    (result,), _ = optimize(y)
    assert result is x
    (dx,), _ = optimize(ad.gradients(y.sum(), [x]))
    assert ad.evaluate(dx, {x: np.ones(2, dtype=np.float32)}).dtype == np.float32


def test_no_op_shape_ops_are_dropped():
    x = ad.Variable("x", shape=(None, 3), dtype="float64")
    y = ad.sin(x)
    for same in (
        ad.sum_to_like(y, x),
        ad.broadcast_like(y, x),
        ad.reshape_like(y, x),
        ad.reshape(ad.Variable("v", shape=(2, 3)), (2, 3)),
        ad.broadcast_to(ad.Variable("v", shape=(2, 3)), (2, 3)),
        ad.transpose(ad.Variable("v", shape=(3,))),
        ad.transpose(y, (0, 1)),
    ):
        (result,), _ = simplify_algebra(same)
        assert result is same.inputs[0]
    real = ad.sum_to_like(y, ad.Variable("b", shape=(3,)))  # sums over the batch axis
    assert simplify_algebra(real)[0][0] is real


def test_ones_like_chains_collapse():
    # The gradient of sum(x): ones_like(loss) broadcast back to x is ones_like(x).
    x = ad.Variable("x", shape=(None, 3), dtype="float64")
    loss = ad.sum(ad.tanh(x))
    (dx,), _ = optimize(ad.gradients(loss, [x]))
    assert "sum" not in ops_of([dx]) and "broadcast_like" not in ops_of([dx])
    feed = {x: np.linspace(-1, 1, 6).reshape(2, 3)}
    np.testing.assert_allclose(ad.evaluate(dx, feed), 1 - np.tanh(feed[x]) ** 2)


# Common subexpressions, dead code, constants ------------------------------------------------


def test_cse_merges_sin_x_plus_sin_x():
    x = ad.Variable("x")
    y = ad.sin(x) + ad.sin(x)
    (result,), report = eliminate_common_subexpressions(y)
    assert result.inputs[0] is result.inputs[1]
    assert ops_of([result]) == ["placeholder", "sin", "add"]
    assert (report.nodes_before, report.nodes_after) == (4, 3)


def test_cse_merges_equal_constants_and_commuted_products_only():
    x, y = ad.Variable("x"), ad.Variable("y")
    (a, b, c), _ = eliminate_common_subexpressions([x * 2.0, 2.0 * x, x * 2])
    assert a is b  # x * 2.0 == 2.0 * x, exactly
    assert c is not a  # 2 and 2.0 are different constants
    (a, b), _ = eliminate_common_subexpressions([x - y, y - x])
    assert a is not b


def test_dead_code_is_removed():
    # The exp branch is read only for its shape: zeros_like needs x's shape, nothing else.
    x = ad.Variable("x")
    y = ad.zeros_like(ad.exp(ad.sin(x))) + x
    (result,), report = eliminate_dead_code(y)
    assert ops_of([result]) == ["placeholder", "zeros_like", "add"]
    assert report.removed == 2
    np.testing.assert_array_equal(ad.evaluate(result, {x: [1.0, 2.0]}), [1.0, 2.0])


def test_constants_fold_but_variables_do_not():
    (six,), report = fold_constants(ad.constant(2) * ad.constant(3))
    assert six.op.name == "constant" and six.value == 6
    assert str(report) == "fold_constants: 3 -> 1 nodes"
    x = ad.Variable("x")
    y = ad.constant(2.0) * x
    assert fold_constants(y)[0][0] is y


def test_tensors_fold_only_when_asked():
    w = ad.tensor([1.0, 2.0], name="w")
    y = ad.sin(w)
    assert fold_constants(y)[0][0] is y
    (folded,), _ = fold_constants(y, fold_tensors=True)
    assert folded.op.name == "constant"
    np.testing.assert_array_equal(folded.value, np.sin([1.0, 2.0]))


# The lecture's example and reports ----------------------------------------------------------


def test_gradient_graph_of_the_lecture_example_shrinks():
    # d/dx (x*y + sin(x)) = y + cos(x), d/dy = x: gradients() builds 11 nodes, with
    # ones_like and multiplications by ones (no sum_to_like: the declared shapes prove
    # none is needed); 4 remain: x, y, cos, add.
    x = ad.Variable("x", shape=(), dtype="float64")
    y = ad.Variable("y", shape=(), dtype="float64")
    grads = ad.gradients(x * y + ad.sin(x), [x, y])
    (dx, dy), report = optimize(grads)
    assert (report.nodes_before, report.nodes_after) == (11, 4)
    assert dy is x and ops_of([dx]) == ["placeholder", "cos", "placeholder", "add"]
    assert ad.evaluate([dx, dy], {x: 3.0, y: 4.0}) == [4.0 + np.cos(3.0), 3.0]


def test_shapes_unknown_keep_the_graph():
    # Undeclared x and y may broadcast (x of shape (3,), y of shape (2, 3)): the summing
    # back to x's shape is needed, so nothing may be dropped.
    x, y = ad.Variable("x"), ad.Variable("y")
    grads = ad.gradients(x * y + ad.sin(x), [x, y])
    new, report = optimize(grads)
    assert report.nodes_after == report.nodes_before
    feed = {x: np.ones(3), y: np.ones((2, 3))}
    for a, b in zip(ad.evaluate(new, feed), ad.evaluate(grads, feed), strict=True):
        np.testing.assert_array_equal(a, b)


def test_reports_print_as_tables():
    x = ad.Variable("x")
    _, report = optimize([x * 1 + ad.sin(x) * 0])
    assert isinstance(report, OptimizeReport)
    assert all(isinstance(p, PassReport) for p in report.passes)
    assert (report.nodes_before, report.nodes_after, report.rounds) == (7, 1, 2)
    text = str(report)
    assert "simplify_algebra" in text and "total, 2 rounds" in text
    assert text.splitlines()[-1].split()[-2:] == ["7", "1"]
    assert report._repr_html_().startswith("<table>")
    assert "<td>simplify_algebra</td>" in report.passes[1]._repr_html_()


def test_the_system_page_example_runs():
    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "system.md").read_text()
    section = page.split("## Graph optimisation", 1)[1]
    code = section.split("```python", 1)[1].split("```")[0]
    namespace = {}
    exec(compile(code, "docs/system.md (graph optimisation)", "exec"), namespace)
    assert namespace["report"].nodes_after == 4
    assert namespace["dx_value"] == pytest.approx(4 + np.cos(3.0))
    assert namespace["dy_value"] == 3.0


@pytest.mark.parametrize("a_pass", PASSES, ids=lambda p: p.__name__)
@pytest.mark.parametrize("bad", [3.0, np.ones(2), [ad.Variable("x"), "y"]], ids=repr)
def test_non_nodes_are_refused_by_name(a_pass, bad):
    with pytest.raises(TypeError, match=f"^{a_pass.__name__}: expected a Node"):
        a_pass(bad)


# Executor(optimize=True) ----------------------------------------------------------------------


def test_executor_runs_the_optimised_graph_in_the_order_asked():
    x = ad.Variable("x", shape=(), dtype="float64")
    y = ad.Variable("y", shape=(), dtype="float64")
    f = x * y + ad.sin(x)
    outputs = [f, *ad.gradients(f, [x, y]), f]
    plain, fast = ad.Executor(outputs), ad.Executor(outputs, optimize=True)
    assert fast.optimize_report is not None and plain.optimize_report is None
    assert len(fast.topo_order) < len(plain.topo_order)
    for feed in ({x: 3.0, y: 4.0}, {"x": 0.5, "y": -1.0}):
        assert fast.run(feed) == plain.run(feed)


def test_executor_feeds_leaves_that_optimising_removed():
    x = ad.Variable("x")
    z = ad.Variable("z")
    executor = ad.Executor([z + ad.sin(x) * 0], optimize=True)
    (value,) = executor.run({"x": 1.0, z: [1.0, 2.0]})  # x is gone, feeding it is fine
    np.testing.assert_array_equal(value, [1.0, 2.0])


def test_executor_outputs_are_not_the_leaves_own_arrays():
    w = ad.tensor([1.0, 2.0], name="w")
    executor = ad.Executor([w * 1.0], optimize=True)
    (value,) = executor.run()
    value[0] = 100.0  # an optimiser updating in place must not change w
    assert w.value[0] == 1.0


def test_executor_refuses_feeds_the_optimised_graph_cannot_take():
    w = ad.tensor(np.ones(3), name="w")
    c = ad.constant(2.0)
    h = ad.sin(w)
    executor = ad.Executor([h * c], optimize=True)
    executor.run({w: np.zeros(3)})  # a tensor of the same shape and dtype: fine
    with pytest.raises(ValueError, match="tensor 'w' as float64\\[3\\].*fed float64\\[4\\]"):
        executor.run({w: np.zeros(4)})
    with pytest.raises(ValueError, match="float32"):
        executor.run({w: np.zeros(3, dtype=np.float32)})
    for node in (c, h):
        with pytest.raises(ValueError, match="optimize=False"):
            executor.run({node: 1.0})


@pytest.mark.parametrize("device", DEVICES)
def test_optimised_graphs_run_where_their_leaves_are(device):
    w = ad.tensor(np.linspace(0.0, 1.0, 3).reshape(3, 1), name="w", device=device)
    zeros = ad.constant(np.zeros((1, 4)), device=device)  # w * zeros: a new constant
    y = (ad.sin(w) * 1.0 + w * zeros + ad.sin(w)).sum()
    outputs = [y, *ad.gradients(y, [w])]
    plain, fast = ad.Executor(outputs).run(), ad.Executor(outputs, optimize=True).run()
    for a, b in zip(fast, plain, strict=True):
        assert ad.backend.device_of(a) == device
        np.testing.assert_allclose(ad.backend.to_numpy(a), ad.backend.to_numpy(b), **TIGHT)


# Properties on random graphs ----------------------------------------------------------------

ALL_PASSES = st.sampled_from(PASSES)


def assert_same_values(new, old, feed, tolerance=TIGHT):
    for a, b in zip(ad.evaluate(new, feed), ad.evaluate(old, feed), strict=True):
        assert np.shape(a) == np.shape(b)
        assert np.result_type(a) == np.result_type(b)
        np.testing.assert_allclose(a, b, **tolerance)


def wrt_for(output, graph):
    """The leaves to differentiate ``output`` by. An output with a value (a tensor graph,
    or one that optimising made a constant) has its gradients computed at once, which
    needs every placeholder in wrt fed; gradients() cannot do that, so such outputs are
    differentiated by tensors only."""
    return [x for x in graph.wrt if output.value is None or x.value is not None]


def differentiable(graph):
    output = graph.outputs[0]
    return output, wrt_for(output, graph)


def snapshot(nodes):
    return [
        (n, n.op, n.inputs, dict(n.attrs), n.name, id(n.value)) for n in ad.find_topo_sort(nodes)
    ]


@given(random_graphs(), ALL_PASSES)
def test_passes_keep_values_and_leave_the_input_graph_alone(graph, a_pass):
    before = snapshot(graph.outputs)
    new, report = a_pass(graph.outputs)
    assert snapshot(graph.outputs) == before
    assert len(new) == len(graph.outputs)
    assert report.nodes_after == count(new) <= report.nodes_before == count(graph.outputs)
    assert_same_values(new, graph.outputs, graph.feed)


@given(random_graphs(), st.lists(ALL_PASSES, min_size=2, max_size=5))
def test_any_composition_of_passes_keeps_values(graph, passes):
    outputs = graph.outputs
    for a_pass in passes:
        outputs, _ = a_pass(outputs)
    assert_same_values(outputs, graph.outputs, graph.feed)


@given(random_graphs())
def test_gradients_of_the_optimised_graph_agree(graph):
    output = graph.outputs[0]
    (small,), _ = optimize(output)
    wrt = wrt_for(small, graph) if small.value is not None else wrt_for(output, graph)
    grads = ad.gradients(output, wrt)
    assert_same_values(ad.gradients(small, wrt), grads, graph.feed, GRADIENT)
    smaller_grads, _ = optimize(grads)
    assert_same_values(smaller_grads, grads, graph.feed)


@given(random_graphs(dtype="float32", mixed_dtypes=False))
def test_float32_graphs_stay_float32(graph):
    output, wrt = differentiable(graph)
    for nodes in (graph.outputs, ad.gradients(output, wrt)):
        new, _ = optimize(nodes)
        for value in ad.evaluate(new, graph.feed):
            assert np.result_type(value) == np.float32


@given(random_graphs())
def test_optimize_reaches_a_fixed_point(graph):
    grads = ad.gradients(*differentiable(graph))
    new, report = optimize([*graph.outputs, *grads])
    again, second = optimize(new)
    assert all(a is b for a, b in zip(again, new, strict=True))
    assert second.rounds == 1 and second.nodes_after == report.nodes_after


@given(random_graphs())
def test_executor_with_optimize_gives_the_same_results(graph):
    outputs = [*graph.outputs, *ad.gradients(*differentiable(graph))]
    plain = ad.Executor(outputs).run(graph.feed)
    fast = ad.Executor(outputs, optimize=True).run(graph.feed)
    for a, b in zip(fast, plain, strict=True):
        assert np.result_type(a) == np.result_type(b)
        np.testing.assert_allclose(a, b, **TIGHT)


def test_an_optimized_graph_can_be_planned_and_run_with_the_plan():
    x = ad.Variable("x", shape=(5,), dtype="float64")
    y = ad.sin(x) * 1 + 0
    (dx,) = ad.gradients(y.sum(), [x])
    small, _ = ad.passes.optimize([y, dx])
    feed = {x: np.linspace(0.0, 1.0, 5)}
    planned = ad.Executor(small, plan=ad.memory.plan(small, feed)).run(feed)
    np.testing.assert_array_equal(planned[0], np.sin(feed[x]))
    np.testing.assert_array_equal(planned[1], np.cos(feed[x]))
    with pytest.raises(ValueError, match="Optimize first, then plan"):
        ad.Executor([y, dx], plan=ad.memory.plan([y, dx], feed), optimize=True)
