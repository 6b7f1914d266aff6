"""Indexing, joining and splitting: taking parts of arrays, and putting parts together.

Each op here has a partner that undoes it, and the two are each other's gradient:

* ``x[index]`` picks elements; its gradient puts the adjoint back where they came from,
  into zeros of x's shape (``scatter_like``), *adding* where an index repeats
  (``x[[0, 0]]`` reads x[0] twice, so x[0] gets both adjoints);
* ``concatenate`` joins arrays along an axis; its gradient cuts the adjoint into the
  inputs' parts (``split_part``), and the gradient of cutting is joining with zeros.

Both pairs are linear, so gradients of gradients come out of the same two rules.
Where a part starts is read from the inputs' shapes when the graph runs, so a graph
built once works for every batch size.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.backend import namespace, to_device
from ..core.errors import ShapeError
from ..core.graph import Node, Op, Spec, named
from .shape import expand_dims, shape_of, zeros_like
from .static_shapes import UNKNOWN, has_rank, is_static, result_dtype


def normalize_index(key: Any) -> tuple:
    """``key`` as a tuple of ints, slices, None, Ellipsis and integer NumPy arrays.

    Boolean masks become the integer arrays of their True positions (``np.nonzero``),
    which pick the same elements and let the gradient scatter with one rule.
    """
    entries = key if isinstance(key, tuple) else (key,)
    index: list[Any] = []
    for entry in entries:
        if entry is None or entry is Ellipsis or isinstance(entry, slice):
            index.append(entry)
        elif isinstance(entry, (bool, np.bool_)):
            raise TypeError(f"x[...]: a single True/False is not an index, got {entry!r}.")
        elif isinstance(entry, (int, np.integer)):
            index.append(int(entry))
        elif isinstance(entry, Node):
            raise TypeError(
                "x[...]: the index is a Node; indices are fixed numbers or arrays known "
                "when the graph is built (pass node.numpy() if it has a value)."
            )
        else:
            array = np.asarray(entry.get() if hasattr(entry, "get") else entry)
            if array.dtype == bool:
                index.extend(np.nonzero(array))
            elif array.dtype.kind in "iu" or array.size == 0:
                index.append(array.astype(np.intp))
            else:
                raise TypeError(
                    f"x[...]: index arrays must hold integers or booleans, got dtype "
                    f"{array.dtype} ({entry!r:.60})."
                )
    return tuple(index)


def _is_basic(index: tuple) -> bool:
    """Only ints, slices, None and Ellipsis: NumPy gives a view, and no element twice."""
    return not any(isinstance(entry, np.ndarray) for entry in index)


def _on_device(index: tuple, x: Any) -> tuple:
    """The index with its arrays on x's device (CuPy wants CuPy index arrays)."""
    xp = namespace(x)
    if xp is np or _is_basic(index):
        return index
    # (through the backend: a copy from the host, which a CUDA graph must not record)
    return tuple(to_device(e, "gpu") if isinstance(e, np.ndarray) else e for e in index)


def _as_view(index: tuple) -> tuple:
    """With an Ellipsis at the end (if none): NumPy then returns a 0-d array for x[0]
    of a vector, not a NumPy scalar."""
    return index if any(entry is Ellipsis for entry in index) else (*index, Ellipsis)


def _indexed_shape(op: str, shape: tuple, index: tuple) -> tuple:
    """The shape of x[index] for an x of ``shape``, or a ShapeError naming both."""
    try:
        return np.broadcast_to(np.empty((), bool), shape)[index].shape  # no data copied
    except IndexError as exc:
        raise ShapeError(
            f"{op}: index {_show(index)} does not fit shape {shape}: {exc}. Check the "
            f"index against the array's shape (x.shape)."
        ) from None


def _show(index: tuple) -> str:
    def one(entry):
        if isinstance(entry, np.ndarray):
            return f"array{entry.tolist()}" if entry.size <= 6 else f"array(shape={entry.shape})"
        if isinstance(entry, slice):
            parts = ["" if p is None else str(p) for p in (entry.start, entry.stop, entry.step)]
            return ":".join(parts).rstrip(":") or ":"
        return "..." if entry is Ellipsis else repr(entry)

    return "[" + ", ".join(one(entry) for entry in index) + "]"


class GetItem(Op):
    """Y = X[index];   dX = scatter_like(dY, X, index) (zeros, dY added at index);   Y' = X'[index].

    ``index`` as NumPy takes it: ints, slices with steps, None, ..., integer arrays and
    boolean masks. Ints and slices give a view of X (no copy); arrays give a copy.
    """

    name = "getitem"

    def compute(self, x, index):
        return x[_on_device(_as_view(index), x)]

    def infer(self, x, index):
        if not is_static(x.shape):
            return Spec(UNKNOWN, x.dtype, view=_is_basic(index))
        shape = _indexed_shape("x[...]", x.shape, index)
        return Spec(shape, x.dtype, view=_is_basic(index) and math.prod(shape) > 0)

    def gradient(self, node, output_grad):
        return [scatter_like(output_grad, node.inputs[0], node.attrs["index"])]

    def jvp(self, node, x_dot):
        return getitem(x_dot, node.attrs["index"])


