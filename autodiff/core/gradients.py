"""Reverse mode, graph to graph: the AutoDiff algorithm of the lecture.

``gradients(output, wrt)`` walks the forward graph in reverse topological order. Each
node's *adjoint* (d output / d node) is the sum of the contributions from the nodes that
use it (fan-out); each op's ``gradient`` rule turns a node's adjoint into contributions
for its inputs. The rules are written with ops, so the result is a new graph: it can be
drawn, evaluated, and differentiated again (second derivatives for free).

``jvp_graph`` is the other direction, forward mode: tangents flow with the topological
order, through each op's ``jvp`` rule.

This is the algorithm alone. ``ad.gradients``, as users call it, adds checkpointing, a
cache of gradient programs and letting go of forward values (system/gradients.py); it
calls ``reverse_pass`` as it is here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..ops import ones_like, sum_to_like, zeros_like
from . import backend
from .errors import DTypeError
from .graph import Constant, Node, as_node, deferred, find_topo_sort
from .schedule import fill_values

Rule = Callable[[Node, Node], Sequence["Node | None"]]  # (node, its adjoint) -> per input


@dataclass
class AdjointStep:
    """One step of the reverse pass: ``node``'s adjoint is the sum of ``contributions``;
    its gradient rule then ``sent`` one contribution to each input that needs one."""

    node: Node
    contributions: list[Node]
    adjoint: Node
    sent: list[Node]


def input_gradients(node: Node, adjoint: Node, shape_of=None) -> list[Node | None]:
    """The op's gradient rule: one gradient (or None) per input of ``node``, each summed
    back to its input's shape where the op broadcasts (unless the shapes are known to
    agree: ``shape_of(n)``, what is known of a node's shape, by default ``n.shape``)."""
    grads = list(node.op.gradient(node, adjoint))
    if len(grads) != len(node.inputs):
        raise TypeError(
            f"{type(node.op).__name__}.gradient returned {len(grads)} gradients for "
            f"{len(node.inputs)} inputs: return one Node (or None) per input, in order."
        )
    for i, x in enumerate(node.inputs):
        if i in node.op.shape_inputs:  # it lends its shape only: no gradient
            grads[i] = None
        elif grads[i] is not None and node.op.broadcasts:
            if node.op.unbroadcast_needed(node, i, shape_of):
                grads[i] = sum_to_like(grads[i], x)
    return grads


def reverse_pass(
    topo_order: Sequence[Node],
    wrt: Sequence[Node],
    output_grad: Node,
    rule: Rule = input_gradients,
    on_step: Callable[[AdjointStep], Any] | None = None,
) -> list[Node]:
    """The adjoints of ``wrt``, from the output (``topo_order[-1]``) back: its graph in
    a topological order. ``rule(node, adjoint)`` gives the contributions for a node's
    inputs (checkpointing reads recomputed values there); ``on_step``, if given, sees
    each step of the pass (drawings of it)."""
    on_path = depends_on(topo_order, wrt)
    contributions: dict[Node, list[Node]] = {topo_order[-1]: [output_grad]}
    adjoint: dict[Node, Node] = {}
    for node in reversed(topo_order):
        parts = contributions.pop(node, None)
        if node not in on_path or not parts:
            continue
        adjoint[node] = sum_all(parts)
        sent: list[Node] = []
        if not node.op.is_leaf:
            for x, grad in zip(node.inputs, rule(node, adjoint[node]), strict=True):
                if grad is not None and x in on_path:
                    contributions.setdefault(x, []).append(grad)
                    sent.append(grad)
        if on_step is not None:
            on_step(AdjointStep(node, parts, adjoint[node], sent))
    for x in wrt:  # an input of the walk, not in it (a fused group's): adjoint still due
        if x not in adjoint and x in contributions:
            adjoint[x] = sum_all(contributions[x])
    return [adjoint[x] if x in adjoint else zeros_like(x) for x in wrt]


def depends_on(topo_order: Sequence[Node], wrt: Sequence[Node]) -> set[Node]:
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


def sum_all(parts: list[Node]) -> Node:
    """The adjoint: the sum of the contributions (fan-out), in the order they came."""
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


