"""Reverse mode, graph to graph: the AutoDiff algorithm of the lecture.

``gradients(output, wrt)`` walks the forward graph in reverse topological order. Each
node's *adjoint* (d output / d node) is the sum of the contributions from the nodes that
use it (fan-out); each op's ``gradient`` rule turns a node's adjoint into contributions
for its inputs. The rules are written with ops, so the result is a new graph: it can be
drawn, evaluated, and differentiated again (second derivatives for free).

``jvp_graph`` is the other direction, forward mode: tangents flow with the topological
order, through each op's ``jvp`` rule.

``gradients(..., checkpoint=...)`` trades compute for memory: the rules read recomputed
copies of most forward values instead of the values themselves (see checkpoint.py).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from ..ops import ones_like, sum_to_like, zeros_like
from ..system.checkpoint import Recomputation, choose_checkpoints
from ..system.gradient_cache import (
    cached_gradients,
    check_not_released,
    enabled,
    intermediates,
    released,
)
from ..system.static_shapes import Signatures
from . import backend
from .graph import (
    OPERATORS,
    Constant,
    DTypeError,
    Node,
    ShapeError,
    TensorLeaf,
    as_node,
    deferred,
    find_topo_sort,
)
from .schedule import fill_values


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


# The gradient contributions sent on without sum_to_like because, when they were built,
# the op's output and input had the same shape: known from values, in imperative graphs.
# Each maps to the (forward node, input index) whose shapes were taken as fixed; an
# Executor that feeds those values at new shapes must refuse (``check_fixed_shapes``).
_assumed_shapes: WeakKeyDictionary[Node, tuple[Node, int]] = WeakKeyDictionary()


@dataclass
class AdjointStep:
    """One step of the reverse pass: ``node``'s adjoint is the sum of ``contributions``;
    its gradient rule then ``sent`` one contribution to each input that needs one."""

    node: Node
    contributions: list[Node]
    adjoint: Node
    sent: list[Node]


def _check_nodes(function: str, output, wrt) -> list[Node]:
    if not isinstance(output, Node):
        raise TypeError(
            f"{function}: the output must be a Node built with autodiff ops, got "
            f"{type(output).__name__}. Build it from ad.tensor / ad.Variable leaves."
        )
    if isinstance(wrt, Node):
        raise TypeError(f"{function}: wrt must be a list of Nodes; write {function}(y, [x]).")
    wrt = list(wrt)
    for x in wrt:
        if not isinstance(x, Node):
            raise TypeError(f"{function}: wrt must hold Nodes, got {type(x).__name__}: {x!r}.")
        if x.dtype is not None and not backend.is_floating(x.dtype):
            raise DTypeError(
                f"{function}: cannot differentiate with respect to '{x.name}' of dtype "
                f"{x.dtype}: only floating-point values have derivatives."
            )
    return wrt


def _depends_on(topo_order: Sequence[Node], wrt: Sequence[Node]) -> set[Node]:
    """The nodes whose value changes when some node in ``wrt`` changes."""
    depends = {x for x in wrt if not isinstance(x.op, Constant)}
    for node in topo_order:
        if node in depends:
            continue
        for x in node.inputs:
            if x in depends:
                depends.add(node)
                break
    return depends


def _sum_contributions(parts: list[Node]) -> Node:
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


def _input_gradients(node: Node, output_grad: Node) -> list[Node | None]:
    """The op's gradient rule, checked to give one Node (or None) per input."""
    input_grads = node.op.gradient(node, output_grad)
    if len(input_grads) != len(node.inputs):
        raise TypeError(
            f"{type(node.op).__name__}.gradient returned {len(input_grads)} gradients for "
            f"{len(node.inputs)} inputs: return one Node (or None) per input, in order."
        )
    return input_grads


