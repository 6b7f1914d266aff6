"""Layer norm and batch norm, written as compositions of ops, line by line as on the slide:

    mu    = mean(x)                  over the normalised axes
    var   = mean((x - mu) ** 2)
    x_hat = (x - mu) / sqrt(var + eps)
    y     = gamma * x_hat + beta

Why not one op each, as the frameworks ship them? Because here each line of the code is
a line of the slide, and the famous (and famously error-prone) hand-derived backward
pass of batch norm falls out of the pieces: reverse mode walks back through the four
lines, and the gradient graph can be drawn next to the forward one, and differentiated
again. A fused op would be faster; this is the version to learn from.

The two differ only in *which* axes they average over: layer norm over the features of
each example, batch norm over the examples (and pixels) of each channel.
"""

from __future__ import annotations

from ..core.errors import ShapeError
from ..core.graph import Node, as_node, named
from .conv import static_shape
from .elementwise import sqrt
from .reductions import mean
from .shape import reshape


def _normalize(x: Node, axis, eps: float) -> Node:
    """(x - mean) / sqrt(var + eps) over ``axis``: the first three lines of the slide."""
    centred = x - mean(x, axis, keepdims=True)
    variance = mean(centred * centred, axis, keepdims=True)
    return centred / sqrt(variance + eps)


def layer_norm(
    x, gamma=None, beta=None, axis=-1, eps: float = 1e-5, *, name: str | None = None
) -> Node:
    """Layer normalisation: each example normalised over its features (``axis``: the last
    by default; a tuple for several), then scaled by ``gamma`` and shifted by ``beta``
    (optional, shaped like the normalised axes), as torch.nn.functional.layer_norm.

    A composition of ops (mean, subtract, multiply, sqrt, divide): see the module's
    docstring for why.

    >>> import autodiff as ad
    >>> y = ad.layer_norm(ad.tensor([[1.0, 2.0, 3.0]]))
    >>> [round(v, 3) for v in y.value[0].tolist()]
    [-1.225, 0.0, 1.225]
    """
    x = as_node(x)
    axis = tuple(axis) if isinstance(axis, (list, tuple)) else axis
    y = _normalize(x, axis, eps)
    if gamma is not None:
        y = y * gamma
    if beta is not None:
        y = y + beta
    return named(y, name)


def batch_norm(
    x, gamma=None, beta=None, eps: float = 1e-5, channel_axis: int = 1, *, name: str | None = None
) -> Node:
    """Batch normalisation in training mode: each channel normalised with the mean and
    (biased) variance of the batch, over every axis but ``channel_axis`` ((N, C) or
    (N, C, H, W) inputs: axis 1), then scaled by ``gamma`` and shifted by ``beta``
    (optional, shape (C,)), as torch.nn.functional.batch_norm(training=True).

    A composition of ops: the gradient through the batch statistics, which a hand-written
    batch norm needs a page of algebra for, comes from the pieces. Running averages for
    evaluation belong to a layer that keeps state, not to this function.

    >>> import autodiff as ad
    >>> y = ad.batch_norm(ad.tensor([[1.0, 10.0], [3.0, 30.0]]))
    >>> [round(v, 3) for v in y.value[:, 1].tolist()]
    [-1.0, 1.0]
    """
    x = as_node(x)
    shape = static_shape(x)
    if shape is None:
        raise ShapeError(
            "batch_norm: x needs a known number of axes while the graph is built. Declare "
            "it, e.g. ad.Variable('x', shape=(None, C))."
        )
    ndim = len(shape)
    if ndim < 2:
        raise ShapeError(
            f"batch_norm: x must have a batch axis and a channel axis, got shape {shape}."
        )
    channel_axis %= ndim
    axes = tuple(a for a in range(ndim) if a != channel_axis)
    y = _normalize(x, axes, eps)
    # gamma and beta hold one number per channel: give them 1s on the other axes.
    per_channel = tuple(-1 if a == channel_axis else 1 for a in range(ndim))
    if gamma is not None:
        y = y * reshape(gamma, per_channel)
    if beta is not None:
        y = y + reshape(beta, per_channel)
    return named(y, name)
