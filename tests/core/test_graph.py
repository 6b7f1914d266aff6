"""Graphs and running them: leaves, eager vs symbolic nodes, topological order, Executor."""

import gc
import weakref

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import autodiff as ad
from strategies import graphs, random_graphs


def test_tensor_computes_at_once_and_variable_waits():
    x = ad.tensor([1.0, 2.0])
    assert (x * 2).value.tolist() == [2.0, 4.0]
    v = ad.Variable("v")
    y = v * 2
    assert y.value is None
    assert ad.evaluate(y, {v: [1.0, 2.0]}).tolist() == [2.0, 4.0]


def test_tensor_copies_its_data():
    data = np.array([1.0, 2.0])
    x = ad.tensor(data)
    data[0] = 100.0
    assert x.value[0] == 1.0


def test_node_reports_shape_dtype_device():
    x = ad.tensor(np.zeros((2, 3), dtype=np.float32), name="x")
    assert (x.shape, x.dtype, x.device, x.ndim) == ((2, 3), np.float32, "cpu", 2)
    v = ad.Variable("v", shape=(None, 3), dtype="float32")
    assert v.shape == (None, 3) and v.dtype == np.float32 and v.device is None
    assert "symbolic" in repr(v * 2)


def test_python_numbers_mix_freely():
    x = ad.tensor(2.0)
    results = [2 * x, x + 1, 1 / x, x**3, 3 - x, x - 3, x / 4, 2**x, -x, +x]
    assert [float(r.value) for r in results] == [4.0, 3.0, 0.5, 8.0, 1.0, -1.0, 0.5, 4.0, -2.0, 2.0]


def test_numpy_arrays_on_the_left_defer_to_nodes():
    x = ad.tensor([1.0, 2.0])
    y = np.array([10.0, 20.0]) * x
    assert isinstance(y, ad.Node)
    assert y.value.tolist() == [10.0, 40.0]


def test_methods_mirror_numpy():
    data = np.arange(6.0).reshape(2, 3)
    x = ad.tensor(data)
    np.testing.assert_array_equal(x.sum(axis=0).value, data.sum(axis=0))
    np.testing.assert_array_equal(
        x.mean(axis=1, keepdims=True).value, data.mean(axis=1, keepdims=True)
    )
    np.testing.assert_array_equal(x.reshape((3, 2)).value, data.reshape(3, 2))
    np.testing.assert_array_equal(x.reshape(3, 2).value, data.reshape(3, 2))
    np.testing.assert_array_equal(x.T.value, data.T)


def test_topo_sort_puts_inputs_first_and_visits_a_reused_node_once():
    x = ad.tensor(1.0, name="x")
    a = ad.exp(x)
    b = a * a + a
    order = ad.find_topo_sort([b])
    assert order.count(a) == 1 and order.count(x) == 1
    position = {node: i for i, node in enumerate(order)}
    for node in order:
        for parent in node.inputs:
            assert position[parent] < position[node]


def test_topo_sort_of_a_very_deep_graph():
    y = x = ad.Variable("x")
    for _ in range(50_000):
        y = y + 1.0
    order = ad.find_topo_sort([y])
    assert order[0] is x and order[-1] is y
    assert ad.evaluate(y, {x: 0.0}) == 50_000.0


def test_topo_sort_of_a_diamond_lattice_is_linear_in_size():
    # 2**40 paths through this graph: a visit per path would never finish.
    x = ad.tensor(1.0)
    y = x
    for _ in range(40):
        y = ad.sin(y) + ad.cos(y)
    assert len(ad.find_topo_sort([y])) == 1 + 40 * 3


def test_executor_runs_several_outputs_and_feeds_by_name():
    x, y = ad.Variable("x"), ad.Variable("y")
    outputs = ad.Executor([x * y, x + y]).run({"x": 3.0, "y": 4.0})
    assert [float(v) for v in outputs] == [12.0, 7.0]


def test_feeds_override_any_leaf_and_intermediate_nodes():
    w = ad.tensor(2.0, name="w")
    x = ad.Variable("x")
    h = x * w
    y = h + 1
    assert ad.evaluate(y, {x: 3.0}) == 7.0
    assert ad.evaluate(y, {x: 3.0, w: 10.0}) == 31.0
    # feeding h means x is not needed at all
    assert ad.evaluate(y, {h: 5.0}) == 6.0


def test_evaluate_recomputes_an_eager_graph_with_new_leaf_values():
    x = ad.tensor(2.0)
    y = x * x
    assert y.value == 4.0
    assert ad.evaluate(y, {x: 5.0}) == 25.0
    assert y.value == 4.0  # evaluating does not change stored values


