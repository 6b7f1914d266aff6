"""``ad.Executor``: the core's Executor (core/executor.py), with the strategies that
make a run fast or small. Each comes from its own module of this layer:

* ``optimize=True`` (passes.py) and ``fuse=True`` (fusion.py) rewrite the graph first:
  the schedule is that of a smaller graph, or of one with fused kernels;
* ``plan=`` (memory.py) orders the schedule as planned and computes each step into its
  planned buffer;
* the schedule runs on numbered slots (slots.py), and after a checked run, runs with the
  same leaf dtypes call it compiled into one Python function (compiled.py;
  ``Executor.source`` shows it);
* ``workers=N`` (parallel.py) runs the nodes that are ready at once on N threads;
* ``capture=True`` (capture.py), on the GPU, records the compiled run as CUDA graphs
  once and replays them: one launch for many kernels.

Every strategy computes the values the core's loop computes.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core import executor as core
from ..core.graph import Node, Placeholder, TensorLeaf, describe, find_topo_sort
from ..core.schedule import resolve_feeds
from . import backend, fusion, passes
from .capture import Capture, CaptureReport
from .compiled import StraightLine
from .fusion import FusionReport
from .gradients import check_fixed_shapes, fixed_shapes
from .parallel import Event, ParallelRun, as_workers, widest_level
from .passes import OptimizeReport
from .slots import Compute, fill_leaves, run_schedule, schedule

if TYPE_CHECKING:
    from .memory import MemoryPlan


class Executor(core.Executor):
    """Runs a graph: ``Executor(nodes).run(feed_dict) -> list of arrays``.

    Nodes are evaluated in topological order; an intermediate value is freed as soon as
    its last consumer has run. ``feed_dict`` maps nodes (or their names) to arrays and may
    override any leaf: this is how one graph is run on many inputs. Gradients taken of
    an imperative graph (tensors) hold to its shapes, so feeding its values at new shapes
    is refused with a ShapeError; gradients of placeholders follow the fed shapes.

    ``plan`` (from ``ad.memory.plan``) runs the graph with that memory plan instead:
    in its order, writing each value into its planned buffer.

    ``optimize=True`` runs a smaller graph with the same values, made by the graph
    passes (``autodiff.passes.optimize``; ``optimize_report`` says what they did). That
    graph is specialised to the shapes and dtypes of its tensors, and only placeholders
    and tensors may be fed to it. To plan an optimized graph, optimize first and plan
    the result: ``small, _ = passes.optimize(nodes)``, then
    ``Executor(small, plan=memory.plan(small, feed))``.

    ``fuse=True`` runs each group of elementwise ops as one node, which is one kernel
    on the GPU (``autodiff.fusion``; ``fusion_report`` lists the groups). On the CPU
    the values are the same, bit for bit. Only placeholders and tensors may be fed.

    ``workers=N`` runs nodes that do not depend on each other at the same time, on N
    threads (``autodiff.parallel``; ``trace`` says which ran where, and when): the same
    values, bit for bit, faster where the ops are large. A chain stays in the loop.

    ``capture=True``, for a graph on the GPU, records the compiled run's kernels once as
    CUDA graphs and replays them at each later run (``autodiff.capture``;
    ``capture_report`` says what was recorded): the host launches a few graphs instead
    of a kernel per op. Tensors the graph reads must be updated in place (as the
    optimisers do); fed arrays are copied in. On the CPU it runs as compiled.

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> [float(v) for v in Executor([x * x, x + 1]).run({x: 3.0})]
    [9.0, 4.0]
    """

    def __init__(
        self,
        nodes: Node | Sequence[Node],
        plan: MemoryPlan | None = None,
        *,
        optimize: bool = False,
        fuse: bool = False,
        workers: int = 1,
        capture: bool = False,
    ):
        super().__init__(nodes)  # the nodes checked and sorted, their leaves found
        if plan is not None and (optimize or fuse):
            flag, rewrite = (
                ("optimize", "passes.optimize") if optimize else ("fuse", "fusion.fuse_elementwise")
            )
            raise ValueError(
                f"Executor: plan= with {flag}=True would plan one graph and run another. "
                f"{flag.capitalize()} first, then plan the result: small, _ = "
                f"ad.{rewrite}(nodes); Executor(small, plan=ad.memory.plan(small, feed))"
            )
        workers = as_workers(workers)
        if capture and (plan is not None or workers > 1):
            raise ValueError(
                "Executor: capture=True records the run with buffers of its own, one "
                "kernel after another; it takes neither plan= nor workers > 1."
            )
        if plan is not None and workers > 1:
            raise ValueError(
                "Executor: plan= with workers > 1: a memory plan shares buffers between "
                "steps in its order, which workers running at once would not keep. Use one."
            )
        self.optimize_report: OptimizeReport | None = None
        self.fusion_report: FusionReport | None = None
        self._run_nodes = self.nodes
        if optimize:
            self._run_nodes, self.optimize_report = passes.optimize(self.nodes)
        if fuse:
            self._run_nodes, self.fusion_report = fusion.fuse_elementwise(self._run_nodes)
        self.plan = plan
        if plan is not None:
            plan.check_outputs(self.nodes)
        # Feeds name leaves of the graph asked for (self.leaves), which optimising may
        # have removed; values whose shapes its gradients were built for (gradients.py).
        self._fixed_shapes = fixed_shapes(self.topo_order)
        if plan is not None:
            self.topo_order = plan.order
        elif optimize or fuse:
            self.topo_order = find_topo_sort(self._run_nodes)
        self._steps, self._slot = schedule(self.topo_order, set(self._run_nodes))
        # An output that optimising turned into a leaf would hand out the leaf's own
        # array, which the caller may change in place (p -= lr * grad): copy those.
        self._copied_outputs = {
            i
            for i, (new, old) in enumerate(zip(self._run_nodes, self.nodes, strict=True))
            if new is not old and new.op.is_leaf
        }
        result_slots = [self._slot[node] for node in self._run_nodes]
        self._compiled = None if plan is not None else StraightLine(self._steps, result_slots)
        self._capture = Capture(self._steps, result_slots) if capture else None
        # Workers for a graph with nodes to run side by side; a chain runs in the loop.
        self._parallel = None
        if workers > 1 and widest_level(self._steps) > 1:
            self._parallel = ParallelRun(self._steps, set(result_slots), workers)
            weakref.finalize(self, self._parallel.close)

    @property
    def trace(self) -> list[Event]:
        """With ``workers``: which node ran on which worker in the last run, and when."""
        return [] if self._parallel is None else self._parallel.trace

    @property
    def capture_report(self) -> CaptureReport | None:
        """With ``capture=True``: recordings, replays, and the steps run between graphs."""
        return None if self._capture is None else self._capture.report

    @property
    def source(self) -> str | None:
        """The straight-line function's text, once a run has used it."""
        return None if self._compiled is None else self._compiled.source

    def run(self, feed_dict: dict | None = None) -> list:
        """The outputs' values, computed from ``feed_dict`` (nodes or names to arrays)."""
        feeds = self._feed_values(feed_dict or {})
        steps, slot, compiled = self._steps, self._slot, self._compiled
        if any(not node.op.is_leaf for node in feeds):
            # A fed intermediate node: its inputs need not (and may not) be computed.
            order = find_topo_sort(self.nodes, descend=lambda n: n not in feeds)
            (steps, slot), compiled = schedule(order, set(self.nodes)), None
        values = None if compiled is None else compiled.leaf_values(feeds)
        if values is None:  # (fill_leaves says which placeholder has no value)
            values = fill_leaves(steps, [feeds.get(node) for node, _, _ in steps])
        if self._parallel is not None and steps is self._steps:  # the workers' schedule
            self._parallel.run(values)
            return self._results(values, slot)
        if self._capture is not None and compiled is not None and compiled is self._compiled:
            if compiled.dtypes(values) in compiled.checked:  # (checked: recorded next)
                captured = self._capture.run(values)
                if captured is not None:
                    return captured  # (copies already: the caller's own)
        results = compiled.run(values) if compiled is not None else None
        if results is None:  # the checked run: every op's checks, readable errors
            dtypes = compiled.dtypes(values) if compiled is not None else ()
            run_schedule(steps, values, self._compute())
            if compiled is not None:
                compiled.vouch(dtypes)  # later runs with these dtypes: compiled
            return self._results(values, slot)
        return self._results(results)

    def _results(self, values: list, slot: dict | None = None) -> list:
        """The outputs (from their slots, if ``slot``), copied where they are leaves."""
        results = values if slot is None else [values[slot[node]] for node in self._run_nodes]
        copy_of = backend.copy_of
        return [copy_of(r) if i in self._copied_outputs else r for i, r in enumerate(results)]

    def _compute(self) -> Compute | None:
        """How each step computes: ``op.run``, or into the memory plan's buffers."""
        plan = self.plan
        if plan is None:
            return None
        buffers: dict[int, Any] = {}  # this run's, allocated at first use
        return lambda node, input_vals: plan.compute(node, input_vals, buffers)

    def _feed_values(self, feed_dict: dict) -> dict:
        feeds = resolve_feeds(self.leaves, feed_dict)
        if self._fixed_shapes:
            check_fixed_shapes(feeds, self._fixed_shapes)
        if self.plan is not None:
            self.plan.check_feeds(feeds)
        if self.optimize_report is not None or self.fusion_report is not None:
            flag = "optimize" if self.optimize_report is not None else "fuse"
            feeds = {
                node: _check_rewritten_feed(node, value, flag) for node, value in feeds.items()
            }
        return feeds