def getitem(x, index, *, name: str | None = None) -> Node:
    """``x[index]`` with NumPy's indexing (``Node.__getitem__`` calls this).

    >>> import autodiff as ad, numpy as np
    >>> x = ad.tensor(np.arange(6.0).reshape(2, 3))
    >>> x[:, ::2].value.tolist(), x[x.numpy() > 3].value.tolist()
    ([[0.0, 2.0], [3.0, 5.0]], [4.0, 5.0])
    """
    return GetItem.apply(x, index=normalize_index(index), name=name)


class ScatterLike(Op):
    """Y = zeros of L's shape with G added at ``index`` (repeated indices add up);
    dG = dY[index];   Y' = scatter_like(G', L, index).

    The gradient of ``x[index]``; L lends its shape (and is not differentiated).
    """

    name = "scatter_like"
    shape_inputs = (1,)

    def compute(self, g, like, index):
        xp = namespace(g)
        out = xp.zeros(shape_of(like), dtype=g.dtype)
        if _is_basic(index):
            out[_as_view(index)] = g  # each element is picked at most once
        else:
            xp.add.at(out, _on_device(index, g), g)  # x[[0, 0]]: both adjoints go to x[0]
        return out

    def infer(self, g, like, index):
        return Spec(like.shape, g.dtype)

    def gradient(self, node, output_grad):
        return [getitem(output_grad, node.attrs["index"]), None]

    def jvp(self, node, g_dot, like_dot):
        return scatter_like(g_dot, node.inputs[1], node.attrs["index"])


def scatter_like(g, like, index, *, name: str | None = None) -> Node:
    """Zeros shaped like ``like``, with ``g`` added at ``index`` (the gradient of x[index])."""
    return ScatterLike.apply(g, like, index=normalize_index(index), name=name)


