"""Running a graph: the Executor of define-then-run frameworks.

The graph is sorted once into a *schedule*: for each step, the node to compute, the
slots holding its inputs, and the slots whose values nobody needs afterwards (so they
can be freed: the simplest form of memory planning). Each ``run`` then walks the
schedule with the values fed for this run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import backend, fusion, passes
from .fusion import FusionReport
from .graph import (
    Constant,
    Node,
    Placeholder,
    ShapeError,
    TensorLeaf,
    describe,
    find_topo_sort,
)
from .passes import OptimizeReport

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
            rewrite = "ad.passes.optimize" if optimize else "ad.fusion.fuse_elementwise"
            raise ValueError(
                f"Executor: plan= with {'optimize' if optimize else 'fuse'}=True would plan "
                f"one graph and run another. {'Optimize' if optimize else 'Fuse'} first, then "
                f"plan the result: small, _ = "
                f"{rewrite}(nodes); Executor(small, plan=ad.memory.plan(small, feed))"
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
        results = [values[slot[node]] for node in self._run_nodes]
        for i in self._copied_outputs:
            results[i] = _copy_of(results[i])
        return results

    def _feed_values(self, feed_dict: dict) -> dict:
        by_name: dict[str, list[Node]] = {}
        for node in self._leaves:
            if not isinstance(node.op, Constant):
                by_name.setdefault(node.name, []).append(node)
        feeds = {
            _resolve(key, by_name): _check_feed(key, data, by_name)
            for key, data in feed_dict.items()
        }
        if self.optimize_report is not None:
            feeds = {node: _check_optimized_feed(node, value) for node, value in feeds.items()}
        elif self.fusion_report is not None:
            for node in feeds:
                if not isinstance(node.op, (Placeholder, TensorLeaf)):
                    raise ValueError(
                        f"Executor(fuse=True) cannot feed '{node.name}' ({node.op.name}): "
                        f"fusion may have merged it into a fused group. Feed placeholders "
                        f"and tensors only, or build the Executor with fuse=False."
                    )
        return feeds


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


def _check_optimized_feed(node: Node, value: Any) -> Any:
    """A feed that the optimised graph can take: placeholders, and tensors of the shape
    and dtype the graph was specialised to (static_shapes.py)."""
    if isinstance(node.op, Placeholder):
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
        f"Executor(optimize=True) cannot feed '{node.name}' ({node.op.name}): the optimised "
        f"graph may have folded or merged it. Feed placeholders and tensors only, or build "
        f"the Executor with optimize=False to override constants and intermediate nodes."
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
