"""Shape ops: moving numbers around without changing them.

Their gradients move the adjoint back: a transpose is undone by the inverse transpose,
a reshape by a reshape to the input's shape, a broadcast by a sum.

Most of them copy nothing: their output is a *view* of the input's memory (their shape
rule, ``infer``, says so with ``view=True``), which memory planning counts as free.

Three helper ops take a second, "like" input that only lends its shape. They let a
gradient rule say "back to the shape of X" before X's shape is known (symbolic graphs):
``sum_to_like`` (undoes broadcasting; the engine calls it for broadcasting ops),
``broadcast_like`` and ``reshape_like``. ``ones_like`` and ``zeros_like`` take nothing
but the shape (and dtype): the reverse pass starts from ones, and gives zeros to an
input the output does not depend on.
"""

from __future__ import annotations

import math

from ..core.backend import device_of, is_weak_scalar, namespace
from ..core.errors import ShapeError
from ..core.graph import Node, Op, Spec
from .static_shapes import UNKNOWN, has_rank, is_static, same


def shape_of(x) -> tuple[int, ...]:
    """The shape of an array; () for a Python number."""
    return () if is_weak_scalar(x) else tuple(x.shape)


def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(sorted(a % ndim for a in axes))


def _insert_ones(shape: tuple[int, ...], axis) -> tuple[int, ...]:
    """``shape`` with a 1 put back at each reduced ``axis`` (as keepdims=True would)."""
    ndim = len(shape) + (1 if isinstance(axis, int) else len(axis))
    result = list(shape)
    for a in normalize_axes(axis, ndim):
        result.insert(a, 1)
    return tuple(result)