def _check_axis(op: str, axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{op}: axis {axis} is out of range for arrays of {ndim} dimensions.")
    return axis % ndim


class Concatenate(Op):
    """Y = [X0 X1 ...] joined along ``axis``;   dXk = the part of dY where Xk sits;
    Y' = concatenate(X0', X1', ...)."""

    def compute(self, *xs, axis):
        _joined_shape([tuple(x.shape) for x in xs], axis)  # a readable error first
        return namespace(*xs).concatenate(xs, axis=axis)

    def infer(self, *xs, axis):
        dtype = result_dtype(*(x.dtype for x in xs))
        if not all(has_rank(x.shape) for x in xs):
            return Spec(UNKNOWN, dtype)
        return Spec(_joined_shape([tuple(x.shape) for x in xs], axis), dtype)

    def gradient(self, node, output_grad):
        axis = node.attrs["axis"]
        parts = range(len(node.inputs))
        return [split_part(output_grad, *node.inputs, axis=axis, part=k) for k in parts]

    def jvp(self, node, *x_dots):
        if all(t is None for t in x_dots):
            return None
        tangents = [
            zeros_like(x) if t is None else t for x, t in zip(node.inputs, x_dots, strict=True)
        ]
        return concatenate(tangents, node.attrs["axis"])


def _joined_shape(shapes: list[tuple], axis: int) -> tuple:
    """The shape of arrays of ``shapes`` joined along ``axis`` (lengths may be symbols)."""
    axis = _check_axis("concatenate", axis, len(shapes[0]))
    rest = {s[:axis] + s[axis + 1 :] for s in shapes}
    if len({len(s) for s in shapes}) > 1 or (len(rest) > 1 and all(map(is_static, shapes))):
        raise ShapeError(
            f"concatenate: shapes {shapes} differ in more than axis {axis}; all "
            f"inputs need the same number of dimensions and the same lengths elsewhere."
        )
    lengths = [s[axis] for s in shapes]
    total = sum(lengths) if all(isinstance(n, int) for n in lengths) else UNKNOWN
    return (*shapes[0][:axis], total, *shapes[0][axis + 1 :])


def concatenate(xs, axis: int = 0, *, name: str | None = None) -> Node:
    """Join a list of arrays along an existing ``axis``, as numpy.concatenate."""
    xs = list(xs)
    if not xs:
        raise ValueError("concatenate: needs at least one array to join.")
    return Concatenate.apply(*xs, axis=int(axis), name=name)


class SplitPart(Op):
    """Y = part k of X cut along ``axis``;   dX = place_part(dY, X) (zeros, dY as part k);
    Y' = the same part of X'.

    Where the parts start is known when the graph runs: the lengths along ``axis`` of
    the ``likes`` (the inputs of a concatenate: its gradient), or ``sections``, as
    numpy.split takes it (a number of equal parts, or the indices where parts start).
    """

    name = "split_part"

    def compute(self, x, *likes, axis, part, sections):
        return x[_slab(x.shape, likes, axis, part, sections)]

    def infer(self, x, *likes, axis, part, sections):
        if not is_static(x.shape) or not all(is_static(y.shape) for y in likes):
            return Spec(UNKNOWN, x.dtype, view=True)
        shape = np.broadcast_to(np.empty((), bool), x.shape)[
            _slab(x.shape, likes, axis, part, sections)
        ].shape
        return Spec(shape, x.dtype, view=math.prod(shape) > 0)  # (an empty part holds nothing)

    def gradient(self, node, output_grad):
        x, *likes = node.inputs
        return [place_part(output_grad, x, *likes, **node.attrs), *[None] * len(likes)]

    def jvp(self, node, x_dot, *like_dots):
        return split_part(x_dot, *node.inputs[1:], **node.attrs)


def split_part(x, *likes, axis: int, part: int, sections=None, name: str | None = None) -> Node:
    """Part ``part`` of x along ``axis`` (see SplitPart); ``split`` returns them all."""
    if isinstance(sections, (list, tuple)):
        sections = tuple(int(i) for i in sections)
    return SplitPart.apply(x, *likes, axis=axis, part=part, sections=sections, name=name)


class PlacePart(Op):
    """Y = zeros of L's shape with G as part k along ``axis``;   dG = split_part(dY, ...);
    Y' = place_part(G', L, ...).

    The gradient of ``split_part``: the parts are cut as there (from the likes' lengths,
    or ``sections``); L and the likes lend shapes only.
    """

    name = "place_part"

    def compute(self, g, like, *likes, axis, part, sections):
        shape = shape_of(like)
        out = namespace(g).zeros(shape, dtype=g.dtype)
        out[_slab(shape, likes, axis, part, sections)] = g
        return out

    def infer(self, g, like, *likes, axis, part, sections):
        return Spec(like.shape, g.dtype)

    def gradient(self, node, output_grad):
        _, like, *likes = node.inputs
        grad = split_part(output_grad, *likes, **node.attrs)
        return [grad, None, *[None] * len(likes)]

    def jvp(self, node, g_dot, *like_dots):
        return place_part(g_dot, *node.inputs[1:], **node.attrs)


def place_part(
    g, like, *likes, axis: int, part: int, sections=None, name: str | None = None
) -> Node:
    """Zeros shaped like ``like`` with g as part ``part`` (the gradient of split_part)."""
    return PlacePart.apply(g, like, *likes, axis=axis, part=part, sections=sections, name=name)


def _slab(shape, likes, axis: int, part: int, sections) -> tuple:
    """The index of part ``part`` of an array of ``shape`` cut along ``axis``."""
    axis %= len(shape)
    start, stop = _bounds(shape[axis], [shape_of(y) for y in likes], axis, sections, part)
    return (slice(None),) * axis + (slice(start, stop),)


def _count(sections) -> int:
    return sections if isinstance(sections, int) else len(sections) + 1


def _bounds(length: int, like_shapes: list, axis: int, sections, part: int) -> tuple[int, int]:
    """Where part ``part`` starts and stops along an axis of ``length``."""
    if like_shapes:
        starts = np.cumsum([0] + [s[axis] for s in like_shapes]).tolist()
        return starts[part], starts[part + 1]
    if isinstance(sections, int):
        if length % sections:
            raise ShapeError(
                f"split: {length} elements along axis {axis} do not split into "
                f"{sections} equal parts; pass the indices where parts start instead."
            )
        size = length // sections
        return part * size, (part + 1) * size
    edges = [0, *(min(max(i, 0), length) for i in sections), length]
    return edges[part], max(edges[part], edges[part + 1])


def split(x, sections, axis: int = 0) -> list[Node]:
    """x cut into parts along ``axis``, as numpy.split: ``sections`` is a number of equal
    parts, or the indices where the parts start. Each part is a view of x.

    >>> import autodiff as ad, numpy as np
    >>> [p.value.tolist() for p in ad.split(ad.tensor(np.arange(5.0)), [2])]
    [[0.0, 1.0], [2.0, 3.0, 4.0]]
    """
    if isinstance(sections, int) and sections < 1:
        raise ValueError(f"split: the number of parts must be 1 or more, got {sections}.")
    if x.ndim is not None:
        axis = _check_axis("split", axis, x.ndim)
    elif axis < 0:
        raise ShapeError("split: a negative axis needs x's number of dimensions; declare it.")
    sections = sections if isinstance(sections, int) else tuple(int(i) for i in sections)
    return [split_part(x, axis=axis, part=k, sections=sections) for k in range(_count(sections))]


def stack(xs, axis: int = 0, *, name: str | None = None) -> Node:
    """Join arrays of one shape along a new ``axis``, as numpy.stack: each gets a new axis
    of length 1 (``expand_dims``), then they are concatenated along it."""
    xs = list(xs)
    if not xs:
        raise ValueError("stack: needs at least one array.")
    return named(concatenate([expand_dims(x, axis) for x in xs], axis), name)