def gradients(output: Node, wrt: Sequence[Node], output_grad=None) -> list[Node]:
    """The gradient graph: one Node per entry of ``wrt``, holding d(output)/d(wrt[i]).

    The reverse pass is seeded with ``output_grad`` (default ``ones_like(output)``, so a
    non-scalar output gives the gradient of its sum). A node that ``output`` does not
    depend on gets zeros. If the forward graph has values (imperative style) the
    gradient nodes get values too; otherwise evaluate them with an ``Executor``.

    >>> import autodiff as ad
    >>> x = ad.tensor(3.0, name="x")
    >>> (dx,) = gradients(x * x, [x])
    >>> float(dx.value)
    6.0
    >>> (ddx,) = gradients(dx, [x])
    >>> float(ddx.value)
    2.0
    """
    wrt = check_nodes("gradients", output, wrt)
    output_grad = check_output_grad(output, output_grad)
    # The whole gradient graph first, then only what the results need is computed: a
    # rule may build gradients for inputs nobody asked about (d input, first layer).
    with deferred():
        seed = ones_like(output) if output_grad is None else output_grad
        grads = reverse_pass(find_topo_sort([output]), wrt, seed)
    if is_imperative(output, output_grad):
        fill_values(valued(grads, wrt))
    return grads


def check_nodes(function: str, output: Any, wrt: Any) -> list[Node]:
    """``wrt`` as a list, once ``output`` and ``wrt`` are seen to be differentiable Nodes."""
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
        if not backend.is_floating(x.dtype):  # (None: a symbolic node of no known dtype)
            raise DTypeError(
                f"{function}: cannot differentiate with respect to '{x.name}' of dtype "
                f"{x.dtype}: only floating-point values have derivatives."
            )
    return wrt


def check_output_grad(output: Node, output_grad: Any) -> Node | None:
    """``output_grad`` as a Node (None stays None: the seed is ones), of the output's shape."""
    if output_grad is None:
        return None
    output_grad = as_node(output_grad)
    if None not in (output.shape, output_grad.shape) and output.shape != output_grad.shape:
        raise ValueError(
            f"gradients: output_grad has shape {output_grad.shape} but the output has "
            f"shape {output.shape}; they must match."
        )
    return output_grad


def is_imperative(output: Node, output_grad: Node | None) -> bool:
    """Whether the gradients get values now: the output (and the seed given) has one."""
    return output.value is not None and (output_grad is None or output_grad.value is not None)


def valued(grads: Sequence[Node], wrt: Sequence[Node]) -> list[Node]:
    """The gradients to compute now: of the ``wrt`` holding values (a placeholder the
    output does not need keeps a symbolic ``zeros_like``)."""
    return [g for g, x in zip(grads, wrt, strict=True) if x.value is not None]


def forward_pass(topo_order: Sequence[Node], tangent: dict[Node, Node]) -> Node:
    """The tangent of the output (``topo_order[-1]``), given the tangents of some nodes
    (``tangent``, which collects the others): forward mode, each op's ``jvp`` rule."""
    for node in topo_order:
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
    output = topo_order[-1]
    return tangent[output] if output in tangent else zeros_like(output)


def jvp_graph(output: Node, wrt: Sequence[Node], tangents: Sequence) -> Node:
    """Forward mode on a graph: the tangent of ``output`` when each ``wrt[i]`` moves
    along ``tangents[i]`` (a Jacobian-vector product), built from each op's ``jvp`` rule.

    >>> import autodiff as ad
    >>> x = ad.tensor(3.0)
    >>> float(ad.jvp_graph(x * x, [x], [1.0]).value)
    6.0
    """
    wrt = check_nodes("jvp_graph", output, wrt)
    if len(tangents) != len(wrt):
        raise ValueError(f"jvp_graph: {len(wrt)} inputs but {len(tangents)} tangents.")
    tangent = {x: as_node(t) for x, t in zip(wrt, tangents, strict=True)}
    imperative = output.value is not None and all(t.value is not None for t in tangent.values())
    result = forward_pass(find_topo_sort([output]), tangent)
    if imperative and result.value is None:
        # Tangent rules may read nodes of a gradient graph whose values were not kept.
        fill_values([result])
    return result
