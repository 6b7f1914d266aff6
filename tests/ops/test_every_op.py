"""Every registered op, checked the same way: forward against NumPy, gradients (reverse
and forward mode, first and second order) against finite differences, the tangent rule
against the gradient rule (one Jacobian, transposed), and float32 in giving float32 out.
The loop is over ``Op.registry``, so a new op without a case in ``tests/shared/strategies.py``
fails here.

Ops marked ``differentiable = False`` (comparisons) have no derivatives to check: their
values must equal NumPy's exactly, dtype included, and differentiating them must raise
the error that says so."""

from functools import partial

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import autodiff as ad
from autodiff.system.memory import overwrites_inputs, writer
from strategies import OP_CASES

OPS = sorted(name for name, cls in ad.Op.registry.items() if not cls.is_leaf)
# argmax's integer indices have no derivative (Op.differentiable is False): the gradient
# and float32 checks leave such ops out; their own tests check that differentiating fails.
DIFFERENTIABLE = [name for name in OPS if ad.Op.registry[name].differentiable]


def test_every_registered_op_has_a_gradient_check():
    missing = set(OPS) - set(OP_CASES)
    assert not missing, f"ops without a case in tests/shared/strategies.py: {sorted(missing)}"


def test_registry_holds_the_ops_named_in_the_design():
    named = """exp log sin cos tanh sigmoid relu sqrt power maximum matmul transpose reshape
        broadcast_to sum ones_like zeros_like softmax log_softmax logsumexp
        softmax_cross_entropy add subtract multiply divide negative""".split()
    assert set(named) <= set(OPS)


@pytest.mark.parametrize("name", OPS)
@given(data=st.data())
def test_forward_matches_numpy(name, data):
    case = data.draw(OP_CASES[name])
    out = case.fn(*[ad.tensor(a) for a in case.args])
    expected = case.reference(*case.args)
    if not ad.Op.registry[name].differentiable:  # booleans, indices: exactly NumPy's
        np.testing.assert_array_equal(out.value, expected)
        assert out.value.dtype == np.result_type(expected)
        return
    np.testing.assert_allclose(out.value, expected, rtol=1e-12, atol=1e-12)
    assert np.shape(out.value) == np.shape(expected)


def assert_not_differentiable(name, out, leaves):
    """Differentiating a non-differentiable op's output raises an error naming the op."""
    with pytest.raises(ad.DTypeError, match=f"{name} is not differentiable"):
        ad.gradients(out, leaves)


@pytest.mark.parametrize("name", OPS)
@given(data=st.data())
def test_gradients_match_finite_differences(name, data):
    case = data.draw(OP_CASES[name])
    if not ad.Op.registry[name].differentiable:
        leaves = [ad.tensor(a) for a in case.args]
        assert_not_differentiable(name, case.fn(*leaves), leaves)
        return
    ad.check_grads(case.fn, case.args, order=2, modes=("rev", "fwd"))


@pytest.mark.parametrize("name", DIFFERENTIABLE)
@given(data=st.data())
def test_tangent_rule_is_the_transpose_of_the_gradient_rule(name, data):
    """<u, J v> from the jvp rules equals <J^T u, v> from the gradient rules, for random u
    and v: the two rules of each op describe one Jacobian (no finite differences)."""
    case = data.draw(OP_CASES[name])
    rng = np.random.default_rng(0)
    leaves = [ad.tensor(a) for a in case.args]
    out = case.fn(*leaves)
    vs = [rng.normal(size=np.shape(a)) for a in case.args]
    u = rng.normal(size=np.shape(out.value))
    jv = ad.jvp_graph(out, leaves, [ad.constant(v) for v in vs]).value
    jtu = ad.gradients(out, leaves, output_grad=ad.constant(u))
    left = float(np.sum(u * jv))
    right = sum(float(np.sum(g.value * v)) for g, v in zip(jtu, vs, strict=True))
    scale = float(np.sum(np.abs(u * jv))) + 1.0
    assert abs(left - right) <= 1e-9 * scale, (left, right)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
