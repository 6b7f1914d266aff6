"""Convolution and pooling, written the way the lecture explains them.

A convolution slides a small kernel over an image. The lecture's trick, *im2col*, turns
it into the one op that hardware is best at, a matrix product: copy every patch that
the kernel sees into one row of a matrix (the "columns"), and the convolution is

    Y = im2col(X) @ W.reshape(F, C*KH*KW).T        (then reshaped back to an image)

So only two new ops are needed, a linear pair:

* ``im2col`` (X -> patches): each patch is read out of a strided *view* of the padded
  image (no loop over pixels), then copied into rows;
* ``col2im`` (patches -> X): the transpose, which adds every patch entry back onto the
  pixel it came from (a pixel lies in several patches, so its gradient is a sum).

Each is the other's gradient, so ``conv2d``'s gradient (and its gradient's gradient)
comes from matmul's rule and these two, with nothing written for conv2d itself.
Pooling is the same story: ``im2col`` on each channel, then the ``max`` or ``mean``
reduction over each patch. Dropout multiplies by a random mask, a node drawn anew at
every run, so its gradient is the same mask times the adjoint.

Images are NCHW: (batch, channels, height, width); kernels (F, C, KH, KW).
"""

from __future__ import annotations

from ..core import backend
from ..core.backend import namespace
from ..core.errors import DomainError, ShapeError
from ..core.graph import Node, Op, Spec, as_node, named
from .linalg import matmul
from .reductions import max, mean
from .shape import reshape, transpose
from .static_shapes import UNKNOWN, Signatures, has_rank, is_symbol


def _pair(value, what: str) -> tuple[int, int]:
    """(v, v) for an int, the pair itself for a pair."""
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) for v in pair):
        raise TypeError(f"conv: {what} must be an int or a pair of ints, got {value!r}.")
    return pair  # type: ignore[return-value]


