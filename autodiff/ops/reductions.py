"""Reductions: many numbers in, fewer out.

A reduction's gradient spreads the adjoint back over every element that was reduced
(``broadcast_like``). ``axis`` and ``keepdims`` mean what they mean in NumPy.
Softmax and log-softmax normalise along ``axis`` (default: the last) and keep the shape.
Over an empty axis, as in NumPy-style libraries, softmax and log-softmax give an empty
array and logsumexp gives -inf (the log of an empty sum).
"""

from __future__ import annotations

import functools
import math
from types import MappingProxyType

import numpy as np

from ..core.backend import device_of, index_dtype, namespace
from ..core.errors import DTypeError
from ..core.graph import Node, Op, Spec, named
from .elementwise import exp, sqrt
from .piecewise import equal, where
from .shape import broadcast_like, normalize_axes, ones_like, zeros_like
from .static_shapes import UNKNOWN, has_rank


def _axis(axis):
    return tuple(axis) if isinstance(axis, (list, tuple)) else axis


def _spread_axis(attrs: dict):
    """The axis a reduction removed, or None if its output still broadcasts (keepdims)."""
    return None if attrs["keepdims"] else attrs["axis"]


def reduced_shape(shape, axis, keepdims: bool):
    """The shape left after reducing ``shape`` over ``axis`` (all axes when None).

    Lengths may be symbols (ops/static_shapes.py); of a shape of unknown rank, only a full
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

    def infer(self, x, axis, keepdims):
        return Spec(reduced_shape(x.shape, axis, keepdims), x.dtype)

    def gradient(self, node, output_grad):
        return [broadcast_like(output_grad, node.inputs[0], _spread_axis(node.attrs))]

    def jvp(self, node, x_dot):
        return sum(x_dot, **node.attrs)


def sum(x, axis=None, keepdims: bool = False, *, name: str | None = None) -> Node:
    """Sum over ``axis`` (all axes when None), as numpy.sum."""
    return Sum.apply(x, axis=_axis(axis), keepdims=keepdims, name=name)


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


def count(x, axis=None, *, name: str | None = None) -> Node:
    """How many elements a reduction of x over ``axis`` combines, in x's dtype."""
    return Count.apply(x, axis=_axis(axis), name=name)


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


def logsumexp(x, axis=None, keepdims: bool = False, *, name: str | None = None) -> Node:
    """log(sum(exp(x))) over ``axis``, computed stably."""
    return LogSumExp.apply(x, axis=_axis(axis), keepdims=keepdims, name=name)


# Per float dtype: how far below the max a value may lie for its exp to keep every bit
# (the exp stays above the square root of the smallest normal number). Read-only.
_SPREAD = MappingProxyType({t: -0.5 * np.log(np.finfo(t).tiny) for t in "efdg"})


def row_sums(x, keepdims: bool = False):
    """Each row's sum of a 2-D array (as a column, with ``keepdims``). On the CPU a
    product with ones: NumPy sums a short last axis slowly (85 us for 4096 rows of 10
    here; 11 us this way). On the GPU one reduction kernel, which a CUDA graph can
    record (cuBLAS it cannot)."""
    if device_of(x) == "cpu":
        return x @ _ones((x.shape[1], 1) if keepdims else x.shape[1], x.dtype)
    return x.sum(axis=1, keepdims=keepdims)


@functools.lru_cache(maxsize=64)
def _ones(shape: int | tuple[int, int], dtype) -> np.ndarray:
    ones = np.ones(shape, dtype)
    ones.flags.writeable = False  # shared by every call
    return ones


def softmax_rows(z):
    """The softmax of each row of ``z`` (rows, classes; not empty): one new array,
    exponentiated and normalised in place.

    exp(z - shift) / sum(exp(z - shift)) is the softmax for any shift; a good one keeps
    the exps from overflowing or losing bits. NumPy takes the max of a short last axis
    slowly (120 us for 4096 rows of 10 here, against 7 us for the max and min of the
    whole array), so on the CPU: no shift at all while every |z| is so small that each
    exp and each row's sum keeps its bits (the textbook exp(z) / sum(exp(z))); else one
    shift, the batch's max, while no value lies so far below it that its exp would lose
    bits; else each row's own max (0 for a row with none finite), as on the GPU, where
    that is one kernel.
    """
    xp, spread = namespace(z), _SPREAD.get(z.dtype.char, -1)
    on_cpu = device_of(z) == "cpu"
    top, bottom = (float(z.max()), float(z.min())) if on_cpu else (math.inf, -math.inf)
    small = spread - math.log(z.shape[1])  # (comparisons: False for an inf or a nan)
    if -small <= bottom and top <= small:
        e = xp.exp(z)
    else:
        if top - bottom <= spread:
            shift = top
        else:
            each = z.max(axis=1, keepdims=True)
            shift = xp.where(xp.isfinite(each), each, 0)
        e = z - shift
        xp.exp(e, out=e)
    sums = row_sums(e, keepdims=True)
    e *= xp.reciprocal(sums, out=sums)  # (a product: NumPy divides by a column more slowly)
    return e


