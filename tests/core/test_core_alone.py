"""The core on its own (autodiff/core/): the lecture's algorithm, with no system layer.

``ad.gradients`` and ``ad.Executor`` are the core's with a cache, compiled code, shape
proofs, memory plans and workers around it; here the core's own ``gradients`` and
``Executor`` must compute the same values for every op, and read as the lecture says:
``reverse_pass`` short and free of speed parameters, steps and rules as callbacks.
"""

import ast
import inspect

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import autodiff as ad
from autodiff.core import executor as core_executor
from autodiff.core import gradients as core
from strategies import OP_CASES

DIFFERENTIABLE = sorted(
    name for name, op in ad.Op.registry.items() if op.differentiable and not op.is_leaf
)


def assert_same(got, expected, what):
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape, f"{what}: shape {got.shape}, expected {expected.shape}"
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype}, expected {expected.dtype}"
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12, err_msg=what)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
@given(data=st.data())
def test_the_cores_gradients_are_ad_gradients(name, data):
    """Imperative: the core's gradients of every op, on random shapes (broadcasting,
    size-1 axes), hold the values of ad.gradients', and leave the inputs untouched."""
    case = data.draw(OP_CASES[name])
    copies = [np.array(a, copy=True) for a in case.args]
    leaves = [ad.tensor(a) for a in case.args]
    out = ad.sum(case.fn(*leaves))
    for got, expected, arg in zip(
        core.gradients(out, leaves), ad.gradients(out, leaves), case.args, strict=True
    ):
        assert_same(got.value, expected.value, f"{name}: d/d input of shape {np.shape(arg)}")
    for arg, copy in zip(case.args, copies, strict=True):
        np.testing.assert_array_equal(arg, copy)


@pytest.mark.parametrize("name", [n for n in DIFFERENTIABLE if n not in ad.capture.RANDOM])
@given(data=st.data())
def test_the_cores_executor_runs_symbolic_gradients_as_ad_executor_does(name, data):
    """Define-then-run: placeholders, the core's gradient graph, the core's Executor.
    (Not for random ops: each run draws anew.)"""
    case = data.draw(OP_CASES[name])
    xs = [ad.Variable(f"x{i}") for i in range(len(case.args))]
    out = ad.sum(case.fn(*xs))
    feed = dict(zip(xs, case.args, strict=True))
    got = core_executor.Executor([out, *core.gradients(out, xs)]).run(feed)
    expected = ad.Executor([out, *ad.gradients(out, xs)]).run(feed)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert_same(g, e, f"{name}: output {i} of the symbolic graph")


def test_second_derivatives_come_from_the_gradient_graph():
    x = ad.tensor(np.array([0.3, -1.2, 2.0]))
    (dx,) = core.gradients(ad.sum(ad.sin(x) * x), [x])
    (ddx,) = core.gradients(ad.sum(dx), [x])
    np.testing.assert_allclose(dx.value, np.sin(x.value) + x.value * np.cos(x.value))
    np.testing.assert_allclose(ddx.value, 2 * np.cos(x.value) - x.value * np.sin(x.value))


def test_float32_stays_float32_through_the_core():
    x = ad.tensor(np.array([[1.0, 2.0]], dtype=np.float32))
    b = ad.tensor(np.array([0.5], dtype=np.float32))
    dx, db = core.gradients(ad.sum(ad.tanh(x * b) * 2.0), [x, b])
    assert (dx.value.dtype, db.value.dtype) == (np.float32, np.float32)
    assert db.value.shape == (1,)  # summed back over the broadcast axis


def test_a_custom_rule_and_on_step_see_each_node_once_in_reverse_order():
    x = ad.tensor(2.0, name="x")
    y = ad.sin(x) * x
    topo_order = ad.find_topo_sort([y])
    seen, steps = [], []

    def rule(node, adjoint):
        seen.append(node)
        return core.input_gradients(node, adjoint)

    with ad.graph.deferred():
        (dx,) = core.reverse_pass(topo_order, [x], ad.ones_like(y), rule, steps.append)
    assert [n.name for n in seen] == ["multiply", "sin"]
    assert [s.node.name for s in steps] == ["multiply", "sin", "x"]
    assert len(steps[-1].contributions) == 2  # x reaches y twice: fan-out
    assert ad.evaluate(dx) == pytest.approx(np.sin(2.0) + 2.0 * np.cos(2.0))


def test_a_fed_intermediate_node_is_not_computed_from_its_inputs():
    x = ad.Variable("x")
    h = ad.exp(x)
    y = h * 2
    executor = core_executor.Executor([y])
    # x is never fed: h's value comes from the feed, so x is not needed.
    assert executor.run({h: np.array([1.5])})[0] == pytest.approx([3.0])
    with pytest.raises(ValueError, match="Placeholder 'x' has no value"):
        executor.run({})


def test_the_executor_frees_each_value_after_its_last_use():
    x = ad.Variable("x")
    a = ad.sin(x)
    b = ad.cos(a)
    c = b * b
    steps = core_executor.schedule(ad.find_topo_sort([c]), [c])
    freed = {node.name: [done.name for done in frees] for node, frees in steps}
    assert freed == {"x": [], "sin": ["x"], "cos": ["sin"], "multiply": ["cos"]}


def test_ad_executor_is_the_cores_with_strategies():
    assert issubclass(ad.Executor, core_executor.Executor)
    assert core_executor.Executor.run is not ad.Executor.run


def body_lines(function) -> int:
    """Lines of a function's body, its docstring left out."""
    tree = ast.parse(inspect.getsource(function).lstrip())
    definition = tree.body[0]
    assert isinstance(definition, ast.FunctionDef)
    body = definition.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return body[-1].end_lineno - body[0].lineno + 1


def test_the_reverse_pass_fits_on_a_slide_and_takes_no_speed_parameters():
    assert body_lines(core.reverse_pass) <= 30, inspect.getsource(core.reverse_pass)
    parameters = list(inspect.signature(core.reverse_pass).parameters)
    assert parameters == ["topo_order", "wrt", "output_grad", "rule", "on_step"]
    assert list(inspect.signature(core.gradients).parameters) == ["output", "wrt", "output_grad"]
    assert list(inspect.signature(core_executor.Executor).parameters) == ["nodes"]
    assert list(inspect.signature(core_executor.Executor.run).parameters) == [
        "self",
        "feed_dict",
    ]