def _reshaped(shape, target: tuple[int, ...]) -> tuple:
    """The shape a reshape of ``shape`` to ``target`` gives, with a -1 filled in.

    The -1 stays UNKNOWN when ``shape`` holds symbols (ops/static_shapes.py).
    """
    if not is_static(shape):
        return tuple(UNKNOWN if d == -1 else d for d in target)
    size = math.prod(shape)
    if -1 in target:
        known = math.prod(d for d in target if d != -1)
        if known == 0:  # any length would fit the -1: NumPy refuses too
            raise ShapeError(f"reshape: the -1 in {target} is ambiguous for shape {shape}.")
        target = tuple(size // known if d == -1 else d for d in target)
    if math.prod(target) != size:
        raise ShapeError(f"reshape: cannot reshape shape {shape} ({size} elements) into {target}.")
    return target


def sum_to_shape(x, shape: tuple[int, ...]):
    """Sum ``x`` over the axes that broadcasting added or stretched, giving ``shape``.

    This is the one place in the library where broadcasting is undone.

    >>> import numpy as np
    >>> sum_to_shape(np.ones((4, 2, 3)), (2, 1)).tolist()
    [[12.0], [12.0]]
    """
    leading = x.ndim - len(shape)
    if leading == 1 and x.shape[1:] == shape:  # (a bias's gradient: the common case)
        return x.sum(axis=0)
    if leading > 0:
        x = x.sum(axis=tuple(range(leading)))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    if stretched:
        x = x.sum(axis=stretched, keepdims=True)
    return x


def _check_permutation(axes, ndim: int) -> None:
    if axes is not None and sorted(a % ndim if -ndim <= a < ndim else a for a in axes) != list(
        range(ndim)
    ):
        raise ShapeError(
            f"transpose: axes {axes} are not a permutation of the {ndim} axes "
            f"{tuple(range(ndim))}: name each axis once (or pass none to reverse them)."
        )


class Transpose(Op):
    """Y = transpose(X, axes);   dX = transpose(dY, inverse(axes));   Y' = transpose(X', axes)."""

    def compute(self, x, axes):
        _check_permutation(axes, x.ndim)
        return x.transpose(axes)

    def infer(self, x, axes):
        if not has_rank(x.shape):
            return Spec(UNKNOWN, x.dtype, view=True)
        _check_permutation(axes, len(x.shape))
        order = reversed(range(len(x.shape))) if axes is None else axes
        return Spec(tuple(x.shape[a] for a in order), x.dtype, view=True)

    def gradient(self, node, output_grad):
        axes = node.attrs["axes"]
        if axes is None:  # reversing the axes is its own inverse
            return [transpose(output_grad)]
        inverse = tuple(sorted(range(len(axes)), key=lambda i: axes[i] % len(axes)))
        return [transpose(output_grad, inverse)]

    def jvp(self, node, x_dot):
        return transpose(x_dot, node.attrs["axes"])


def transpose(x, axes=None, *, name: str | None = None) -> Node:
    """Permute the axes of x (reverse them when ``axes`` is None), as numpy.transpose."""
    return Transpose.apply(x, axes=None if axes is None else tuple(axes), name=name)


class Reshape(Op):
    """Y = reshape(X, shape);   dX = reshape(dY, X.shape);   Y' = reshape(X', shape)."""

    def compute(self, x, shape):
        return x.reshape(shape)

    def infer(self, x, shape):
        # A view when x is contiguous; NumPy copies otherwise, which the plan does not count.
        return Spec(_reshaped(x.shape, shape), x.dtype, view=True)

    def gradient(self, node, output_grad):
        return [reshape_like(output_grad, node.inputs[0])]

    def jvp(self, node, x_dot):
        return reshape(x_dot, node.attrs["shape"])


def reshape(x, shape, *, name: str | None = None) -> Node:
    """x with a new shape holding the same elements (one entry may be -1)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return Reshape.apply(x, shape=shape, name=name)


class Squeeze(Op):
    """Y = X without the length-1 ``axis`` (all of them when None);   dX = reshape_like(dY, X);
    Y' = squeeze(X', axis)."""

    def compute(self, x, axis):
        try:
            return namespace(x).squeeze(x, axis=axis)
        except ValueError:
            raise ShapeError(
                f"squeeze: axis {axis} of shape {tuple(x.shape)} has length > 1; only "
                f"axes of length 1 can be removed."
            ) from None

    def infer(self, x, axis):
        if not is_static(x.shape):
            return Spec(UNKNOWN, x.dtype, view=True)
        axes = range(len(x.shape)) if axis is None else normalize_axes(axis, len(x.shape))
        if axis is not None and any(x.shape[a] != 1 for a in axes):
            raise ShapeError(f"squeeze: axis {axis} of shape {x.shape} has length > 1.")
        return Spec(
            tuple(n for a, n in enumerate(x.shape) if not (a in axes and n == 1)),
            x.dtype,
            view=True,
        )

    def gradient(self, node, output_grad):
        return [reshape_like(output_grad, node.inputs[0])]

    def jvp(self, node, x_dot):
        return squeeze(x_dot, node.attrs["axis"])


def squeeze(x, axis=None, *, name: str | None = None) -> Node:
    """x without axes of length 1 (those in ``axis``, or all), as numpy.squeeze."""
    return Squeeze.apply(
        x, axis=axis if axis is None or isinstance(axis, int) else tuple(axis), name=name
    )


class ExpandDims(Op):
    """Y = X with a new axis of length 1 at ``axis``;   dX = reshape_like(dY, X);
    Y' = expand_dims(X', axis)."""

    name = "expand_dims"

    def compute(self, x, axis):
        return namespace(x).expand_dims(x, axis)

    def infer(self, x, axis):
        if not has_rank(x.shape):
            return Spec(UNKNOWN, x.dtype, view=True)
        return Spec(_insert_ones(tuple(x.shape), axis), x.dtype, view=True)

    def gradient(self, node, output_grad):
        return [reshape_like(output_grad, node.inputs[0])]

    def jvp(self, node, x_dot):
        return expand_dims(x_dot, node.attrs["axis"])


def expand_dims(x, axis, *, name: str | None = None) -> Node:
    """x with a new axis of length 1 at ``axis`` (or several), as numpy.expand_dims."""
    return ExpandDims.apply(x, axis=axis if isinstance(axis, int) else tuple(axis), name=name)


class Flatten(Op):
    """Y = X with axes ``start`` .. last merged into one;   dX = reshape_like(dY, X);
    Y' = flatten(X', start).

    ``start=0`` gives a vector (numpy's x.ravel()); ``start=1`` keeps a batch axis
    (PyTorch's flatten of images for a linear layer).
    """

    def compute(self, x, start):
        return x.reshape(tuple(x.shape[:start]) + (-1,))

    def infer(self, x, start):
        if not has_rank(x.shape):
            return Spec(UNKNOWN, x.dtype, view=True)
        return Spec(_reshaped(x.shape, tuple(x.shape[:start]) + (-1,)), x.dtype, view=True)

    def gradient(self, node, output_grad):
        return [reshape_like(output_grad, node.inputs[0])]

    def jvp(self, node, x_dot):
        return flatten(x_dot, node.attrs["start"])


def flatten(x, start: int = 0, *, name: str | None = None) -> Node:
    """x with its axes from ``start`` on merged into one (all of them: a vector)."""
    return Flatten.apply(x, start=int(start), name=name)


class BroadcastTo(Op):
    """Y = broadcast_to(X, shape);   dX = sum_to_like(dY, X);   Y' = broadcast_to(X', shape)."""

    name = "broadcast_to"

    def compute(self, x, shape):
        return namespace(x).broadcast_to(x, shape)

    def infer(self, x, shape):
        return Spec(tuple(shape), x.dtype, view=True)

    def gradient(self, node, output_grad):
        return [sum_to_like(output_grad, node.inputs[0])]

    def jvp(self, node, x_dot):
        return broadcast_to(x_dot, node.attrs["shape"])


def broadcast_to(x, shape, *, name: str | None = None) -> Node:
    """x repeated along new or size-1 axes to ``shape``, as numpy.broadcast_to."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return BroadcastTo.apply(x, shape=shape, name=name)


class SumToLike(Op):
    """Y = G summed down to the shape of L (undoing broadcasting);  dG = broadcast_like(dY, G).

    With ``axis``, L's shape lacks those axes (as after a reduction without keepdims).
    """

    name = "sum_to_like"
    shape_inputs = (1,)

    def compute(self, g, like, axis):
        target = shape_of(like)
        if axis is None:
            return sum_to_shape(g, target)
        return sum_to_shape(g, _insert_ones(target, axis)).reshape(target)

    def infer(self, g, like, axis):
        kept = like.shape
        if axis is not None and has_rank(like.shape):
            kept = _insert_ones(like.shape, axis)
        # Nothing to sum: sum_to_shape hands back g itself.
        return Spec(like.shape, g.dtype, view=same(g.shape, kept))

    def gradient(self, node, output_grad):
        return [broadcast_like(output_grad, node.inputs[0], node.attrs["axis"]), None]

    def jvp(self, node, g_dot, like_dot):
        return sum_to_like(g_dot, node.inputs[1], node.attrs["axis"])


def sum_to_like(g, like, axis=None, *, name: str | None = None) -> Node:
    """``g`` summed over broadcast axes down to ``like``'s shape (undoes broadcasting)."""
    if axis is not None and not isinstance(axis, int):
        axis = tuple(axis)
    return SumToLike.apply(g, like, axis=axis, name=name)


class BroadcastLike(Op):
    """Y = G broadcast to the shape of L;   dG = sum_to_like(dY, G).

    With ``axis``, G lacks those axes of L (a reduction's output without keepdims) and
    they are put back first.
    """

    name = "broadcast_like"
    shape_inputs = (1,)

    def compute(self, g, like, axis):
        if axis is not None:
            g = g.reshape(_insert_ones(shape_of(g), axis))
        return namespace(g).broadcast_to(g, shape_of(like))

    def infer(self, g, like, axis):
        return Spec(like.shape, g.dtype, view=True)

    def gradient(self, node, output_grad):
        return [sum_to_like(output_grad, node.inputs[0], node.attrs["axis"]), None]

    def jvp(self, node, g_dot, like_dot):
        return broadcast_like(g_dot, node.inputs[1], node.attrs["axis"])


def broadcast_like(g, like, axis=None, *, name: str | None = None) -> Node:
    """``g`` broadcast to ``like``'s shape, first restoring reduced ``axis`` if given."""
    if axis is not None and not isinstance(axis, int):
        axis = tuple(axis)
    return BroadcastLike.apply(g, like, axis=axis, name=name)


class ReshapeLike(Op):
    """Y = G reshaped to the shape of L;   dG = reshape_like(dY, G)."""

    name = "reshape_like"
    shape_inputs = (1,)

    def compute(self, g, like):
        return g.reshape(shape_of(like))

    def infer(self, g, like):
        return Spec(like.shape, g.dtype, view=True)

    def gradient(self, node, output_grad):
        return [reshape_like(output_grad, node.inputs[0]), None]

    def jvp(self, node, g_dot, like_dot):
        return reshape_like(g_dot, node.inputs[1])


def reshape_like(g, like, *, name: str | None = None) -> Node:
    """``g`` reshaped to ``like``'s shape."""
    return ReshapeLike.apply(g, like, name=name)


class OnesLike(Op):
    """Y = an array of ones with X's shape and dtype; depends on no value of X."""

    name = "ones_like"
    shape_inputs = (0,)
    takes_numbers = True  # (of a Python number: 1.0)

    def compute(self, x):
        if is_weak_scalar(x):
            return 1.0
        xp = namespace(x)  # (of one number on the CPU, as for a loss: array() is quick;
        # on the GPU it would copy from the host, where ones_like is a kernel)
        quick = x.ndim == 0 and device_of(x) == "cpu"
        return xp.array(1, dtype=x.dtype) if quick else xp.ones_like(x)

    def infer(self, x):
        return Spec(x.shape, x.dtype)

    def gradient(self, node, output_grad):
        return [None]

    def jvp(self, node, x_dot):
        return None


def ones_like(x, *, name: str | None = None) -> Node:
    """Ones with the shape and dtype of x."""
    return OnesLike.apply(x, name=name)


class ZerosLike(Op):
    """Y = an array of zeros with X's shape and dtype; depends on no value of X."""

    name = "zeros_like"
    shape_inputs = (0,)
    takes_numbers = True  # (of a Python number: 0.0)

    def compute(self, x):
        return 0.0 if is_weak_scalar(x) else namespace(x).zeros_like(x)

    def infer(self, x):
        return Spec(x.shape, x.dtype)

    def gradient(self, node, output_grad):
        return [None]

    def jvp(self, node, x_dot):
        return None


def zeros_like(x, *, name: str | None = None) -> Node:
    """Zeros with the shape and dtype of x."""
    return ZerosLike.apply(x, name=name)
