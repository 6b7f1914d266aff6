"""Function transforms: derivatives of Python functions, as in JAX.

``grad(f)`` is a new function that returns the gradient of ``f``. Underneath, each call
turns the arguments into ``tensor`` leaves, runs ``f`` (building its graph
imperatively), and calls ``gradients`` or ``jvp_graph`` on that graph. ``f`` is written
with autodiff ops (``ad.sin``, ``@``, ``.sum()``...) and returns a Node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..core.gradients import jvp_graph
from ..core.graph import Node, constant, tensor
from ..system.gradients import gradients


def _as_leaf(value) -> Node:
    return value if isinstance(value, Node) else tensor(value)


def _call(f: Callable, args: Sequence, argnums: Sequence[int]) -> tuple[Node, list[Node]]:
    args = list(args)
    for i in argnums:
        if i >= len(args):
            raise IndexError(f"argnums asks for argument {i}, but only {len(args)} were given.")
        args[i] = _as_leaf(args[i])
    out = f(*args)
    if not isinstance(out, Node):
        raise TypeError(
            f"{getattr(f, '__name__', 'f')} returned {type(out).__name__}; it must return "
            f"a Node, computed with autodiff ops (ad.sin, ad.exp, @, .sum(), ...)."
        )
    return out, [args[i] for i in argnums]


def value_and_grad(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """A function returning ``(f(*args), gradient)`` for a scalar-valued ``f``.

    With a tuple ``argnums`` the gradient is a tuple, one array per argument.

    >>> import autodiff as ad
    >>> value, gradient = ad.value_and_grad(lambda x: (x * x).sum())([1.0, 2.0])
    >>> float(value), gradient
    (5.0, array([2., 4.]))
    """
    several = not isinstance(argnums, int)
    positions = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    def value_and_grad_f(*args):
        out, leaves = _call(f, args, positions)
        if out.shape is not None and len(out.shape) > 0 and out.value.size != 1:
            raise ValueError(
                f"grad needs a function with a scalar output, but "
                f"{getattr(f, '__name__', 'f')} returned shape {out.shape}. "
                f"Reduce it (.sum(), .mean()) or use ad.vjp for vector outputs."
            )
        grads = [g.value for g in gradients(out, leaves)]
        return out.value, tuple(grads) if several else grads[0]

    return value_and_grad_f


def grad(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """The gradient of a scalar-valued ``f`` with respect to argument(s) ``argnums``.

    >>> import autodiff as ad
    >>> float(ad.grad(lambda x: ad.sin(x) * x)(0.0))
    0.0
    """
    value_and_grad_f = value_and_grad(f, argnums)

    def grad_f(*args):
        return value_and_grad_f(*args)[1]

    return grad_f


def vjp(f: Callable, *primals) -> tuple:
    """``(f(*primals), vjp_fn)``: ``vjp_fn(cotangent)`` returns one array per primal,
    the cotangent pulled back through f (reverse mode, one pass for all inputs).

    >>> import autodiff as ad
    >>> y, pullback = ad.vjp(lambda x: x * 2, [1.0, 2.0])
    >>> pullback([1.0, 10.0])
    (array([ 2., 20.]),)
    """
    out, leaves = _call(f, primals, range(len(primals)))

    def vjp_fn(cotangent):
        return tuple(g.value for g in gradients(out, leaves, output_grad=constant(cotangent)))

    return out.value, vjp_fn


def jvp(f: Callable, primals: Sequence, tangents: Sequence) -> tuple:
    """``(f(*primals), tangent_out)``: true forward mode through each op's tangent rule.

    >>> import autodiff as ad
    >>> value, tangent = ad.jvp(lambda x, y: x * y, (3.0, 4.0), (1.0, 0.0))
    >>> float(value), float(tangent)
    (12.0, 4.0)
    """
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents.")
    out, leaves = _call(f, primals, range(len(primals)))
    tangent_leaves = []
    for leaf, t in zip(leaves, tangents, strict=True):
        t = constant(t, dtype=leaf.dtype)
        if t.shape != leaf.shape:
            raise ValueError(
                f"jvp: a tangent of shape {t.shape} was given for a primal of shape "
                f"{leaf.shape}; each tangent must have its primal's shape."
            )
        tangent_leaves.append(t)
    return out.value, jvp_graph(out, leaves, tangent_leaves).value
