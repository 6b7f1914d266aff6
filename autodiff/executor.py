"""Running a graph: the Executor of define-then-run frameworks.

The graph is sorted once into a *schedule*: for each step, the node to compute, the
slots holding its inputs, and the slots whose values nobody needs afterwards (so they
can be freed: the simplest form of memory planning). Each ``run`` then walks the
schedule with the values fed for this run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import backend
from .graph import Constant, Node, Placeholder, ShapeError, find_topo_sort

if TYPE_CHECKING:
    from .memory import MemoryPlan

Step = tuple[Node, list[int], list[int]]  # node, input slots, slots to free after it


def schedule(topo_order: Sequence[Node], keep: set[Node]) -> tuple[list[Step], dict]:
    """The steps for ``topo_order``, freeing every value not in ``keep`` after its last use.

    A node whose inputs are not in ``topo_order`` (it is fed, or already has a value) is
    never computed, so it gets no input slots.
    """
    slot = {node: i for i, node in enumerate(topo_order)}
    last_use: dict[Node, int] = {}
    for step, node in enumerate(topo_order):
        for x in node.inputs:
            if x in slot:
                last_use[x] = step
    frees: list[list[int]] = [[] for _ in topo_order]
    for x, step in last_use.items():
        if x not in keep:
            frees[step].append(slot[x])
    steps = []
    for i, node in enumerate(topo_order):
        input_slots = [slot[x] for x in node.inputs if x in slot]
        steps.append((node, input_slots, frees[i]))
    return steps, slot


def run_schedule(steps: Sequence[Step], values: list) -> list:
    """Compute every slot of ``values`` that is still None, in schedule order."""
    for i, (node, input_slots, frees) in enumerate(steps):
        if values[i] is None:
            if node.op.is_leaf:
                values[i] = _leaf_value(node, steps)
            else:
                values[i] = node.op.run([values[j] for j in input_slots], node.attrs)
        for j in frees:
            values[j] = None
    return values


def _leaf_value(node: Node, steps: Sequence[Step]) -> Any:
    if node.value is None:
        names = sorted({n.name for n, _, _ in steps if isinstance(n.op, Placeholder)})
        raise ValueError(
            f"Placeholder '{node.name}' has no value. Put it in the feed: "
            f"ad.evaluate(output, {{{node.name}: array}}) or "
            f"Executor(outputs).run({{{node.name}: array}}). Placeholders here: {names}."
        )
    return node.value


class Executor:
    """Runs a graph: ``Executor(nodes).run(feed_dict) -> list of arrays``.

    Nodes are evaluated in topological order; an intermediate value is freed as soon as
    its last consumer has run. ``feed_dict`` maps nodes (or their names) to arrays and may
    override any leaf: this is how one graph is run on many inputs.

    ``plan`` (from ``ad.memory.plan``) runs the graph with that memory plan instead:
    in its order, writing each value into its planned buffer.

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> [float(v) for v in Executor([x * x, x + 1]).run({x: 3.0})]
    [9.0, 4.0]
    """

    def __init__(self, nodes: Node | Sequence[Node], plan: MemoryPlan | None = None):
        self.nodes = [nodes] if isinstance(nodes, Node) else list(nodes)
        for node in self.nodes:
            if not isinstance(node, Node):
                raise TypeError(f"Executor takes Nodes, got {type(node).__name__}: {node!r}")
        self.topo_order = find_topo_sort(self.nodes)
        self._steps, self._slot = schedule(self.topo_order, set(self.nodes))
        self.plan = plan
        if plan is not None:
            plan.check_outputs(self.nodes)

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
        run_schedule(steps, values)
        return [values[slot[node]] for node in self.nodes]

    def _feed_values(self, feed_dict: dict) -> dict:
        by_name: dict[str, list[Node]] = {}
        for node in self.topo_order:
            if node.op.is_leaf and not isinstance(node.op, Constant):
                by_name.setdefault(node.name, []).append(node)
        return {
            _resolve(key, by_name): _check_feed(key, data, by_name)
            for key, data in feed_dict.items()
        }


def _resolve(key, by_name: dict[str, list[Node]]) -> Node:
    if isinstance(key, Node):
        return key
    if isinstance(key, str):
        found = by_name.get(key, [])
        if len(found) == 1:
            return found[0]
        if not found:
            raise KeyError(
                f"feed_dict names '{key}', but the graph has no leaf of that name. "
                f"Leaves: {sorted(by_name)}."
            )
        raise KeyError(
            f"feed_dict names '{key}', but {len(found)} leaves have that name: "
            f"use the node itself as the key."
        )
    raise TypeError(f"feed_dict keys must be Nodes or names, got {type(key).__name__}.")


def _check_feed(key, data, by_name) -> Any:
    """The array fed for a node, in its declared dtype, checked against its shape."""
    node = _resolve(key, by_name)
    if not isinstance(node.op, Placeholder):
        return data if backend.is_weak_scalar(data) else backend.asarray(data)
    value = backend.asarray(data, dtype=node.attrs.get("dtype"))
    declared = node.attrs.get("shape")
    if declared is not None:
        fits = len(declared) == value.ndim and all(
            d is None or d == s for d, s in zip(declared, value.shape, strict=True)
        )
        if not fits:
            raise ShapeError(
                f"Placeholder '{node.name}' was declared with shape {declared} but was fed "
                f"an array of shape {tuple(value.shape)}. Feed a matching array, or declare "
                f"the placeholder with None for dimensions that vary."
            )
    return value


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


def fill_values(nodes: Sequence[Node], built: Sequence[Node] = ()) -> None:
    """Compute the missing values of ``nodes`` from the values already in the graph.

    Used after building a gradient graph with ``deferred()``: only nodes that the
    results need are computed, and intermediate values are freed as soon as possible.
    ``built`` (the nodes ``deferred()`` recorded, a topological order) saves a sort.
    """
    if built and _fill_from_built(nodes, built):
        return
    topo_order = find_topo_sort(nodes, descend=lambda n: n.value is None)
    steps, slot = schedule(topo_order, set(nodes))
    values = run_schedule(steps, [n.value for n in topo_order])
    for node in nodes:
        node.value = values[slot[node]]


def _fill_from_built(nodes: Sequence[Node], built: Sequence[Node]) -> bool:
    """``fill_values`` in the creation order of ``built``; False if that is not enough."""
    built_set = set(built)
    needed = set(nodes)
    for node in reversed(built):
        if node in needed:
            for x in node.inputs:
                if x.value is None:
                    if x not in built_set:
                        return False  # a symbolic node from elsewhere: sort properly
                    needed.add(x)
    order = [node for node in built if node in needed]
    steps, _ = schedule(order, set(nodes))
    for node, _, frees in steps:
        node.value = node.op.run([x.value for x in node.inputs], node.attrs)
        for j in frees:
            order[j].value = None  # an intermediate adjoint: free it
    return True