class Softmax(Op):
    """Y = exp(X) / sum(exp(X), axis);   dX = Y * (dY - sum(dY * Y, axis));
    Y' = Y * (X' - sum(X' * Y, axis))."""

    def compute(self, x, axis):
        if x.size == 0:  # nothing to normalise (and max() of nothing is an error)
            return namespace(x).zeros_like(x)
        if x.ndim == 2 and axis in (-1, 1):  # rows of classes, the common case: made quick
            return softmax_rows(x)
        if x.ndim and axis in (-1, x.ndim - 1):  # (as rows)
            return softmax_rows(x.reshape(-1, x.shape[-1])).reshape(x.shape)
        e = namespace(x).exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    def infer(self, x, axis):
        return Spec(x.shape, x.dtype)

    def gradient(self, node, output_grad):
        axis = node.attrs["axis"]
        return [node * (output_grad - sum(output_grad * node, axis, keepdims=True))]

    def jvp(self, node, x_dot):
        axis = node.attrs["axis"]
        return node * (x_dot - sum(x_dot * node, axis, keepdims=True))


def softmax(x, axis=-1, *, name: str | None = None) -> Node:
    """exp(x) normalised to sum to 1 along ``axis`` (default: the last axis)."""
    return Softmax.apply(x, axis=_axis(axis), name=name)


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


def log_softmax(x, axis=-1, *, name: str | None = None) -> Node:
    """log(softmax(x)) along ``axis``, computed stably."""
    return LogSoftmax.apply(x, axis=_axis(axis), name=name)


def mean(x, axis=None, keepdims: bool = False, *, name: str | None = None) -> Node:
    """Mean over ``axis``: the sum divided by the count (so it needs no rule of its own)."""
    return named(sum(x, axis, keepdims) / count(x, axis), name)


# Max, min, prod, var, std, argmax, argmin -----------------------------------------------


class TieWeights(Op):
    """W = (X == M) / (how many elements of X's slice equal M), where M is the max (or min)
    of X over ``axis``: each extremum's share of the gradient; ties split it equally.

    Piecewise constant, so it has no gradient:  dX = 0, dM = 0;  W' = 0. It is what
    makes max's rule a graph of ops (the comparison is a constant of the rule).
    """

    name = "tie_weights"

    def compute(self, x, extremum, axis, keepdims):
        xp = namespace(x)
        if axis is not None and not keepdims:
            extremum = xp.expand_dims(extremum, axis)  # line it up with x again
        hits = (x == extremum).astype(x.dtype)
        return hits / hits.sum(axis=axis, keepdims=True)

    def infer(self, x, extremum, axis, keepdims):
        return Spec(x.shape, x.dtype)

    def gradient(self, node, output_grad):
        return [None, None]

    def jvp(self, node, x_dot, extremum_dot):
        return None


def tie_weights(x, extremum, axis=None, keepdims: bool = False, *, name: str | None = None) -> Node:
    """Where x reaches ``extremum`` (its max or min over ``axis``), 1/#ties; elsewhere 0."""
    return TieWeights.apply(x, extremum, axis=_axis(axis), keepdims=keepdims, name=name)


class Max(Op):
    """Y = max(X, axis);   dX = dY * W (broadcast back),  W = tie_weights(X, Y): the
    gradient goes to the maximum, split equally among tied maxima (as JAX and
    TensorFlow do; PyTorch's amax does the same), so d sum(max) stays exact;
    Y' = sum(W * X', axis)."""

    def compute(self, x, axis, keepdims):
        return x.max(axis=axis, keepdims=keepdims)

    def infer(self, x, axis, keepdims):
        return Spec(reduced_shape(x.shape, axis, keepdims), x.dtype)

    def gradient(self, node, output_grad):
        x = node.inputs[0]
        weights = tie_weights(x, node, **node.attrs)
        return [broadcast_like(output_grad, x, _spread_axis(node.attrs)) * weights]

    def jvp(self, node, x_dot):
        weights = tie_weights(node.inputs[0], node, **node.attrs)
        return sum(weights * x_dot, **node.attrs)


def max(x, axis=None, keepdims: bool = False, *, name: str | None = None) -> Node:
    """The largest element over ``axis`` (all axes when None), as numpy.max.

    Gradient: to the maximum; tied maxima share it equally.

    >>> import autodiff as ad
    >>> x = ad.tensor([1.0, 3.0, 3.0])
    >>> ad.gradients(ad.max(x), [x])[0].value
    array([0. , 0.5, 0.5])
    """
    return Max.apply(x, axis=_axis(axis), keepdims=keepdims, name=name)


class Min(Max):
    """Y = min(X, axis);   dX = dY * W (broadcast back),  W = tie_weights(X, Y): tied
    minima share the gradient equally;   Y' = sum(W * X', axis)."""

    def compute(self, x, axis, keepdims):
        return x.min(axis=axis, keepdims=keepdims)


def min(x, axis=None, keepdims: bool = False, *, name: str | None = None) -> Node:
    """The smallest element over ``axis`` (all axes when None), as numpy.min.

    Gradient: to the minimum; tied minima share it equally.
    """
    return Min.apply(x, axis=_axis(axis), keepdims=keepdims, name=name)


