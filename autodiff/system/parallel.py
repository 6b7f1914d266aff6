"""Parallel scheduling: a dependency engine that runs the nodes that are ready at once.

MXNet's engine in small. Each step of the schedule waits for the number of its inputs
still to be computed; a step with none left is *ready* and goes to a pool of worker
threads. When a worker finishes a node, each of the node's consumers has one input
less to wait for, and a value whose consumers have all run is freed. NumPy and CuPy
release Python's lock (the GIL) inside large kernels, so two workers compute two large
independent ops on two cores at once; on a GPU each worker launches its kernels on a
CUDA stream of its own.

The values are those of the sequential loop, bit for bit: every node is computed once,
by the same op, from the same inputs; only the order of independent nodes changes.
``Executor(outputs, workers=2)`` uses it; ``trace`` records which node ran on which
worker, and when, for a timeline (``viz.draw_timeline``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.graph import Node
from . import backend
from .slots import Compute, Step


@dataclass(frozen=True)
class Event:
    """One node's computation: which worker ran it, from when to when (seconds from the
    start of the run)."""

    node: Node
    worker: int
    start: float
    end: float


class ParallelRun:
    """Runs a schedule's steps on ``workers`` threads, each as soon as its inputs are ready.

    The threads are the run's own, started once, waiting on a queue of ready steps
    between runs. A worker takes a ready step, computes it, and then, holding the lock,
    stores the value, frees the inputs it was the last to read, and queues the
    consumers it made ready. The caller waits until no step is left.
    """

    def __init__(self, steps: Sequence[Step], keep: set[int], workers: int):
        self.steps, self.keep, self.workers = steps, keep, workers
        # Who reads each slot: a step's value goes to these consumers when it is done.
        self.consumers: list[list[int]] = [[] for _ in steps]
        for i, (_, input_slots, _) in enumerate(steps):
            for j in set(input_slots):
                self.consumers[j].append(i)
        self.trace: list[Event] = []  # the last run's
        self._ready: queue.SimpleQueue = queue.SimpleQueue()  # (run, step), None: stop
        self._lock = threading.Lock()
        self._streams: dict[int, Any] = {}  # worker -> its CUDA stream, on the GPU
        self._threads = [
            threading.Thread(target=self._serve, args=(k,), daemon=True, name=f"autodiff-{k}")
            for k in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def run(self, values: list, compute: Compute | None = None) -> list:
        """Compute every slot of ``values`` that is None; the others (leaves, fed nodes)
        are ready from the start. Returns ``values``, freed as the sequential loop frees."""
        run = _Run(values, compute)
        for i, (_, input_slots, _) in enumerate(self.steps):
            if values[i] is None:
                run.left += 1
                for j in set(input_slots):
                    run.unread[j] += 1
                    if values[j] is None:
                        run.waiting[i] += 1
        if run.left == 0:
            return values
        self.trace = run.trace
        for i in range(len(self.steps)):
            if values[i] is None and run.waiting[i] == 0:
                self._ready.put((run, i))
        run.finished.wait()
        if run.error is not None:
            raise run.error
        run.trace.sort(key=lambda event: event.start)
        return values

    def _serve(self, worker: int) -> None:
        while True:
            item = self._ready.get()
            if item is None:
                return
            self._step(worker, *item)

    def _step(self, worker: int, run: _Run, i: int) -> None:
        if run.error is not None:  # a step of this run failed: the rest is not computed
            return
        node, input_slots, _ = self.steps[i]
        args = [run.values[j] for j in input_slots]
        start = time.perf_counter()
        try:
            with worker_stream(args, self._streams, worker):  # GPU: its own stream
                value = (
                    node.op.run(args, node.attrs)
                    if run.compute is None
                    else run.compute(node, args)
                )
        except BaseException as error:  # noqa: BLE001 (raised by run(), in the caller)
            with self._lock:
                run.error = run.error or error
                run.finished.set()
            return
        end = time.perf_counter()
        with self._lock:
            run.values[i] = value
            run.trace.append(Event(node, worker, start - run.started, end - run.started))
            for j in set(input_slots):  # this node's inputs: one reader less
                run.unread[j] -= 1
                if run.unread[j] == 0 and j not in self.keep:
                    run.values[j] = None
            for k in self.consumers[i]:
                if run.values[k] is None:
                    run.waiting[k] -= 1
                    if run.waiting[k] == 0:
                        self._ready.put((run, k))
            run.left -= 1
            if run.left == 0:
                run.finished.set()

    def close(self) -> None:
        for _ in self._threads:
            self._ready.put(None)


@dataclass
class _Run:
    """One run's state, shared by its workers under the lock."""

    values: list
    compute: Compute | None
    left: int = 0  # steps still to compute
    error: BaseException | None = None
    started: float = field(default_factory=time.perf_counter)
    finished: threading.Event = field(default_factory=threading.Event)
    trace: list[Event] = field(default_factory=list)
    waiting: list[int] = field(init=False)  # inputs not yet computed, per step
    unread: list[int] = field(init=False)  # consumers yet to run, per slot

    def __post_init__(self) -> None:
        self.waiting, self.unread = [0] * len(self.values), [0] * len(self.values)


def plot_trace(trace: Sequence[Event], ax: Any = None) -> Any:
    """A run's timeline (``Executor.trace``): a row per worker, a bar per node from its
    start to its end, in milliseconds, coloured by op. Returns the matplotlib axes."""
    import matplotlib.pyplot as plt

    workers = sorted({event.worker for event in trace})
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.8 + 0.5 * len(workers)))
    colours = plt.get_cmap("tab10")
    ops = {name: k for k, name in enumerate(dict.fromkeys(e.node.op.name for e in trace))}
    for event in trace:
        start, width = 1e3 * event.start, 1e3 * (event.end - event.start)
        colour = colours(ops[event.node.op.name] % 10)
        ax.broken_barh([(start, width)], (event.worker - 0.4, 0.8), color=colour, ec="white")
    for name, k in ops.items():
        ax.bar(0, 0, color=colours(k % 10), label=name)  # the legend's entries
    ax.set_yticks(workers, [f"worker {w}" for w in workers])
    ax.invert_yaxis()
    ax.set_xlabel("ms from the start of the run")
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1), frameon=False)
    return ax


def widest_level(steps: Sequence[Step]) -> int:
    """The most computed steps that could run at once (the widest level of the graph)."""
    level: list[int] = []
    widths: dict[int, int] = {}
    for _, input_slots, _ in steps:
        k = 1 + max((level[j] for j in input_slots), default=-1)
        level.append(k)
        widths[k] = widths.get(k, 0) + (1 if input_slots else 0)
    return max(widths.values(), default=0)


def as_workers(workers: Any) -> int:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(
            f"Executor: workers must be a whole number of threads, 1 or more, got {workers!r}."
        )
    return workers


@contextmanager
def worker_stream(values: Sequence[Any], streams: dict[int, Any], worker: int) -> Iterator[None]:
    """For worker ``worker`` of the parallel executor: GPU kernels launched inside go to
    the worker's own CUDA stream (made at its first GPU node, kept in ``streams``), which
    is waited for at the end, so that the value is complete before another worker's
    stream reads it. On the CPU, nothing."""
    xp = backend.namespace(*values)
    if xp is np:
        yield
        return
    if worker not in streams:
        streams[worker] = xp.cuda.Stream(non_blocking=True)
    with streams[worker]:
        yield
    streams[worker].synchronize()
