"""``ad.gradients`` as users call it: the core's reverse pass, with what makes it fast
or small wrapped around it.

* ``checkpoint=`` keeps only some forward values and recomputes the others inside the
  gradient graph (checkpoint.py): the reverse pass reads them through its ``rule``;
* ``steps=`` records the steps of the pass, for drawings of it (``on_step``);
* gradients of a graph built from tensors are looked up in a cache of compiled gradient
  programs (gradient_cache.py), keyed by the graph's structure: a training loop that
  builds the same graph at every step builds its gradient graph only twice;
* ``retain_graph=False`` lets go of forward values once the pass has read them;
* shapes proven equal (static_shapes.py) need no ``sum_to_like``; where values showed
  them equal, the gradients rely on those shapes, and ``ad.Executor`` refuses a feed
  that would change them (``fixed_shapes``).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any
from weakref import WeakKeyDictionary

from ..core.errors import ShapeError
from ..core.gradients import (
    AdjointStep,
    Rule,
    check_nodes,
    check_output_grad,
    input_gradients,
    is_imperative,
    reverse_pass,
    valued,
)
from ..core.graph import OPERATORS, Node, TensorLeaf, deferred, find_topo_sort
from ..ops import ones_like
from ..ops.static_shapes import Signatures
from .checkpoint import Recomputation, choose_checkpoints
from .gradient_cache import cached_gradients, check_not_released, enabled, intermediates, released
from .slots import fill_values

# The gradients sent on without sum_to_like because, when they were built, the op's
# output and input had the same shape: known from values, in imperative graphs. Each
# maps to the (forward node, input index) whose shapes were taken as fixed; an Executor
# that feeds those values at new shapes must refuse (``check_fixed_shapes``).
_assumed_shapes: WeakKeyDictionary[Node, tuple[Node, int]] = WeakKeyDictionary()


def gradients(
    output: Node,
    wrt: Sequence[Node],
    output_grad=None,
    checkpoint: str | int | Sequence[Node] | None = None,
    steps: list[AdjointStep] | None = None,
    retain_graph: bool = True,
) -> list[Node]:
    """The gradient graph: one Node per entry of ``wrt``, holding d(output)/d(wrt[i]).

    The reverse pass is seeded with ``output_grad`` (default ``ones_like(output)``, so a
    non-scalar output gives the gradient of its sum). A node that ``output`` does not
    depend on gets zeros. If the forward graph has values (imperative style) the
    gradient nodes get values too; otherwise evaluate them with an ``Executor``.

    ``checkpoint`` keeps only some forward values for the backward pass and recomputes
    the others from them (system/checkpoint.py): ``"sqrt"`` keeps about sqrt(n) of a chain of n
    ops, an int k every k-th op, a list the nodes in it. The gradients are the same.

    ``steps``, a list, receives the steps of the reverse pass (``AdjointStep``: each
    node's contributions, their sum, what its rule sent on), for drawings of the pass.

    ``retain_graph=False`` (imperative graphs; as PyTorch's default): the values of
    intermediate nodes only the graph holds are let go as the pass reads them for the
    last time (less memory per step); the graph cannot be differentiated again.

    >>> import autodiff as ad
    >>> x = ad.tensor(3.0, name="x")
    >>> (dx,) = ad.gradients(x * x, [x])
    >>> float(dx.value)
    6.0
    >>> (ddx,) = ad.gradients(dx, [x])
    >>> float(ddx.value)
    2.0
    """
    wrt = check_nodes("gradients", output, wrt)
    output_grad = check_output_grad(output, output_grad)
    imperative = is_imperative(output, output_grad)
    build = partial(_build, output, wrt, output_grad, checkpoint, steps, imperative)
    if imperative:
        check_not_released(output)
    if imperative and output_grad is checkpoint is steps is None and enabled():
        return cached_gradients(output, wrt, build, _stand_in, retain_graph)  # seen: cached
    forward = find_topo_sort([output]) if imperative and not retain_graph else []
    return build(None, released(forward, intermediates(forward, output, wrt), output))


def _build(
    output: Node,
    wrt: list[Node],
    output_grad: Node | None,
    checkpoint: Any,
    steps: list[AdjointStep] | None,
    imperative: bool,
    order: Sequence[Node] | None = None,
    release: Sequence[Node] = (),
) -> list[Node]:
    """The core's gradients, with this layer's rule: ``order`` (the forward graph, in
    topological order) saves a sort; the nodes of ``release`` let go of their values."""
    with deferred() as built:
        seed = ones_like(output) if output_grad is None else output_grad
        recompute = None
        if checkpoint is not None:
            recompute = Recomputation(choose_checkpoints(output, checkpoint))
        topo_order = find_topo_sort([output]) if order is None else order
        # The cache's order ends with the nodes of wrt that the output does not need.
        if topo_order[-1] is not output:
            topo_order = topo_order[: topo_order.index(output) + 1]
        on_step = None if steps is None else steps.append
        rule = shape_aware_rule(imperative, recompute)
        grads = reverse_pass(topo_order, wrt, seed, rule, on_step)
    if imperative:
        fill_values(valued(grads, wrt), built, set(release).difference(grads))
    return grads


def shape_aware_rule(imperative: bool, recompute: Recomputation | None = None) -> Rule:
    """The reverse pass's rule: no ``sum_to_like`` where shapes are known to agree (from
    values in imperative graphs, else as shape rules prove: static_shapes.py); with
    checkpointing, the rule reads recomputed forward values (checkpoint.py)."""
    # (In a symbolic graph, a tensor may be fed another shape: its shape is not fixed.)
    signatures = Signatures(fed_leaves=not imperative)

    def shape_of(n: Node):
        return n.shape if imperative and n.value is not None else signatures.of(n).shape

    def rule(node: Node, adjoint: Node) -> list[Node | None]:
        rule_node = node if recompute is None else recompute.rule_node(node)
        grads = input_gradients(rule_node, adjoint, shape_of)
        if imperative and node.op.broadcasts:
            for i, grad in enumerate(grads):
                if grad is not None and not rule_node.op.unbroadcast_needed(rule_node, i, shape_of):
                    _assumed_shapes[grad] = (node, i)  # while the shapes stay so
        return grads if recompute is None else recompute.read_kept(node, rule_node, grads)

    return rule


def _stand_in(real: Node, cached: Node) -> Node:
    """A cached gradient, its graph now built, stands for ``real``: same shape reliance."""
    if real in _assumed_shapes:
        _assumed_shapes[cached] = _assumed_shapes[real]
    return real


def backward(output: Node) -> None:
    """``output.backward()``, as PyTorch users write it: sugar over ``gradients``.

    The gradients of ``output`` with respect to every tensor leaf it depends on
    (``ad.tensor``s, a model's parameters; not constants), from ``gradients`` (with its
    cache, as in training): each leaf's ``.grad`` receives its value (an array). As in
    PyTorch, a second call adds to ``.grad``; an optimiser's ``zero_grad()`` clears it.

    >>> import autodiff as ad
    >>> w = ad.tensor([1.0, 2.0])
    >>> ad.sum(w * w).backward()
    >>> w.grad
    array([2., 4.])
    """
    if output.value is None:
        raise ValueError(
            f"backward: '{output.name}' is symbolic (built from Variables). Take its "
            f"gradients with ad.gradients(output, wrt) and run them with an Executor."
        )
    if output.shape != ():
        raise ValueError(
            f"backward: '{output.name}' has shape {output.shape}; backward() needs one "
            f"number, such as a loss. Reduce it first (ad.sum(y).backward()), or seed "
            f"ad.gradients(y, wrt, output_grad=...)."
        )
    leaves = [node for node in find_topo_sort([output]) if isinstance(node.op, TensorLeaf)]
    for leaf, grad in zip(leaves, gradients(output, leaves), strict=True):
        leaf.grad = grad.value if leaf.grad is None else leaf.grad + grad.value


OPERATORS["backward"] = backward  # type: ignore[assignment]  # Node.backward calls it


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cycle collector while the block builds thousands of nodes: for a
    caller that builds graphs in a loop (``nn.train``'s define-by-run steps).

    Graphs are acyclic, so reference counting frees them without the collector. Its
    scans, triggered by every few hundred new objects, walk the whole heap: in a
    process that has imported PyTorch they doubled the time of a backward pass.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def fixed_shapes(topo_order: Sequence[Node]) -> dict[Node, tuple[Node, int]]:
    """The valued nodes whose shapes the gradients among ``topo_order`` rely on, each with
    a forward node and input index that relied on it (for errors): ``gradients`` skips
    sum_to_like where shapes known from values agreed, and a feed may replace those."""
    relied_on = [_assumed_shapes[n] for n in topo_order if n in _assumed_shapes]
    fixed: dict[Node, tuple[Node, int]] = {}
    seen: set[Node] = set()  # one walk for all: a node seen once had its inputs seen too
    for forward_node, index in relied_on:
        stack = [forward_node]
        while stack:
            node = stack.pop()
            if node not in seen:
                seen.add(node)
                if node.value is not None:
                    fixed[node] = (forward_node, index)
                stack.extend(node.inputs)
    return fixed


def check_fixed_shapes(feeds: Mapping[Node, Any], fixed: dict[Node, tuple[Node, int]]) -> None:
    """Raise a ShapeError if a feed gives a node of ``fixed`` (see ``fixed_shapes``) a
    shape other than the one its gradients were built for."""
    for node, value in feeds.items():
        if node not in fixed:
            continue
        built_shape, fed_shape = node.shape, tuple(getattr(value, "shape", ()))
        if fed_shape != built_shape:
            forward_node, index = fixed[node]
            raise ShapeError(
                f"Executor: '{node.name}' was fed shape {fed_shape}, but a gradient in this "
                f"graph was built for its shape then, {built_shape}: {forward_node.op.name}'s "
                f"input {index} and output had the same shape, {forward_node.shape}, so "
                f"gradients() did not sum that input's gradient back to its shape, which "
                f"new shapes can make wrong (silently). Build the graph from ad.Variable "
                f"placeholders (shape=None, or None for the dimensions that vary) and take "
                f"its gradients, or build it again from tensors of the new shape."
            )