def output_length(length, kernel: int, stride: int, padding: int, dilation: int):
    """How many positions a kernel takes along an axis of ``length`` (a symbol stays one).

    >>> output_length(28, kernel=3, stride=1, padding=1, dilation=1)
    28
    """
    if is_symbol(length) or length is None:
        return UNKNOWN
    return (length + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _geometry(image_shape, kernel, stride, padding, dilation, op: str):
    """(OH, OW) for an image of shape (N, C, H, W), with a readable error if none fit."""
    if len(image_shape) != 4:
        raise ShapeError(
            f"{op}: images must have 4 axes (N, C, H, W), got shape {tuple(image_shape)}. "
            f"Add a batch or channel axis with reshape, e.g. x.reshape((1, 1, H, W))."
        )
    sizes = []
    for axis in (0, 1):
        length = image_shape[2 + axis]
        out = output_length(length, kernel[axis], stride[axis], padding[axis], dilation[axis])
        if not is_symbol(out) and out < 1:
            raise ShapeError(
                f"{op}: a kernel of {kernel} (dilation {dilation}) does not fit an image of "
                f"{tuple(image_shape[2:])} padded by {padding}: use a smaller kernel or "
                f"more padding."
            )
        sizes.append(out)
    return tuple(sizes)


def _product(*lengths):
    """The product of lengths, UNKNOWN if any is a symbol."""
    result = 1
    for length in lengths:
        if is_symbol(length) or length is None:
            return UNKNOWN
        result *= length
    return result


def _window(offset: int, stride: int, dilation: int, length: int) -> slice:
    """The pixels that kernel entry ``offset`` reads along one axis, for ``length`` outputs."""
    start = offset * dilation
    return slice(start, start + stride * (length - 1) + 1, stride)


class Im2Col(Op):
    """Y[(n, i, j), (c, p, q)] = Xpad[n, c, i*sh + p*dh, j*sw + q*dw]: one row per kernel
    position (N*OH*OW rows), one column per kernel entry (C*KH*KW columns), where Xpad
    is X padded with ``fill`` (0; max pooling pads with -inf);
    dX = col2im(dY) (each pixel sums the entries of every patch it lies in);
    Y' = im2col(X') (padded with 0: the padding is a constant).
    """

    def compute(self, x, kernel, stride, padding, dilation, fill):
        xp = namespace(x)
        oh, ow = _geometry(x.shape, kernel, stride, padding, dilation, self.name)
        n, c, h, w = x.shape
        (kh, kw), (ph, pw), (sh, sw), (dh, dw) = kernel, padding, stride, dilation
        # The padded image, channels last, so that each kernel entry (p, q) reads one
        # strided slab of it, Xpad[n, i*sh + p*dh, j*sw + q*dw, c] for every (n, i, j, c),
        # and copies it into its column: KH*KW vectorised copies, no loop over pixels.
        image = xp.full((n, h + 2 * ph, w + 2 * pw, c), fill, dtype=x.dtype)
        image[:, ph : ph + h, pw : pw + w, :] = x.transpose(0, 2, 3, 1)
        if backend.device_of(x) == "gpu":  # one copy of a strided view: a kernel launch costs more
            sn, sy, sx, sc = image.strides  # than the copy there; on the CPU, slabs are faster
            view = xp.lib.stride_tricks.as_strided(
                image, (n, oh, ow, c, kh, kw), (sn, sy * sh, sx * sw, sc, sy * dh, sx * dw)
            )
            return xp.ascontiguousarray(view).reshape(n * oh * ow, c * kh * kw)
        columns = xp.empty((n, oh, ow, c, kh, kw), dtype=x.dtype)
        for p in range(kh):
            for q in range(kw):
                rows, cols = _window(p, sh, dh, oh), _window(q, sw, dw, ow)
                columns[:, :, :, :, p, q] = image[:, rows, cols, :]
        return columns.reshape(n * oh * ow, c * kh * kw)

    def infer(self, x, kernel, stride, padding, dilation, fill):
        if not has_rank(x.shape):
            return Spec((UNKNOWN, UNKNOWN), x.dtype)
        oh, ow = _geometry(x.shape, kernel, stride, padding, dilation, self.name)
        n, c = x.shape[:2]
        return Spec((_product(n, oh, ow), _product(c, *kernel)), x.dtype)

    def gradient(self, node, output_grad):
        x = node.inputs[0]
        geometry = {k: v for k, v in node.attrs.items() if k != "fill"}
        return [col2im(output_grad, x, **geometry)]

    def jvp(self, node, x_dot):
        return im2col(x_dot, **{**node.attrs, "fill": 0.0})


def im2col(
    x, kernel, stride=1, padding=0, dilation=1, fill: float = 0.0, *, name: str | None = None
) -> Node:
    """The patches a kernel of size ``kernel`` sees in the images x (N, C, H, W), as the
    rows of a matrix of shape (N*OH*OW, C*KH*KW); ``fill`` is the padding's value.

    >>> import autodiff as ad, numpy as np
    >>> x = ad.tensor(np.arange(9.0).reshape(1, 1, 3, 3))
    >>> ad.im2col(x, kernel=2).value
    array([[0., 1., 3., 4.],
           [1., 2., 4., 5.],
           [3., 4., 6., 7.],
           [4., 5., 7., 8.]])
    """
    return Im2Col.apply(
        x,
        kernel=_pair(kernel, "kernel"),
        stride=_pair(stride, "stride"),
        padding=_pair(padding, "padding"),
        dilation=_pair(dilation, "dilation"),
        fill=float(fill),
        name=name,
    )


class Col2Im(Op):
    """Y = the image (shaped like ``like``) onto which each entry of the patches X is
    added back at the pixel it was read from: Ypad[n, c, i*sh + p*dh, j*sw + q*dw] +=
    X[(n, i, j), (c, p, q)], then the padding is cropped. The transpose of im2col:
    dX = im2col(dY);   Y' = col2im(X').   ``like`` only lends its shape.
    """

    shape_inputs = (1,)

    def compute(self, columns, like, kernel, stride, padding, dilation):
        xp = namespace(columns)
        oh, ow = _geometry(like.shape, kernel, stride, padding, dilation, self.name)
        n, c, h, w = like.shape
        (kh, kw), (ph, pw), (sh, sw) = kernel, padding, stride
        expected = (n * oh * ow, c * kh * kw)
        if tuple(columns.shape) != expected:
            raise ShapeError(
                f"{self.name}: columns of shape {tuple(columns.shape)} do not fit images of "
                f"shape {tuple(like.shape)} with kernel {kernel}: expected {expected}."
            )
        patches = columns.reshape(n, oh, ow, c, kh, kw)
        padded = xp.zeros((n, h + 2 * ph, w + 2 * pw, c), dtype=columns.dtype)  # channels last
        # One vectorised scatter-add per kernel entry (p, q): the patches' entries for
        # (p, q) land on a strided grid of pixels, and no two of them on the same pixel.
        for p in range(kh):
            for q in range(kw):
                rows, cols = _window(p, sh, dilation[0], oh), _window(q, sw, dilation[1], ow)
                padded[:, rows, cols, :] += patches[:, :, :, :, p, q]
        return xp.ascontiguousarray(padded[:, ph : ph + h, pw : pw + w, :].transpose(0, 3, 1, 2))

    def infer(self, columns, like, kernel, stride, padding, dilation):
        return Spec(like.shape, columns.dtype)

    def gradient(self, node, output_grad):
        return [im2col(output_grad, **node.attrs), None]

    def jvp(self, node, columns_dot, like_dot):
        return col2im(columns_dot, node.inputs[1], **node.attrs)


def col2im(
    columns, like, kernel, stride=1, padding=0, dilation=1, *, name: str | None = None
) -> Node:
    """Add patches (rows of ``columns``, as im2col makes them) back into images shaped
    like ``like``: the transpose of im2col (a pixel in several patches gets their sum).

    >>> import autodiff as ad, numpy as np
    >>> like = ad.constant(np.zeros((1, 1, 3, 3)))
    >>> ad.col2im(ad.tensor(np.ones((4, 4))), like, kernel=2).value[0, 0]
    array([[1., 2., 1.],
           [2., 4., 2.],
           [1., 2., 1.]])
    """
    return Col2Im.apply(
        columns,
        like,
        kernel=_pair(kernel, "kernel"),
        stride=_pair(stride, "stride"),
        padding=_pair(padding, "padding"),
        dilation=_pair(dilation, "dilation"),
        name=name,
    )


def static_shape(x: Node) -> tuple | None:
    """x's shape while the graph is built, None for each length not known yet: its
    value's shape, a placeholder's declared one, or for a symbolic node the one its ops'
    shape rules infer (ops/static_shapes.py). None if not even the rank is known.

    >>> import autodiff as ad
    >>> static_shape(ad.Variable("x", shape=(None, 3)) * 2)
    (None, 3)
    """
    shape: object = x.shape
    if shape is None and not x.op.is_leaf:
        shape = Signatures().of(x).shape
    if not isinstance(shape, tuple):  # rank unknown
        return None
    return tuple(None if is_symbol(d) else d for d in shape)


def _known_shape(x: Node, op: str, what: str) -> tuple:
    """x's shape, which ``op`` needs while building the graph (to reshape back)."""
    shape = static_shape(x)
    if shape is None or len(shape) != 4 or any(d is None for d in shape[1:]):
        raise ShapeError(
            f"{op}: the {what} must have a known shape with 4 axes while the graph is "
            f"built, got {shape}. Declare it, e.g. ad.Variable('x', shape=(None, C, H, W))."
        )
    return tuple(shape)


def conv2d(x, w, b=None, stride=1, padding=0, dilation=1, *, name: str | None = None) -> Node:
    """2-D convolution (cross-correlation, as in every framework) of images x (N, C, H, W)
    with kernels w (F, C, KH, KW), plus an optional bias b (F,): output (N, F, OH, OW).

    Not an op but a composition: im2col, one matrix product, a reshape and a transpose,
    so its gradient comes from their rules (dW = dY^T @ columns, dX = col2im(dY @ W)).

    >>> import autodiff as ad, numpy as np
    >>> x = ad.tensor(np.ones((1, 1, 3, 3)))
    >>> ad.conv2d(x, ad.tensor(np.ones((1, 1, 2, 2))), padding=1).value[0, 0]
    array([[1., 2., 2., 1.],
           [2., 4., 4., 2.],
           [2., 4., 4., 2.],
           [1., 2., 2., 1.]])
    """
    x, w = as_node(x), as_node(w)
    filters, channels, kh, kw = _known_shape(w, "conv2d", "weights w (F, C, KH, KW)")
    image = _known_shape(x, "conv2d", "input x (N, C, H, W)")
    if image[1] != channels:
        raise ShapeError(
            f"conv2d: the input has {image[1]} channels (shape {image}) but the weights "
            f"expect {channels} (shape {w.shape}): the second axis of x and w must match."
        )
    stride, padding, dilation = (
        _pair(stride, "stride"),
        _pair(padding, "padding"),
        _pair(dilation, "dilation"),
    )
    oh, ow = _geometry(image, (kh, kw), stride, padding, dilation, "conv2d")
    columns = im2col(x, (kh, kw), stride, padding, dilation)  # (N*OH*OW, C*KH*KW)
    rows = matmul(columns, reshape(w, (filters, channels * kh * kw)), trans_B=True)
    out = transpose(reshape(rows, (-1, oh, ow, filters)), (0, 3, 1, 2))  # to NCHW
    if b is None:
        return named(out, name)
    return named(out + reshape(b, (filters, 1, 1)), name)


def _pool(x, kernel, stride, padding, reduce, fill: float, op: str) -> Node:
    """im2col on each channel alone (channels become batch entries), then ``reduce`` each
    patch to one number, then back to (N, C, OH, OW)."""
    x = as_node(x)
    _, channels, h, w = _known_shape(x, op, "input x (N, C, H, W)")
    kernel = _pair(kernel, "kernel")
    stride = kernel if stride is None else _pair(stride, "stride")
    padding = _pair(padding, "padding")
    if padding[0] > kernel[0] // 2 or padding[1] > kernel[1] // 2:
        raise ShapeError(
            f"{op}: padding {padding} is more than half the kernel {kernel}: some windows "
            f"would hold only padding. Use padding <= kernel // 2."
        )
    oh, ow = _geometry((1, 1, h, w), kernel, stride, padding, (1, 1), op)
    columns = im2col(reshape(x, (-1, 1, h, w)), kernel, stride, padding, fill=fill)
    return reshape(reduce(columns, axis=1), (-1, channels, oh, ow))


def max_pool2d(x, kernel, stride=None, padding: int = 0, *, name: str | None = None) -> Node:
    """The largest value in each ``kernel`` window of each channel (stride: the kernel's
    size by default; padding counts as -inf). Composed: im2col per channel, then max.

    >>> import autodiff as ad, numpy as np
    >>> ad.max_pool2d(ad.tensor(np.arange(16.0).reshape(1, 1, 4, 4)), 2).value[0, 0]
    array([[ 5.,  7.],
           [13., 15.]])
    """
    return named(_pool(x, kernel, stride, padding, max, -backend.inf(), "max_pool2d"), name)


def avg_pool2d(x, kernel, stride=None, padding: int = 0, *, name: str | None = None) -> Node:
    """The mean of each ``kernel`` window of each channel (stride: the kernel's size by
    default; padded zeros count, as PyTorch's default count_include_pad=True).
    Composed: im2col per channel, then mean."""
    return named(_pool(x, kernel, stride, padding, mean, 0.0, "avg_pool2d"), name)


class DropoutMask(Op):
    """Y = a random mask shaped like X: 0 with probability p, else 1 / (1 - p), drawn
    anew each time the node is computed;   no gradient (X lends its shape and dtype).

    A node, not a constant, so that a graph built once (``nn.train``) drops other units
    at every step. ``dropout`` multiplies by it, and its gradient, dY * mask, reads the
    same node: each step's backward pass uses the mask of its own forward pass.
    """

    name = "dropout_mask"
    shape_inputs = (0,)  # (system/capture.py: capture.RANDOM names it: it draws at each run)

    def compute(self, x, p, rng):
        uniform = backend.random_uniform(tuple(x.shape), x.dtype, backend.device_of(x), rng)
        return (uniform >= p).astype(x.dtype) / (1 - p)

    def infer(self, x, p, rng):
        return Spec(x.shape, x.dtype)

    def gradient(self, node, output_grad):
        return [None]

    def jvp(self, node, x_dot):
        return None


def dropout_mask(x, p: float, rng, *, name: str | None = None) -> Node:
    """A fresh dropout mask shaped like x at every run (see DropoutMask); ``rng`` is a
    numpy Generator, drawn from at each run."""
    return DropoutMask.apply(x, p=float(p), rng=rng, name=name)


def dropout(
    x, p: float = 0.5, training: bool = True, seed=None, *, name: str | None = None
) -> Node:
    """Inverted dropout: in training, each element is zeroed with probability ``p`` and
    the survivors are scaled by 1 / (1 - p), so the expected value is x; not training:
    x itself. Y = X * mask and dX = dY * mask, where the mask is a node drawn anew at
    every run of the graph (``dropout_mask``). ``seed``: an int (the same masks every
    time the node is built), a numpy Generator (drawn from: a layer's masks differ step
    after step, reproducibly), or None (fresh).

    >>> import autodiff as ad
    >>> y = ad.dropout(ad.tensor([1.0, 1.0, 1.0, 1.0]), p=0.5, seed=0)
    >>> sorted(set(y.value.tolist())) in ([0.0, 2.0], [0.0], [2.0])
    True
    """
    if not 0 <= p < 1:
        raise DomainError(
            f"dropout: p is the probability of dropping an element and must lie in [0, 1), got {p}."
        )
    x = as_node(x)
    if not training or p == 0:
        return named(x, name)
    rng = backend.generator(seed)  # a Generator stays itself: drawn from at each run
    return named(x * dropout_mask(x, p, rng), name)