@given(data=st.data())
def test_float32_stays_float32(name, data):
    case = data.draw(OP_CASES[name])
    leaves = [ad.tensor(a, dtype="float32") for a in case.args]
    out = case.fn(*leaves)
    if not ad.Op.registry[name].differentiable:  # its own dtype (bool), float32 or not
        assert out.dtype == np.result_type(case.reference(*case.args))
        assert_not_differentiable(name, out, leaves)
        return
    assert out.dtype == np.float32
    for grad in ad.gradients(out, leaves):
        assert grad.value.dtype == np.float32
    tangent = ad.jvp_graph(out, leaves, [ad.ones_like(x) for x in leaves])
    assert tangent.value.dtype == np.float32


# Python numbers are weak values the graph may hold (constants written as numbers, ops on
# them, output_grad=2.0): an op that calls array methods (x.sum()) gets them as 0-d arrays.
ON_NUMBERS = {
    "sum": ad.sum,
    "max": ad.max,
    "min": ad.min,
    "prod": ad.prod,
    "count": lambda x: ad.mean(x),
    "logsumexp": ad.logsumexp,
    "softmax": ad.softmax,
    "log_softmax": ad.log_softmax,
    "argmax": ad.argmax,
    "argmin": ad.argmin,
    "reshape": lambda x: ad.reshape(x, (1, 1)),
    "transpose": ad.transpose,
    "flatten": ad.flatten,
    "expand_dims": lambda x: ad.expand_dims(x, 0),
    "squeeze": ad.squeeze,
    "broadcast_to": lambda x: ad.broadcast_to(x, (2, 3)),
    "step": ad.step,
}


@pytest.mark.parametrize("name", sorted(ON_NUMBERS))
def test_an_op_takes_a_python_number_as_it_takes_a_0d_array(name):
    def op_node(out):  # count: the node mean() divides by
        found = [n for n in ad.graph.find_topo_sort([out]) if n.op.name == name]
        assert found, f"{name} is not in the graph it should be tested in"
        return out

    expected = op_node(ON_NUMBERS[name](ad.constant(np.asarray(2.5)))).value
    value = op_node(ON_NUMBERS[name](ad.constant(2.5))).value
    assert np.shape(value) == np.shape(expected) and value.dtype == expected.dtype
    np.testing.assert_array_equal(value, expected)
    y = ad.Variable("y")  # fed a float (a 0-d array then): checked run, then compiled
    executor = ad.Executor([ON_NUMBERS[name](y)])
    for number in (2.5, 2.5, -1.0):
        (fed,) = executor.run({y: number})
        (reference,) = executor.run({y: np.asarray(number)})
        assert np.shape(fed) == np.shape(reference)
        np.testing.assert_array_equal(fed, reference)


MODES = [{}, {"optimize": True}, {"fuse": True}, {"workers": 2}, {"capture": True}]


@pytest.mark.parametrize("mode", MODES)
def test_a_float_fed_to_a_variable_takes_the_dtype_of_the_arrays_beside_it(mode):
    """Weak, as a float written in the graph: float32 in, float32 out, every run alike."""
    x, y = ad.Variable("x"), ad.Variable("y")
    x32 = np.array([1.0, 2.0], dtype=np.float32)
    out = ad.sum(ad.tanh(x * y)) + ad.exp(y)  # d/dy = sum(x * (1 - tanh(x y)**2)) + exp(y)
    executor = ad.Executor([out, *ad.gradients(out, [x, y])], **mode)
    for number in (2.0, 0.5, 0.5):  # checked runs, then compiled ones
        value, dx, dy = executor.run({x: x32, y: number})
        assert value.dtype == dx.dtype == dy.dtype == np.float32, (value.dtype, dx.dtype)
        slope = 1 - np.tanh(x32 * number) ** 2
        np.testing.assert_allclose(value, np.tanh(x32 * number).sum() + np.exp(number), 1e-6)
        np.testing.assert_allclose(dx, number * slope, rtol=1e-6)
        np.testing.assert_allclose(dy, (x32 * slope).sum() + np.exp(number), rtol=1e-6)


