"""Parallel scheduling (autodiff/parallel.py): ``Executor(outputs, workers=N)`` runs the
nodes that are ready at once on N threads, with the sequential run's values, bit for bit."""

import threading

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given

import autodiff as ad
from autodiff.graph import Op, Spec
from strategies import graphs, random_graphs, requires_gpu


def towers(x, n=4, depth=3):
    """n independent chains from x, summed at the end: n nodes per level to run at once."""
    ends = []
    for i in range(n):
        h = x * (i + 1.0)
        for _ in range(depth):
            h = ad.tanh(h) + 0.5
        ends.append(h)
    total = ends[0]
    for h in ends[1:]:
        total = total + h
    return total


ANY_GRAPH = st.one_of(random_graphs(), graphs())  # the passes' and the memory planner's


@given(ANY_GRAPH, ANY_GRAPH, st.sampled_from([2, 3]))
def test_workers_give_the_sequential_values_bit_for_bit(one, other, workers):
    """Two random graphs side by side: nodes of each can run while the other's do."""
    outputs, feed = [*one.outputs, *other.outputs], {**one.feed, **other.feed}
    sequential = ad.Executor(outputs).run(feed)
    parallel = ad.Executor(outputs, workers=workers)
    for _ in range(2):  # the pool is reused from run to run
        for a, b in zip(parallel.run(feed), sequential, strict=True):
            assert np.result_type(a) == np.result_type(b)
            np.testing.assert_array_equal(a, b)
    computed = sum(1 for n in ad.find_topo_sort(outputs) if not n.op.is_leaf)
    on_workers = parallel._parallel is not None  # else nothing could run side by side
    assert len(parallel.trace) == (computed if on_workers else 0)


def test_each_node_runs_once_after_its_inputs_and_the_trace_says_where():
    x = ad.Variable("x")
    out = towers(x)
    executor = ad.Executor([out], workers=2)
    (value,) = executor.run({x: np.linspace(-1, 1, 1000)})
    np.testing.assert_array_equal(value, ad.Executor([out]).run({x: np.linspace(-1, 1, 1000)})[0])
    computed = [n for n in ad.find_topo_sort([out]) if not n.op.is_leaf]
    events = {event.node: event for event in executor.trace}
    assert sorted(map(id, events)) == sorted(map(id, computed))  # each once, no other
    assert len(executor.trace) == len(computed)
    for node, event in events.items():
        assert event.worker in (0, 1) and event.start <= event.end
        for x_in in node.inputs:
            if x_in in events:
                assert events[x_in].end <= event.start, f"{node.name} ran before its input"


class Meet(Op, register=False):
    """Waits until ``parties`` threads are inside at once: a sequential run never gets there."""

    name = "meet"
    barrier = threading.Barrier(2, timeout=30)

    def compute(self, x):
        self.barrier.wait()
        return x.copy()

    def infer(self, x):
        return Spec(x.shape, x.dtype)


def test_two_ready_nodes_run_at_the_same_time_on_two_workers():
    Meet.barrier.reset()
    x = ad.Variable("x")
    left, right = Meet.apply(x * 2.0), Meet.apply(x * 3.0)
    executor = ad.Executor([left + right], workers=2)
    (value,) = executor.run({x: np.ones(4)})  # BrokenBarrierError if they ran one by one
    np.testing.assert_array_equal(value, np.full(4, 5.0))
    meets = [event for event in executor.trace if event.node.op.name == "meet"]
    assert {event.worker for event in meets} == {0, 1}


def test_a_chain_falls_back_to_the_loop_and_a_fed_node_to_a_checked_run():
    x = ad.Variable("x")
    chain = x
    for _ in range(20):
        chain = ad.sin(chain)
    executor = ad.Executor([chain], workers=2)
    assert executor.trace == [] and executor._parallel is None  # nothing to run side by side
    np.testing.assert_array_equal(
        executor.run({x: np.ones(3)})[0], ad.Executor([chain]).run({x: np.ones(3)})[0]
    )
    out = towers(x)
    middle = out.inputs[0]  # an intermediate node, fed
    fed = ad.Executor([out], workers=2).run({x: np.ones(3), middle: np.zeros(3)})
    expected = ad.Executor([out]).run({x: np.ones(3), middle: np.zeros(3)})
    np.testing.assert_array_equal(fed[0], expected[0])


def test_an_error_in_a_worker_is_the_ops_readable_error():
    x, y = ad.Variable("x"), ad.Variable("y")
    out = towers(x) + ad.exp(y) * ad.sin(y)
    executor = ad.Executor([out], workers=2)
    with pytest.raises(ad.ShapeError, match=r"add: cannot broadcast shapes \(3,\) and \(4,\)"):
        executor.run({x: np.ones(3), y: np.ones(4)})
    executor.run({x: np.ones(3), y: np.ones(3)})  # the pool still works afterwards


@pytest.mark.parametrize("workers", [0, -1, 1.5, "2", True])
def test_workers_must_be_a_whole_number_of_threads(workers):
    with pytest.raises(ValueError, match="workers must be a whole number of threads"):
        ad.Executor([ad.Variable("x") * 2], workers=workers)


def test_a_memory_plan_runs_in_one_worker_only():
    x = ad.Variable("x")
    out = towers(x)
    plan = ad.memory.plan([out], {x: np.ones(3)})
    with pytest.raises(ValueError, match="plan= with workers > 1"):
        ad.Executor([out], plan=plan, workers=2)


@requires_gpu
def test_workers_on_the_gpu_use_a_stream_each_and_give_the_same_values():
    x = ad.Variable("x")
    out = towers(x)
    feed = {x: ad.backend.asarray(np.linspace(-1, 1, 256), device="gpu")}
    sequential = ad.Executor([out]).run(feed)[0]
    executor = ad.Executor([out], workers=2)
    parallel = executor.run(feed)[0]
    assert ad.backend.device_of(parallel) == "gpu"
    streams = executor._parallel._streams  # one per worker that ran a node
    assert set(streams) == {event.worker for event in executor.trace}
    assert len({id(stream) for stream in streams.values()}) == len(streams)
    np.testing.assert_array_equal(ad.backend.to_numpy(parallel), ad.backend.to_numpy(sequential))
