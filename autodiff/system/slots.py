"""The core's schedule (core/schedule.py) over numbered slots: the fast form of it.

The core keeps values in a dict keyed by node; here each node of the order has a slot,
a position in a list, and a step reads its inputs' slots (a list index is quicker than
a hash). ``schedule`` turns a topological order into steps (the node, the slots of its
inputs, the slots nobody needs afterwards); ``run_schedule`` walks them. ``ad.Executor``,
the gradients of ``ad.gradients`` (``fill_values``), memory plans, compiled code and the
parallel workers all run on these.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from typing import Any, TypeVar

from ..core.errors import DTypeError
from ..core.graph import Node, Placeholder, find_topo_sort

Step = tuple[Node, list[int], list[int]]  # node, input slots, slots to free after it
Compute = Callable[[Node, list], Any]  # (node, its inputs' values) -> its value
T = TypeVar("T")  # what a step computes: a node, or a fused kernel's instruction


def schedule(topo_order: Sequence[Node], keep: set[Node]) -> tuple[list[Step], dict]:
    """The steps for ``topo_order``, freeing every value not in ``keep`` after its last use.

    A node whose inputs are not in ``topo_order`` (it is fed, or already has a value) is
    never computed, so it gets no input slots.
    """
    slot = {node: i for i, node in enumerate(topo_order)}
    reads = [[slot[x] for x in node.inputs if x in slot] for node in topo_order]
    frees = last_reads(reads, keep={slot[node] for node in keep if node in slot})
    return list(zip(topo_order, reads, frees, strict=True)), slot


def last_reads(reads: Sequence[Sequence[int]], keep: Container[int] = ()) -> list[list[int]]:
    """For each step (``reads[k]``: the slots step k reads), the slots it is the last to
    read, but those in ``keep``: what can be freed once it has run."""
    last: dict[int, int] = {}
    for step, slots in enumerate(reads):
        for j in slots:
            last[j] = step
    frees: list[list[int]] = [[] for _ in reads]
    for j, step in last.items():
        if j not in keep:
            frees[step].append(j)
    return frees


def run_schedule(
    steps: Sequence[tuple[T, list[int], list[int]]],
    values: list,
    compute: Callable[[T, list], Any] | None = None,
) -> list:
    """The core's loop, on slots: for each step, compute its node from its inputs' values
    (unless it has one already: a leaf, a fed node), then free the values nobody needs
    any more. ``compute(node, input_vals)`` is ``node.op.run`` unless a strategy gives
    another (a memory plan writes into its buffers; a fused kernel's steps are its
    instructions)."""
    for i, (node, input_slots, frees) in enumerate(steps):
        if values[i] is None:
            input_vals = [values[j] for j in input_slots]
            try:
                if compute is None:
                    values[i] = node.op.run(input_vals, node.attrs)  # type: ignore[attr-defined]
                else:
                    values[i] = compute(node, input_vals)
            except DTypeError:
                if isinstance(node, Node):  # the same error, with advice for the input node
                    node.op.check_dtypes(input_vals, node.inputs)
                raise
        for j in frees:
            values[j] = None
    return values


def fill_leaves(steps: Sequence[Step], values: list) -> list:
    """Put each leaf's own value into its slot, unless the slot has one (it was fed)."""
    for i, (node, _, _) in enumerate(steps):
        if values[i] is None and node.op.is_leaf:
            if node.value is None:
                names = sorted({n.name for n, _, _ in steps if isinstance(n.op, Placeholder)})
                raise ValueError(
                    f"Placeholder '{node.name}' has no value. Put it in the feed: "
                    f"ad.evaluate(output, {{{node.name}: array}}) or "
                    f"Executor(outputs).run({{{node.name}: array}}). Placeholders here: {names}."
                )
            values[i] = node.value
    return values


def fill_values(nodes: Sequence[Node], built: Sequence[Node] = (), release=()) -> None:
    """Compute the missing values of ``nodes`` from the values already in the graph.

    Used after building a gradient graph with ``deferred()``: only nodes that the
    results need are computed, and intermediate values are freed as soon as possible.
    ``built`` (the nodes ``deferred()`` recorded, a topological order) saves a sort.
    The nodes of ``release`` let go of their values, which live on in the schedule
    until read for the last time (``gradients(..., retain_graph=False)``).
    """
    order = _order_from_built(nodes, built) if built else None
    if order is None:
        order = find_topo_sort(nodes, descend=lambda n: n.value is None)
    steps, slot = schedule(order, set(nodes))
    values = fill_leaves(steps, [n.value for n in order])
    for node in release:
        node.value = None
    values = run_schedule(steps, values)
    for node in nodes:
        if node in slot:  # (a node not built here may hold its value already)
            node.value = values[slot[node]]


def _order_from_built(nodes: Sequence[Node], built: Sequence[Node]) -> list[Node] | None:
    """The values read, then the nodes to compute in the creation order of ``built``: a
    topological order with no sort. None if a symbolic node from elsewhere is needed."""
    built_set, needed = set(built), set(nodes)
    known: dict[Node, None] = {}  # inputs holding values, in order of first use
    for node in reversed(built):
        if node in needed:
            for x in node.inputs:
                if x.value is not None:
                    known[x] = None
                elif x in built_set:
                    needed.add(x)
                else:
                    return None  # a symbolic node from elsewhere: sort properly
    return [*reversed(known), *(node for node in built if node in needed)]
