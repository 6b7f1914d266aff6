"""Reductions: many numbers in, fewer out.

A reduction's gradient spreads the adjoint back over every element that was reduced
(``broadcast_like``). ``axis`` and ``keepdims`` mean what they mean in NumPy.
Softmax and log-softmax normalise along ``axis`` (default: the last) and keep the shape.
Over an empty axis, as in NumPy-style libraries, softmax and log-softmax give an empty
array and logsumexp gives -inf (the log of an empty sum).
"""

from __future__ import annotations

from ..backend import namespace
from ..graph import Node, Op, Spec
from ..static_shapes import UNKNOWN, has_rank
from .elementwise import exp
from .shape import broadcast_like, normalize_axes


def _axis(axis):
    return tuple(axis) if isinstance(axis, (list, tuple)) else axis


def _spread_axis(attrs: dict):
    """The axis a reduction removed, or None if its output still broadcasts (keepdims)."""
    return None if attrs["keepdims"] else attrs["axis"]


def reduced_shape(shape, axis, keepdims: bool):
    """The shape left after reducing ``shape`` over ``axis`` (all axes when None).

    Lengths may be symbols (static_shapes.py); of a shape of unknown rank, only a full
    reduction is known.

    >>> reduced_shape((2, 3, 4), 1, keepdims=False), reduced_shape((2, 3), None, True)
    ((2, 4), (1, 1))
    """
    if not has_rank(shape):
        return () if axis is None and not keepdims else UNKNOWN
    axes = range(len(shape)) if axis is None else normalize_axes(axis, len(shape))
    if keepdims:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def logsumexp_values(x, axis, keepdims: bool):
    """log(sum(exp(x))) without overflow: the max is taken out before exponentiating."""
    xp = namespace(x)
    if x.size == 0:  # an empty sum is 0 and log(0) = -inf (max() of nothing is an error)
        out = xp.full(reduced_shape(x.shape, axis, keepdims=True), -xp.inf, dtype=x.dtype)
        return out if keepdims else out.reshape(reduced_shape(x.shape, axis, keepdims=False))
    shift = x.max(axis=axis, keepdims=True)
    shift = xp.where(xp.isfinite(shift), shift, 0)  # an all -inf slice stays -inf, not nan
    out = xp.log(xp.exp(x - shift).sum(axis=axis, keepdims=True)) + shift
    if keepdims:
        return out
    return out.reshape(()) if axis is None else xp.squeeze(out, axis=axis)


class Sum(Op):
    """Y = sum(X, axis);   dX = dY broadcast back over the summed axes;   Y' = sum(X', axis)."""

    def compute(self, x, axis, keepdims):
        return x.sum(axis=axis, keepdims=keepdims)

    def compute_into(self, out, x, axis, keepdims):
        return x.sum(axis=axis, keepdims=keepdims, out=out)

    def infer(self, x, axis, keepdims):
        return Spec(reduced_shape(x.shape, axis, keepdims), x.dtype)

    def gradient(self, node, output_grad):
        return [broadcast_like(output_grad, node.inputs[0], _spread_axis(node.attrs))]

    def jvp(self, node, x_dot):
        return sum(x_dot, **node.attrs)


def sum(x, axis=None, keepdims: bool = False) -> Node:
    """Sum over ``axis`` (all axes when None), as numpy.sum."""
    return Sum.apply(x, axis=_axis(axis), keepdims=keepdims)


class Count(Op):
    """Y = the number of elements that a reduction over ``axis`` combines (in X's dtype)."""

    shape_inputs = (0,)

    def compute(self, x, axis):
        if axis is None:
            n = x.size
        else:
            n = 1
            for a in (axis,) if isinstance(axis, int) else axis:
                n *= x.shape[a]
        return namespace(x).asarray(n, dtype=x.dtype)

    def infer(self, x, axis):
        return Spec((), x.dtype)

    def gradient(self, node, output_grad):
        return [None]

    def jvp(self, node, x_dot):
        return None


def count(x, axis=None) -> Node:
    """How many elements a reduction of x over ``axis`` combines, in x's dtype."""
    return Count.apply(x, axis=_axis(axis))


class LogSumExp(Op):
    """Y = log(sum(exp(X), axis));   dX = dY * exp(X - Y)  (= dY * softmax(X));
    Y' = sum(exp(X - Y) * X', axis)."""

    def compute(self, x, axis, keepdims):
        return logsumexp_values(x, axis, keepdims)

    def infer(self, x, axis, keepdims):
        return Spec(reduced_shape(x.shape, axis, keepdims), x.dtype)

    def gradient(self, node, output_grad):
        x = node.inputs[0]
        spread = _spread_axis(node.attrs)
        weights = exp(x - broadcast_like(node, x, spread))
        return [broadcast_like(output_grad, x, spread) * weights]

    def jvp(self, node, x_dot):
        x = node.inputs[0]
        weights = exp(x - broadcast_like(node, x, _spread_axis(node.attrs)))
        return sum(weights * x_dot, **node.attrs)


def logsumexp(x, axis=None, keepdims: bool = False) -> Node:
    """log(sum(exp(x))) over ``axis``, computed stably."""
    return LogSumExp.apply(x, axis=_axis(axis), keepdims=keepdims)


class Softmax(Op):
    """Y = exp(X) / sum(exp(X), axis);   dX = Y * (dY - sum(dY * Y, axis));
    Y' = Y * (X' - sum(X' * Y, axis))."""

    def compute(self, x, axis):
        xp = namespace(x)
        if x.size == 0:  # nothing to normalise (and max() of nothing is an error)
            return xp.zeros_like(x)
        e = xp.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    def infer(self, x, axis):
        return Spec(x.shape, x.dtype)

    def gradient(self, node, output_grad):
        axis = node.attrs["axis"]
        return [node * (output_grad - sum(output_grad * node, axis, keepdims=True))]

    def jvp(self, node, x_dot):
        axis = node.attrs["axis"]
        return node * (x_dot - sum(x_dot * node, axis, keepdims=True))


def softmax(x, axis=-1) -> Node:
    """exp(x) normalised to sum to 1 along ``axis`` (default: the last axis)."""
    return Softmax.apply(x, axis=_axis(axis))


class LogSoftmax(Op):
    """Y = X - logsumexp(X, axis);   dX = dY - exp(Y) * sum(dY, axis);
    Y' = X' - sum(exp(Y) * X', axis)."""

    name = "log_softmax"

    def compute(self, x, axis):
        return x - logsumexp_values(x, axis, keepdims=True)

    def infer(self, x, axis):
        return Spec(x.shape, x.dtype)

    def gradient(self, node, output_grad):
        axis = node.attrs["axis"]
        return [output_grad - exp(node) * sum(output_grad, axis, keepdims=True)]

    def jvp(self, node, x_dot):
        axis = node.attrs["axis"]
        return x_dot - sum(exp(node) * x_dot, axis, keepdims=True)


def log_softmax(x, axis=-1) -> Node:
    """log(softmax(x)) along ``axis``, computed stably."""
    return LogSoftmax.apply(x, axis=_axis(axis))


def mean(x, axis=None, keepdims: bool = False) -> Node:
    """Mean over ``axis``: the sum divided by the count (so it needs no rule of its own)."""
    return sum(x, axis, keepdims) / count(x, axis)
