"""Scheduling: the order in which a graph's nodes are computed, and the feeds.

``schedule`` turns a topological order into steps: the node to compute, and the values
nobody needs once it has run (they are freed then: a graph's peak memory is what is
alive at once, not everything it computes). ``resolve_feeds`` turns a feed dict (nodes
or names to arrays) into checked values for a graph's leaves. The Executor (executor.py)
and the gradient builder (``fill_values``) run graphs with these.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from . import backend
from .errors import ShapeError
from .graph import Constant, Node, Placeholder, find_topo_sort

Step = tuple[Node, list[Node]]  # the node to compute, the values to free after it


def schedule(topo_order: Sequence[Node], keep: Collection[Node]) -> list[Step]:
    """The steps for ``topo_order``: each node, with the values it is the last to read
    (but those in ``keep``, the results), which can be freed once it has run.

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> y = ad.sin(x)
    >>> z = ad.cos(y)
    >>> [(n.name, [d.name for d in done]) for n, done in schedule([x, y, z], [z])]
    [('x', []), ('sin', ['x']), ('cos', ['sin'])]
    """
    last_reader: dict[Node, Node] = {}
    for node in topo_order:
        for x in node.inputs:
            last_reader[x] = node
    frees: dict[Node, list[Node]] = {node: [] for node in topo_order}
    for x, reader in last_reader.items():
        if x not in keep and reader in frees:
            frees[reader].append(x)
    return [(node, frees[node]) for node in topo_order]


def run_schedule(steps: Sequence[Step], values: dict[Node, Any]) -> dict[Node, Any]:
    """The loop of the lecture: for each step, compute its node from its inputs' values
    (unless it has one already: fed), then free the values nobody needs any more."""
    for node, done in steps:
        if node not in values:
            values[node] = value_of(node, values)
        for x in done:
            values.pop(x, None)
    return values


def value_of(node: Node, values: dict[Node, Any]) -> Any:
    """A node's value: a leaf's own, else its op computed on its inputs' ``values``."""
    if not node.op.is_leaf:
        return node.op.run([values[x] for x in node.inputs], node.attrs, inputs=node.inputs)
    if node.value is None:
        raise ValueError(
            f"Placeholder '{node.name}' has no value. Put it in the feed: "
            f"ad.evaluate(output, {{{node.name}: array}}) or "
            f"Executor(outputs).run({{{node.name}: array}})."
        )
    return node.value


def fill_values(nodes: Sequence[Node]) -> None:
    """Compute the missing values of ``nodes`` from the values already in the graph (a
    gradient graph built with ``deferred()``: only what ``nodes`` need is computed)."""
    order = find_topo_sort(nodes, descend=lambda n: n.value is None)
    known = {node: node.value for node in order if node.value is not None}
    values = run_schedule(schedule(order, nodes), known)
    for node in nodes:
        node.value = values[node]


def resolve_feeds(leaves: Sequence[Node], feed_dict: dict) -> dict[Node, Any]:
    """``feed_dict``'s keys (nodes, or the names of ``leaves``) resolved to nodes, and
    its values to arrays checked against each placeholder's declared dtype and shape."""
    by_name: dict[str, list[Node]] = {}
    for node in leaves if any(isinstance(key, str) for key in feed_dict) else ():
        if not isinstance(node.op, Constant):
            by_name.setdefault(node.name, []).append(node)
    fed = [(_resolve(key, by_name), data) for key, data in feed_dict.items()]
    feeds = {node: _check_feed(node, data) for node, data in fed}
    floats = [n for n, v in feeds.items() if type(v) is float and isinstance(n.op, Placeholder)]
    beside = [*feeds.values(), *(x.value for x in leaves)] if floats else []
    for node in floats:  # weak, as a float written in the graph: float32 beside float32
        value = [feeds[node], *beside]
        feeds[node] = backend.numbers(value, as_arrays=True, device=backend.DEFAULT["device"])[0]
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


def _check_feed(node: Node, data) -> Any:
    """The array fed for a node, in its declared dtype, checked against its shape."""
    if not isinstance(node.op, Placeholder):
        return data if backend.is_weak_scalar(data) else backend.asarray(data)
    dtype, declared = node.attrs.get("dtype"), node.attrs.get("shape")
    if type(data) is float and dtype is None and not declared:
        return data  # (weak: resolve_feeds gives it the dtype of the arrays beside it)
    ready = type(data) is np.ndarray and (dtype is None or data.dtype == dtype)
    if ready and (declared is None or data.shape == declared):
        return data  # (the common case: an array as declared, no None in the shape)
    value = data if ready else backend.asarray(data, dtype=dtype)
    if declared is not None and not (
        len(declared) == value.ndim
        and all(d is None or d == s for d, s in zip(declared, value.shape, strict=True))
    ):
        raise ShapeError(
            f"Placeholder '{node.name}' was declared with shape {declared} but was fed "
            f"an array of shape {tuple(value.shape)}. Feed a matching array, or declare "
            f"the placeholder with None for dimensions that vary."
        )
    return value