def test_executor_frees_an_intermediate_value_after_its_last_use():
    """On the first (checked) run and on the straight-line runs after it."""
    captured, alive_later = [], []

    class Capture(ad.Op, register=False):
        """Y = 2 X, keeping a weak reference to the array X."""

        def compute(self, x):
            captured.append(weakref.ref(x))
            return 2 * x

    class Check(ad.Op, register=False):
        """Y = X, noting whether the last captured array is still alive."""

        def compute(self, x):
            gc.collect()
            alive_later.append(captured[-1]() is not None)
            return x

    x = ad.Variable("x")
    executor = ad.Executor([Check.apply(ad.cos(ad.sin(Capture.apply(ad.exp(x)))))])
    for _ in range(3):
        executor.run({x: np.ones(1000)})
    assert executor.source is not None and "del" in executor.source
    assert alive_later == [False, False, False]  # exp(x) freed once Capture had used it


def test_later_runs_are_straight_line_python_with_the_same_bits():
    x, w = ad.Variable("x"), ad.tensor(np.linspace(-1, 1, 6).reshape(3, 2), name="w")
    y = ad.tanh(x @ w).sum()
    executor = ad.Executor([y, *ad.gradients(y, [w, x])])
    feed = {x: np.arange(6.0).reshape(2, 3) / 5}
    first = executor.run(feed)
    assert executor.source is None  # the first run is the checked one
    second = executor.run(feed)
    assert executor.source.startswith("def run(values):") and "# matmul" in executor.source
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)


@given(st.one_of(random_graphs(), graphs()))  # passes' and memory's graphs
def test_straight_line_runs_match_the_checked_run_on_random_graphs(graph):
    executor = ad.Executor(graph.outputs)
    checked = executor.run(graph.feed)
    for _ in range(2):
        for a, b in zip(executor.run(graph.feed), checked, strict=True):
            assert np.result_type(a) == np.result_type(b)
            np.testing.assert_array_equal(a, b)
    assert executor.source is not None


def test_the_straight_line_run_passes_on_what_is_not_an_input_error(monkeypatch):
    """An op refusing its inputs (ValueError...) is explained by a checked run; anything
    else (here a MemoryError) comes out as it is, with no second run."""
    x = ad.Variable("x")
    executor = ad.Executor([ad.exp(x)])
    executor.run({x: np.ones(3)})
    executor.run({x: np.ones(3)})
    calls = []

    def straight_line(error):
        def run(values):
            calls.append(error)
            raise error

        return lambda: run

    compiled = executor._compiled
    monkeypatch.setattr(compiled, "function", straight_line(MemoryError("no memory")))
    with pytest.raises(MemoryError, match="no memory"):
        executor.run({x: np.ones(3)})
    monkeypatch.setattr(compiled, "function", straight_line(ValueError("bad input")))
    (value,) = executor.run({x: np.ones(3)})  # the checked run computes it after all
    np.testing.assert_array_equal(value, np.exp(np.ones(3)))
    assert [type(e) for e in calls] == [MemoryError, ValueError]


def test_later_runs_still_check_dtypes_and_explain_errors():
    x = ad.Variable("x")
    executor = ad.Executor([ad.sin(x) * 2])
    executor.run({x: np.ones(3)})
    executor.run({x: np.ones(3)})  # straight-line from now on, for float64
    with pytest.raises(ad.DTypeError, match="sin: input 0 has dtype int64"):
        executor.run({x: np.ones(3, dtype=np.int64)})  # new dtypes: a checked run
    w = ad.Variable("w")
    executor = ad.Executor([x * w])
    executor.run({x: np.ones(3), w: np.ones(3)})
    executor.run({x: np.ones(3), w: np.ones(3)})
    with pytest.raises(ad.ShapeError, match=r"multiply: cannot broadcast shapes \(3,\) and \(4,\)"):
        executor.run({x: np.ones(3), w: np.ones(4)})
    with pytest.raises(ValueError, match="Placeholder 'w' has no value"):
        executor.run({x: np.ones(3)})
    assert executor.run({x: np.ones(2), w: np.ones(2)})[0].shape == (2,)


def test_fed_value_takes_the_declared_dtype():
    x = ad.Variable("x", dtype="float32")
    assert ad.evaluate(x * 2, {x: [1.0, 2.0]}).dtype == np.float32


def test_deferred_builds_without_computing():
    x = ad.tensor(3.0)
    with ad.deferred():
        y = x * x
    assert y.value is None
    assert ad.evaluate(y) == 9.0
    assert (x * x).value == 9.0  # eager again afterwards


def test_deferred_is_restored_after_an_error():
    x = ad.tensor(3.0)
    with pytest.raises(RuntimeError), ad.deferred():
        raise RuntimeError("boom")
    assert (x + 1).value == 4.0


def test_registry_is_filled_by_subclassing():
    class Cube(ad.Op, register=False):
        """Y = X**3;  dX = 3 dY X**2."""

    assert "cube" not in ad.Op.registry

    class Triple(ad.Op):
        """Y = 3 X;  dX = 3 dY;  Y' = 3 X'."""

        def compute(self, x):
            return 3 * x

    try:
        assert ad.Op.registry["triple"] is Triple
        assert Triple.apply(ad.tensor(2.0)).value == 6.0
    finally:
        del ad.Op.registry["triple"]
