"""Running a graph: the Executor of define-then-run frameworks.

The graph is sorted once into a *schedule*: for each step, the node to compute, the
slots holding its inputs, and the slots whose values nobody needs afterwards (so they
can be freed: the simplest form of memory planning). The first ``run`` walks the
schedule with the values fed for this run, checking every op's inputs on the way.

Later runs with inputs of the same dtypes need none of that bookkeeping: the schedule
is turned into the source of one Python function, a line per op (``v7 = f7(v3, v5)``)
and a ``del`` after each value's last use, compiled once and called each run
(``Executor.source`` shows it). This is what "compiling a graph" means in small:
Python's own loop and list lookups disappear, and what is left per op is the call of
its ``compute``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import backend, fusion, passes
from .fusion import FusionReport
from .graph import Node, Placeholder, TensorLeaf, describe, find_topo_sort
from .passes import OptimizeReport
from .scheduling import Step, resolve_feeds, run_schedule, schedule

if TYPE_CHECKING:
    from .memory import MemoryPlan


def straight_line(steps: Sequence[Step], result_slots: Sequence[int]) -> tuple[str, dict]:
    """The schedule as the source of one Python function, and the names it uses.

    ``run(values)`` takes the leaves' values (in their slots) and returns the results:
    one line per op, ``v7 = f7(v3, v5)`` with ``f7`` the op's ``compute`` (its settings
    bound), and a ``del`` after each value's last use. It is what the schedule loop
    does, minus the loop: no lookups in lists, no checks, the same calls in the same
    order. The checks are made once by a checked run (see ``Executor.run``).
    """
    lines = ["def run(values):"]
    names: dict[str, Any] = {}
    for i, (node, input_slots, frees) in enumerate(steps):
        if node.op.is_leaf:
            lines.append(f"    v{i} = values[{i}]")
        else:
            compute = node.op.compute
            names[f"f{i}"] = functools.partial(compute, **node.attrs) if node.attrs else compute
            args = ", ".join(f"v{j}" for j in input_slots)
            lines.append(f"    v{i} = f{i}({args})  # {node.op.name}")
        if frees:
            lines.append(f"    del {', '.join(f'v{j}' for j in frees)}")
    lines.append(f"    return [{', '.join(f'v{i}' for i in result_slots)}]")
    return "\n".join(lines) + "\n", names


# What an op raises on inputs it cannot take (NumPy's and ours). The straight-line
# function lets these through to a checked run, which explains them; any other error
# (MemoryError, a bug) is raised as it is.
INPUT_ERRORS = (ValueError, TypeError, ArithmeticError, IndexError)


class Executor:
    """Runs a graph: ``Executor(nodes).run(feed_dict) -> list of arrays``.

    Nodes are evaluated in topological order; an intermediate value is freed as soon as
    its last consumer has run. ``feed_dict`` maps nodes (or their names) to arrays and may
    override any leaf: this is how one graph is run on many inputs.

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
    ):
        self.nodes = [nodes] if isinstance(nodes, Node) else list(nodes)
        for node in self.nodes:
            if not isinstance(node, Node):
                raise TypeError(f"Executor takes Nodes, got {type(node).__name__}: {node!r}")
        if plan is not None and (optimize or fuse):
            flag, rewrite = (
                ("optimize", "passes.optimize") if optimize else ("fuse", "fusion.fuse_elementwise")
            )
            raise ValueError(
                f"Executor: plan= with {flag}=True would plan one graph and run another. "
                f"{flag.capitalize()} first, then plan the result: small, _ = "
                f"ad.{rewrite}(nodes); Executor(small, plan=ad.memory.plan(small, feed))"
            )
        self.optimize_report: OptimizeReport | None = None
        self.fusion_report: FusionReport | None = None
        self._run_nodes = self.nodes
        if optimize:
            self._run_nodes, self.optimize_report = passes.optimize(self.nodes)
        if fuse:
            self._run_nodes, self.fusion_report = fusion.fuse_elementwise(self._run_nodes)
        self.topo_order = find_topo_sort(self._run_nodes)
        self._steps, self._slot = schedule(self.topo_order, set(self._run_nodes))
        # Feeds name leaves of the graph asked for, which optimising may have removed.
        graph = find_topo_sort(self.nodes) if optimize or fuse else self.topo_order
        self._leaves = [node for node in graph if node.op.is_leaf]
        # An output that optimising turned into a leaf would hand out the leaf's own
        # array, which the caller may change in place (p -= lr * grad): copy those.
        self._copied_outputs = [
            i
            for i, (new, old) in enumerate(zip(self._run_nodes, self.nodes, strict=True))
            if new is not old and new.op.is_leaf
        ]
        self.plan = plan
        if plan is not None:
            plan.check_outputs(self.nodes)
        # After a checked run, runs with the same leaf dtypes take a straight-line
        # Python function made from the schedule (see straight_line; .source shows it).
        self._leaf_slots = [i for i, (node, _, _) in enumerate(self._steps) if node.op.is_leaf]
        self._checked: set[tuple] = set()
        self._compiled = None
        self.source: str | None = None

    def run(self, feed_dict: dict | None = None) -> list:
        feeds = self._feed_values(feed_dict or {})
        if self.plan is not None:
            return self.plan.run(feeds)
        steps, slot = self._steps, self._slot
        if any(not node.op.is_leaf for node in feeds):
            # A fed intermediate node: its inputs need not (and may not) be computed.
            order = find_topo_sort(self.nodes, descend=lambda n: n not in feeds)
            steps, slot = schedule(order, set(self.nodes))
        values = [None] * len(steps)
        for node, value in feeds.items():
            if node in slot:
                values[slot[node]] = value
        dtypes = self._leaf_dtypes(values) if steps is self._steps else None
        results = None
        if dtypes in self._checked:
            results = self._run_straight_line(values)
        if results is None:  # the checked run: every op's checks, readable errors
            run_schedule(steps, values)
            results = [values[slot[node]] for node in self._run_nodes]
            if dtypes is not None:
                self._checked.add(dtypes)
        for i in self._copied_outputs:
            results[i] = _copy_of(results[i])
        return results

    def _leaf_dtypes(self, values: list) -> tuple | None:
        """The leaves' dtypes (filling in the values of leaves not fed), or None if a
        placeholder has no value (the checked run says so)."""
        dtypes = []
        for i in self._leaf_slots:
            if values[i] is None:
                values[i] = self._steps[i][0].value
                if values[i] is None:
                    return None
            dtypes.append(backend.dtype_of(values[i]) or type(values[i]))
        return tuple(dtypes)

    def _run_straight_line(self, values: list) -> list | None:
        """The results from the straight-line function, or None after an error: the
        checked run then raises it, in words a student can read. Only for leaf dtypes
        that a checked run has seen: every check an op makes depends on dtypes, and the
        leaves' dtypes decide all the others."""
        try:
            return self._straight_line()(values)  # reads the leaves' slots, writes none
        except INPUT_ERRORS:  # an op refused its inputs: the checked run says how
            return None

    def _straight_line(self):
        if self._compiled is None:
            result_slots = [self._slot[node] for node in self._run_nodes]
            self.source, names = straight_line(self._steps, result_slots)
            exec(compile(self.source, "<autodiff.Executor>", "exec"), names)
            self._compiled = names["run"]
        return self._compiled

    def _feed_values(self, feed_dict: dict) -> dict:
        feeds = resolve_feeds(self._leaves, feed_dict)
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


def _copy_of(value: Any) -> Any:
    return value if backend.is_weak_scalar(value) else value.copy()


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