def _check_rewritten_feed(node: Node, value: Any, flag: str) -> Any:
    """A feed that a rewritten graph can take: placeholders and tensors (the others may
    have been folded or merged away); after ``optimize``, tensors of the shape and dtype
    the graph was specialised to (static_shapes.py)."""
    if isinstance(node.op, Placeholder) or (isinstance(node.op, TensorLeaf) and flag == "fuse"):
        return value
    if isinstance(node.op, TensorLeaf):
        expected: Any = node.value
        if backend.is_weak_scalar(value):  # a Python number takes the tensor's dtype
            value = backend.asarray(value, expected.dtype, backend.device_of(expected))
        if tuple(value.shape) == tuple(expected.shape) and value.dtype == expected.dtype:
            return value
        raise ValueError(
            f"Executor(optimize=True) optimised the graph for tensor '{node.name}' as "
            f"{describe(expected)}, but it was fed {describe(value)}. Feed a matching "
            f"array, use an ad.Variable (shape=None for axes that vary), or optimize=False."
        )
    raise ValueError(
        f"Executor({flag}=True) cannot feed '{node.name}' ({node.op.name}): the rewritten "
        f"graph may have folded or merged it. Feed placeholders and tensors only, or build "
        f"the Executor with {flag}=False to override constants and intermediate nodes."
    )


def evaluate(nodes: Node | Sequence[Node], feed_dict: dict | None = None):
    """Evaluate one node (returns an array) or several (returns a list).

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> float(evaluate(x ** 2, {"x": 4.0}))
    16.0
    """
    if isinstance(nodes, Node):
        return Executor([nodes]).run(feed_dict)[0]
    return Executor(nodes).run(feed_dict)