def test_the_dtype_a_fed_float_takes_is_the_arrays_result_type_in_any_order():
    """Beside float32 arrays, float32; beside float32 and float64, float64 (no precision
    lost, whatever the feed's order); beside a complex array, its real dtype."""
    x, y, z = ad.Variable("x"), ad.Variable("y"), ad.Variable("z")
    x64, z32 = np.array([0.1]), np.array([1.0], dtype=np.float32)
    executor = ad.Executor([x - y, x < y, z * y])
    for feed in ({z: z32, x: x64, y: 0.1}, {x: x64, z: z32, y: 0.1}):
        difference, less, scaled = executor.run(feed)
        assert difference.tolist() == [0.0] and less.tolist() == [False]
        assert scaled.dtype == np.float64  # (float32 * a float64 y: NumPy's rule)
    (alone,) = ad.Executor([z * y]).run({z: z32, y: 0.1})
    assert alone.dtype == np.float32
    (square,) = ad.Executor([y * y]).run({y: 0.1})  # nothing beside: float64
    assert square.dtype == np.float64 and square == 0.1 * 0.1
    c64 = np.array([1 + 1j], dtype=np.complex64)
    real, rotated = ad.Executor([x * y, z * y]).run({z: c64, x: np.float32([2.0]), y: 2.0})
    assert real.dtype == np.float32 and rotated.dtype == np.complex64


def test_a_number_fed_to_a_variable_is_an_array_for_every_op():
    x, y = ad.Variable("x"), ad.Variable("y")
    x32 = np.array([1.0, -2.0], dtype=np.float32)
    # NumPy's arithmetic, not Python's: nan for sqrt(-4), inf for 1 / 0, no complex
    with np.errstate(invalid="ignore", divide="ignore"):
        executor = ad.Executor([x * y**0.5, x / y])
        roots, _ = executor.run({x: x32, y: -4.0})
        _, inverse = executor.run({x: x32, y: 0.0})
        assert roots.dtype == np.float32 and np.isnan(roots).all()
        assert inverse.tolist() == [np.inf, -np.inf] and inverse.dtype == np.float32
    (dy,) = ad.gradients(ad.relu(y) * 3.0, [y])  # relu's gradient: step (astype)
    assert [float(ad.evaluate(dy, {y: v})) for v in (2.0, -1.0)] == [3.0, 0.0]
    # an int is no float: refused, naming the Variable, as an int array is
    with pytest.raises(ad.DTypeError, match="Placeholder 'y' was fed int64"):
        ad.evaluate(x * ad.sum(y), {x: x32, y: 2})
    # declared with a dtype, a fed number takes it; with a shape, it must have that shape
    typed = ad.Variable("typed", dtype="float32")
    assert ad.evaluate(typed * 2.0, {typed: 3}).dtype == np.float32
    with pytest.raises(ad.ShapeError, match="declared with shape"):
        ad.evaluate(ad.Variable("v", shape=(2,)) * 2.0, {"v": 3.0})
    # a memory plan made with a fed number plans its dtype
    out = x * y
    plan = ad.memory.plan([out], {x: x32, y: 2.0})
    (planned,) = ad.Executor([out], plan=plan).run({x: x32, y: 3.0})
    assert planned.dtype == np.float32 and planned.tolist() == [3.0, -6.0]


@pytest.mark.parametrize("mode", MODES)
def test_a_number_in_the_graph_reaches_compiled_code_as_it_reaches_the_checked_run(mode):
    """A number written in the graph (output_grad=2.0) meets an op that calls array
    methods (broadcast_like): the compiled run hands it over as the checked one does."""
    x = ad.Variable("x")
    x32 = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    (dx,) = ad.gradients(ad.sum(x * x), [x], output_grad=2.0)
    executor = ad.Executor([dx], **mode)
    for _ in range(3):
        (value,) = executor.run({x: x32})
        assert value.dtype == np.float32 and value.tolist() == (4 * x32).tolist()