class Prod(Op):
    """Y = prod(X, axis);   dX = dY * (the product of the other elements);
    Y' = sum(others * X', axis).

    The product of the others is Y / X where X != 0. At a zero it is the product of the
    slice's nonzero elements if that zero is the slice's only one, else 0: no 0 / 0.
    """

    def compute(self, x, axis, keepdims):
        return x.prod(axis=axis, keepdims=keepdims)

    def infer(self, x, axis, keepdims):
        return Spec(reduced_shape(x.shape, axis, keepdims), x.dtype)

    def gradient(self, node, output_grad):
        x = node.inputs[0]
        return [broadcast_like(output_grad, x, _spread_axis(node.attrs)) * _others(node)]

    def jvp(self, node, x_dot):
        return sum(_others(node) * x_dot, **node.attrs)


def _others(node: Node) -> Node:
    """For each element of a prod's input X, the product of the other elements of its
    slice, built from ops (so that it can be differentiated again)."""
    x, axis = node.inputs[0], node.attrs["axis"]
    zero = equal(x, 0)
    safe = where(zero, ones_like(x), x)  # no division by 0, in this rule or its gradient
    zeros = sum(where(zero, ones_like(x), zeros_like(x)), axis, keepdims=True)
    at_zero = where(equal(zeros, 1), prod(safe, axis, keepdims=True), 0)
    return where(zero, at_zero, broadcast_like(node, x, _spread_axis(node.attrs)) / safe)


def prod(x, axis=None, keepdims: bool = False, *, name: str | None = None) -> Node:
    """The product of the elements over ``axis``, as numpy.prod.

    >>> import autodiff as ad
    >>> float(ad.prod(ad.tensor([2.0, 3.0, 4.0])).value)
    24.0
    """
    return Prod.apply(x, axis=_axis(axis), keepdims=keepdims, name=name)


def var(x, axis=None, keepdims: bool = False, ddof: int = 0, *, name: str | None = None) -> Node:
    """The variance over ``axis``, as numpy.var: mean((x - mean(x))**2) with n - ``ddof``
    in the denominator.

    A composition of ops (mean, subtract, multiply, sum, divide), not an op: its
    gradient, 2 (x - mean) / (n - ddof), and the second derivative come from the pieces.

    >>> import autodiff as ad
    >>> float(ad.var(ad.tensor([1.0, 2.0, 3.0, 4.0])).value)
    1.25
    """
    axis = _axis(axis)
    centred = x - mean(x, axis, keepdims=True)
    return named(sum(centred * centred, axis, keepdims) / (count(x, axis) - ddof), name)


def std(x, axis=None, keepdims: bool = False, ddof: int = 0, *, name: str | None = None) -> Node:
    """The standard deviation over ``axis``, as numpy.std: sqrt(var(x, axis, ddof=ddof)).

    A composition (sqrt of ``var``). Where the variance is 0 (a constant slice) its
    gradient is nan (sqrt has an infinite slope at 0): add a small eps first, as
    layer_norm does.
    """
    return named(sqrt(var(x, axis, keepdims, ddof)), name)


class ArgMax(Op):
    """Y = argmax(X, axis): integer indices, as numpy.argmax. Not differentiable: Y is
    piecewise constant and integer, so Y' = 0 (forward mode passes no tangent) and
    asking for dX through Y is an error (differentiate ``max`` instead)."""

    integer_inputs = (0,)  # the largest of integers is a fine question too
    differentiable = False

    def compute(self, x, axis):
        return x.argmax(axis=axis).astype(index_dtype(), copy=False)

    def infer(self, x, axis):
        return Spec(reduced_shape(x.shape, axis, False), index_dtype())

    def gradient(self, node, output_grad):
        raise DTypeError(
            f"{self.name} is not differentiable: its output holds integer indices. "
            f"Differentiate a floating-point expression instead: ad.max gives the largest "
            f"value, and its gradient flows to where argmax points."
        )

    def jvp(self, node, x_dot):
        return None


def argmax(x, axis: int | None = None, *, name: str | None = None) -> Node:
    """Indices of the largest elements along ``axis`` (of the flattened x when None), as
    numpy.argmax; the first one when several tie. Integer output: not differentiable.

    >>> import autodiff as ad
    >>> ad.argmax(ad.tensor([[1.0, 5.0], [7.0, 2.0]]), axis=1).value
    array([1, 0])
    """
    return ArgMax.apply(x, axis=axis, name=name)


class ArgMin(ArgMax):
    """Y = argmin(X, axis): integer indices, as numpy.argmin. Not differentiable (Y' = 0;
    dX through Y is an error: differentiate ``min`` instead)."""

    def compute(self, x, axis):
        return x.argmin(axis=axis).astype(index_dtype(), copy=False)


def argmin(x, axis: int | None = None, *, name: str | None = None) -> Node:
    """Indices of the smallest elements along ``axis``, as numpy.argmin (not differentiable)."""
    return ArgMin.apply(x, axis=axis, name=name)
