"""Running a graph: the Executor of define-then-run frameworks.

The graph is sorted once, in topological order. ``run`` is the loop of the lecture: a
dict of values, filled from the feeds, then for each step of the schedule (schedule.py)
the node computed from its inputs' values, and what nobody needs any more freed.

``ad.Executor``, as users call it, is this Executor with the strategies that make runs
fast or small (memory plans, graph passes, fusion, compiled code, workers, CUDA graphs:
system/executor.py); it computes the same values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .graph import Node, find_topo_sort
from .schedule import resolve_feeds, run_schedule, schedule


class Executor:
    """Runs a graph: ``Executor(nodes).run(feed_dict) -> list of arrays``.

    Nodes are evaluated in topological order; an intermediate value is freed as soon as
    its last consumer has run. ``feed_dict`` maps nodes (or their names) to arrays and may
    override any leaf: this is how one graph is run on many inputs.

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> [float(v) for v in Executor([x * x, x + 1]).run({x: 3.0})]
    [9.0, 4.0]
    """

    def __init__(self, nodes: Node | Sequence[Node]):
        self.nodes = [nodes] if isinstance(nodes, Node) else list(nodes)
        for node in self.nodes:
            if not isinstance(node, Node):
                raise TypeError(f"Executor takes Nodes, got {type(node).__name__}: {node!r}")
        self.topo_order = find_topo_sort(self.nodes)
        self.leaves = [node for node in self.topo_order if node.op.is_leaf]

    def run(self, feed_dict: dict | None = None) -> list:
        """The outputs' values, computed from ``feed_dict`` (nodes or names to arrays)."""
        values: dict[Node, Any] = resolve_feeds(self.leaves, feed_dict or {})
        order = self.topo_order
        if any(not node.op.is_leaf for node in values):
            # A fed intermediate node: its inputs need not (and may not) be computed.
            order = find_topo_sort(self.nodes, descend=lambda n: n not in values)
        run_schedule(schedule(order, self.nodes), values)
        return [values[node] for node in self.nodes]