def reverse_pass(
    output: Node,
    wrt: list[Node],
    output_grad: Node,
    recompute: Recomputation | None = None,
    order: Sequence[Node] | None = None,
    steps: list[AdjointStep] | None = None,
) -> list[Node]:
    """The adjoints of ``wrt``. ``order``: the nodes to walk, in topological order
    (default: all that ``output`` depends on); a fused node walks only its group.
    ``steps``, if given, gets an ``AdjointStep`` per node, in the order of the pass."""
    topo_order = find_topo_sort([output]) if order is None else order
    on_path = _depends_on(topo_order, wrt)
    # Shapes: of values in imperative graphs, else (and for nodes built but not computed,
    # as a gradient's, differentiated again) as proven by shape rules: no sum_to_like
    # where they agree. (In a symbolic graph, a tensor may be fed another shape.)
    imperative = output.value is not None
    signatures = Signatures(fed_leaves=not imperative)

    def known_shape(n: Node):
        return n.shape if imperative and n.value is not None else signatures.of(n).shape

    contributions: dict[Node, list[Node]] = {output: [output_grad]}
    adjoint: dict[Node, Node] = {}
    for node in reversed(topo_order):
        parts = contributions.pop(node, None)
        if node not in on_path or not parts:
            continue
        adjoint[node] = _sum_contributions(parts)
        sent: list[Node] = []
        if steps is not None:
            steps.append(AdjointStep(node, parts, adjoint[node], sent))
        if node.op.is_leaf:
            continue
        # With checkpointing, the rule reads recomputed values, not the forward ones.
        rule_node = node if recompute is None else recompute.rule_node(node)
        input_grads = _input_gradients(rule_node, adjoint[node])
        if recompute is not None:
            input_grads = recompute.read_kept(node, rule_node, input_grads)
        for index, (x, grad) in enumerate(zip(node.inputs, input_grads, strict=True)):
            if grad is None or x not in on_path or index in node.op.shape_inputs:
                continue
            if node.op.broadcasts:
                if node.op.unbroadcast_needed(node, index, known_shape):
                    grad = sum_to_like(grad, rule_node.inputs[index])
                elif imperative:  # shapes known from values to agree: no sum,
                    _assumed_shapes[grad] = (node, index)  # while they stay so
            contributions.setdefault(x, []).append(grad)
            sent.append(grad)
    for x in wrt:  # not walked (outside ``order``): its contributions are its adjoint
        if x not in adjoint and contributions.get(x):
            adjoint[x] = _sum_contributions(contributions[x])
    return [adjoint[x] if x in adjoint else zeros_like(x) for x in wrt]


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
    the others from them (checkpoint.py): ``"sqrt"`` keeps about sqrt(n) of a chain of n
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
    wrt = _check_nodes("gradients", output, wrt)
    if output_grad is not None:
        output_grad = as_node(output_grad)
        if None not in (output.shape, output_grad.shape) and output.shape != output_grad.shape:
            raise ValueError(
                f"gradients: output_grad has shape {output_grad.shape} but the output has "
                f"shape {output.shape}; they must match."
            )
    imperative = output.value is not None and (output_grad is None or output_grad.value is not None)

    def build(order=None, release=()):  # (no annotations: a copy compiles the same)
        # The whole gradient graph first, then only what the results need is computed:
        # a rule may build gradients for inputs nobody asked about (d input, first layer).
        with deferred() as built:
            seed = ones_like(output) if output_grad is None else output_grad
            recompute = None
            if checkpoint is not None:
                recompute = Recomputation(choose_checkpoints(output, checkpoint))
            grads = reverse_pass(output, wrt, seed, recompute, order, steps)
        if imperative:  # a placeholder the output does not need keeps a symbolic zeros_like
            valued = [g for g, x in zip(grads, wrt, strict=True) if x.value is not None]
            fill_values(valued, built, set(release).difference(grads))
        return grads

    if imperative:
        check_not_released(output)
    if imperative and output_grad is checkpoint is steps is None and enabled():
        return cached_gradients(output, wrt, build, _stand_in, retain_graph)  # seen: cached
    forward = find_topo_sort([output]) if imperative and not retain_graph else []
    return build(None, released(forward, intermediates(forward, output, wrt), output))


def _stand_in(real: Node, cached: Node) -> Node:
    """A cached gradient, its graph now built, stands for ``real``: same shape reliance."""
    if real in _assumed_shapes:
        _assumed_shapes[cached] = _assumed_shapes[real]
    return real


def backward(output: Node) -> None:
    """``output.backward()``, as PyTorch users write it: sugar over ``gradients``.

    The gradient graph of ``output`` with respect to every tensor leaf it depends on
    (``ad.tensor``s, a model's parameters; not constants) is built and computed as
    ``gradients`` does, and each leaf's ``.grad`` receives its value (an array). As in
    PyTorch, a second call adds to ``.grad``; an optimiser's ``zero_grad()`` clears it.
    The gradient nodes themselves are not kept: ``gradients`` returns them, to be drawn
    or differentiated again.

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


def forward_pass(
    output: Node, tangent: dict[Node, Node], order: Sequence[Node] | None = None
) -> Node:
    """The tangent of ``output``, given the tangents of some nodes (``tangent``, which
    collects the others). ``order``: as for ``reverse_pass``."""
    for node in find_topo_sort([output]) if order is None else order:
        if node in tangent or node.op.is_leaf:
            continue
        input_tangents: list[Any] = [tangent.get(x) for x in node.inputs]
        if all(t is None for t in input_tangents):
            continue  # nothing here depends on wrt
        for i, x in enumerate(node.inputs):
            if input_tangents[i] is None and i not in node.op.any_dtype_inputs:
                input_tangents[i] = zeros_like(x)
        result = node.op.jvp(node, *input_tangents)
        if result is not None:
            tangent[node] = result
    return tangent[output] if output in tangent else zeros_like(output)


def jvp_graph(output: Node, wrt: Sequence[Node], tangents: Sequence) -> Node:
    """Forward mode on a graph: the tangent of ``output`` when each ``wrt[i]`` moves
    along ``tangents[i]`` (a Jacobian-vector product), built from each op's ``jvp`` rule.

    >>> import autodiff as ad
    >>> x = ad.tensor(3.0)
    >>> float(ad.jvp_graph(x * x, [x], [1.0]).value)
    6.0
    """
    wrt = _check_nodes("jvp_graph", output, wrt)
    if len(tangents) != len(wrt):
        raise ValueError(f"jvp_graph: {len(wrt)} inputs but {len(tangents)} tangents.")
    tangent = {x: as_node(t) for x, t in zip(wrt, tangents, strict=True)}
    imperative = output.value is not None and all(t.value is not None for t in tangent.values())
    result = forward_pass(output, tangent)
    if imperative and result.value is None:
        # Tangent rules may read nodes of a gradient graph whose values were not kept.
        fill_values([result])
    return result