def test_a_number_fed_to_a_tensor_reaches_its_readers_in_every_run():
    """A tensor held an array as the graph was built; fed a Python number, its readers
    that call array methods get it as a 0-d array (such runs are all checked runs)."""
    s = ad.tensor(np.float32(1.0))
    executor = ad.Executor([ad.sum(s) * 2, ad.reshape(s, (1,))])
    for number in (3.0, 4.0, 4.0):
        total, row = executor.run({s: number})
        assert float(total) == 2 * number and row.tolist() == [number]
    (total, _) = executor.run({s: np.float32(5.0)})  # an array again: compiled, float32
    assert total.dtype == np.float32 and float(total) == 10.0
    # read by elementwise ops only (a learning rate), a fed number runs compiled
    w, rate = ad.Variable("w"), ad.tensor(np.float32(0.1))
    executor = ad.Executor([w * rate])
    for number in (0.1, 0.5, 0.5):
        (step,) = executor.run({w: np.ones(2, dtype=np.float32), rate: number})
        assert step.tolist() == [np.float32(number)] * 2
    assert executor.source is not None


def test_a_fed_number_runs_each_step_once():
    """Seeded dropout draws the same masks whether a number is fed as one or as a 0-d
    array: no run is tried twice (which would draw twice)."""
    masks = []
    for feed in (2.0, np.asarray(2.0, dtype=np.float32)):
        x, y = ad.Variable("x"), ad.Variable("y")
        dropped = ad.dropout(x, 0.5, seed=np.random.default_rng(0))
        executor = ad.Executor([dropped, ad.sum(dropped, axis=1) * ad.sum(y)])
        data = np.ones((4, 8), dtype=np.float32)
        masks.append([executor.run({x: data, y: feed})[0] for _ in range(3)])
    for first, second in zip(*masks, strict=True):
        np.testing.assert_array_equal(first, second)


def test_every_op_that_takes_no_number_is_tested_with_one_or_needs_an_axis():
    """A new op that calls array methods must be added to ON_NUMBERS (or NEEDS_ARRAYS)."""
    needs_arrays = """broadcast_like col2im concatenate dropout_mask getitem im2col matmul
        one_hot place_part reshape_like scatter_like softmax_cross_entropy
        softmax_cross_entropy_gradient split_part sum_to_like
        tie_weights""".split()
    takes_no_numbers = {n for n in OPS if not ad.Op.registry[n].takes_numbers}
    assert takes_no_numbers == set(ON_NUMBERS) | set(needs_arrays)


@pytest.mark.parametrize("name", OPS)
def test_each_op_states_its_rules_in_its_docstring(name):
    cls = ad.Op.registry[name]
    assert cls.__doc__ and "=" in cls.__doc__, f"{cls.__name__} should state its math"


# Memory planning (autodiff/memory.py) relies on two more promises of every op.


@pytest.mark.parametrize("name", OPS)
@given(data=st.data())
def test_shape_rule_agrees_with_compute(name, data):
    """``infer`` gives the shape and dtype that ``compute`` does, and says whether the
    output is a view of input 0 (an op that shares memory without saying so would have
    its memory overwritten by a memory plan)."""
    case = data.draw(OP_CASES[name])
    node = case.fn(*[ad.tensor(a) for a in case.args])
    assert node.op.name == name
    spec = node.op.infer(*[ad.graph.spec_of(x.value) for x in node.inputs], **node.attrs)
    assert spec.shape == np.shape(node.value)
    assert spec.dtype == node.value.dtype
    assert spec.view == np.shares_memory(node.value, node.inputs[0].value)


@pytest.mark.parametrize("name", [n for n in OPS if writer(ad.Op.registry[n]._instance)])
@given(data=st.data())
def test_writing_into_out_gives_the_same_bits(name, data):
    """An op that writes into a given buffer (memory plans, CUDA graphs) gives the same
    result there; an elementwise op may be given one of its own inputs as ``out``."""
    case = data.draw(OP_CASES[name])
    node = case.fn(*[ad.tensor(a) for a in case.args])
    input_vals = [x.value for x in node.inputs]
    out = np.empty(np.shape(node.value), node.value.dtype)
    assert node.op.run(input_vals, node.attrs, partial(writer(node.op), out)) is out
    np.testing.assert_array_equal(out, node.value)
    for i, x in enumerate(input_vals):
        if overwrites_inputs(node.op) and np.shape(x) == out.shape and x.dtype == out.dtype:
            copies = [np.copy(v) for v in input_vals]
            node.op.run(copies, node.attrs, partial(writer(node.op), copies[i]))
            np.testing.assert_array_equal(copies[i], node.value)
