"""Losses: the coarse op at the end of a network.

``softmax_cross_entropy`` is one op (a "coarse" operator): its forward pass uses the
log-sum-exp trick and its gradient is the famous ``softmax(logits) - labels`` for rows
of labels that sum to 1 (in general ``softmax(logits) * sum(labels) - labels``). The
lecture compares it with the same loss composed of fine ops
(``-mean(sum(labels * log_softmax(logits), axis=-1))``).
"""

from __future__ import annotations

import functools

import numpy as np

from ..core.backend import check_on_device, device_of, is_floating, namespace
from ..core.errors import DomainError, DTypeError, ShapeError
from ..core.graph import Node, Op, Spec, named
from .reductions import count, log_softmax, logsumexp_values, softmax, sum
from .shape import shape_of
from .static_shapes import UNKNOWN, is_symbol, result_dtype, same


def check_labels(labels, logits):
    """Raise a readable error unless ``labels`` fit ``logits`` (indices or probabilities).

    On the GPU, class indices are checked on the device (no wait for the GPU): a device
    flag is returned, true if one is out of range, to make the result NaN, and the error
    is raised at the next read of a value by the host (``backend.check_on_device``).
    """
    classes = logits.shape[-1]
    if labels.dtype.kind in "iu":
        if labels.shape != logits.shape[:-1]:
            rows_shape = shape_of(logits)[:-1]
            raise ShapeError(
                f"softmax_cross_entropy: class-index labels of shape {shape_of(labels)} do "
                f"not match logits of shape {shape_of(logits)}: give one index per row, "
                f"shape {rows_shape}, or probabilities of shape {shape_of(logits)}."
            )
        if not labels.size:
            return None
        unsigned = labels.view(labels.dtype.str.replace("i", "u"))  # negatives: huge
        if device_of(labels) == "gpu":
            failed = (unsigned >= classes).any()
            check_on_device(failed, index_error(classes, GPU_FOUND))
            return failed
        if unsigned.max() >= classes:
            got = f"but got values from {int(labels.min())} to {int(labels.max())}"
            raise index_error(classes, got)
    elif labels.dtype.kind != "f":
        raise DTypeError(
            f"softmax_cross_entropy: labels must be integer class indices or float "
            f"probabilities, got dtype {labels.dtype}."
        )
    elif shape_of(labels) != shape_of(logits):
        raise ShapeError(
            f"softmax_cross_entropy: probability labels of shape {shape_of(labels)} do not "
            f"match logits of shape {shape_of(logits)}."
        )


GPU_FOUND = (
    "but a batch on the GPU had one outside (checked on the device, without waiting for it,"
    " and reported at the next read of a value: that batch's loss and gradient are NaN)"
)


def index_error(classes: int, got: str) -> DomainError:
    return DomainError(f"softmax_cross_entropy: class indices must lie in [0, {classes}), {got}.")


def in_range(labels, failed, logits):
    """Class indices to pick with; on the GPU (``failed``, see ``check_labels``) wrapped
    into range: the result is NaN if one was out, and an error is raised at the next read."""
    return labels if failed is None else labels % logits.shape[-1]


def rows_of(x):
    """``x`` as a 2-D array of rows, its last axis the classes (a view when it can be)."""
    return x.reshape(-1, x.shape[-1])


def row_sums(x):
    """Each row's sum of a 2-D array. On the CPU a product with a vector of ones: NumPy
    sums a short last axis slowly (85 us for 4096 rows of 10 here; 11 us this way). On
    the GPU one reduction kernel, which a CUDA graph can record (cuBLAS it cannot)."""
    if device_of(x) == "cpu":
        return x @ _ones(x.shape[1], x.dtype)
    return x.sum(axis=1)


@functools.lru_cache(maxsize=64)
def _ones(length: int, dtype) -> np.ndarray:
    ones = np.ones(length, dtype)
    ones.flags.writeable = False  # shared by every call
    return ones


# Per float dtype: how far below the max a value may lie for its exp to keep every bit
# (the exp stays above the square root of the smallest normal number).
_SPREAD = {t: -0.5 * np.log(np.finfo(t).tiny) for t in "efdg"}


def row_exps(z):
    """``exp(z - shift)``, its rows' sums and ``shift``, for ``z`` of shape (rows, classes).

    The log-sum-exp trick shifts each row by its max; NumPy takes the max of a short last
    axis slowly (183 us for 4096 rows of 10 here, against 3 us for the max of the whole
    array). So on the CPU, when no value lies so far below the whole array's max that
    its exp would lose bits, every row is shifted by that one max; else (and on the GPU,
    where the rows' maxima are one kernel) each row by its own. ``shift``: a number or
    one per row.
    """
    if device_of(z) == "cpu" and z.dtype.char in _SPREAD:
        top = z.max()
        if top - z.min() <= _SPREAD[z.dtype.char]:  # (False for an inf or a nan)
            exps = z - top
            np.exp(exps, out=exps)
            return exps, row_sums(exps), top
    return row_exps_each(z)


def row_exps_each(z):
    """``row_exps`` with each row shifted by its own max (an all -inf row by 0)."""
    xp = namespace(z)
    shift = z.max(axis=1)
    shift = xp.where(xp.isfinite(shift), shift, 0)
    exps = xp.exp(z - shift[:, None])
    return exps, row_sums(exps), shift


def one_hot_values(labels, logits):
    """Class probabilities from ``labels``: class indices become one-hot rows."""
    failed = check_labels(labels, logits)
    if labels.dtype.kind in "iu":
        xp = namespace(logits)
        probs = (labels[..., None] == xp.arange(logits.shape[-1])).astype(logits.dtype)
        return probs if failed is None else xp.where(failed, xp.nan, probs)
    return labels.astype(logits.dtype, copy=False)


class OneHot(Op):
    """Y = labels as class probabilities shaped like the logits (indices become one-hot).

    Probability labels pass through unchanged:  dLabels = dY.  Indices get no gradient.
    """

    name = "one_hot"
    integer_inputs = (0,)
    shape_inputs = (1,)

    def compute(self, labels, logits):
        return one_hot_values(labels, logits)

    def infer(self, labels, logits):
        # Probabilities already in the logits' dtype are passed on as they are.
        return Spec(logits.shape, logits.dtype, view=same(labels.dtype, logits.dtype))

    def gradient(self, node, output_grad):
        return [output_grad, None]

    def jvp(self, node, labels_dot, logits_dot):
        return labels_dot


def one_hot(labels, logits, *, name: str | None = None) -> Node:
    """``labels`` (class indices or probabilities) as probabilities shaped like ``logits``."""
    return OneHot.apply(labels, logits, name=name)


class SoftmaxCrossEntropy(Op):
    """L = -mean over rows of sum(P * log_softmax(Z), axis=-1), P = labels as probabilities;
    dZ = dL * (softmax(Z) * S - P) / rows,   dP = -dL * log_softmax(Z) / rows;
    L' = sum((softmax(Z) * S - P) * Z' - log_softmax(Z) * P') / rows,
    where S = sum(P, axis=-1, keepdims=True) is each row's label mass.

    Labels are class indices (shape Z.shape[:-1], never differentiated; then S = 1) or
    probabilities (Z's shape), whose rows need not sum to 1: a masked row of zeros adds
    nothing to the loss and gets no gradient.
    """

    name = "softmax_cross_entropy"
    integer_inputs = (1,)

    def compute(self, logits, labels):
        failed = check_labels(labels, logits)
        if logits.size == 0:
            return self.compute_empty(logits, labels)
        z, xp = rows_of(logits), namespace(logits)
        exps, sums, shift = row_exps(z)
        lse = xp.log(sums) + shift  # each row's log-sum-exp; log_softmax = z - lse
        if labels.dtype.kind in "iu":  # -log_softmax at each row's class: lse - z[class]
            picked = z[xp.arange(len(z)), in_range(labels, failed, z).reshape(-1)]
            loss = (lse - picked).sum() / len(z)
            loss = loss if failed is None else xp.where(failed, xp.nan, loss)
        else:  # sum(P * (lse - z)) row by row, in the dtype they meet in (no log_softmax).
            p = rows_of(labels).astype(xp.result_type(labels, z), copy=False)
            loss = (row_sums(p) * lse - xp.einsum("ij,ij->i", p, z)).sum() / len(z)
        _saved.clear()  # the latest only: nothing piles up
        _saved[id(loss)] = (loss, logits, labels, failed, exps, sums)
        return loss

    def compute_empty(self, logits, labels):  # the definition itself, for no logits
        rows, xp = logits.size // logits.shape[-1], namespace(logits)
        log_probs = logits - logsumexp_values(logits, -1, keepdims=True)
        if labels.dtype.kind in "iu":
            return -xp.take_along_axis(log_probs, labels[..., None], axis=-1).sum() / rows
        return -(labels * log_probs).sum() / rows

    def infer(self, logits, labels):
        if labels.dtype is None or is_symbol(labels.dtype):
            return Spec((), UNKNOWN)  # indices or probabilities: only the run will tell
        if is_floating(labels.dtype):  # probabilities meet the log-probabilities
            return Spec((), result_dtype(logits.dtype, labels.dtype))
        return Spec((), logits.dtype)  # class indices pick log-probabilities

    def gradient(self, node, output_grad):
        logits, labels = node.inputs
        d_labels = -log_softmax(logits) * (output_grad / row_count(logits))
        return [softmax_cross_entropy_gradient(logits, labels, output_grad, node), d_labels]

    def jvp(self, node, logits_dot, labels_dot):
        logits, labels = node.inputs
        tangent = sum(logits_adjoint(logits, labels) * logits_dot) / row_count(logits)
        if labels_dot is not None:
            tangent = tangent - sum(log_softmax(logits) * labels_dot) / row_count(logits)
        return tangent


class SoftmaxCrossEntropyGradient(Op):
    """dZ = (softmax(Z) * S - P) * dL / rows: the coarse op's gradient by its logits, as
    one op (P: labels as probabilities in Z's dtype; S = sum(P, axis=-1): 1 for indices).
    Its own derivatives, with Y = softmax(Z), c = dL / rows and G = d(dZ):
    d(Z) = Y * (H - sum(H * Y, axis=-1)), H = G * S * c;   d(P) = (sum(G * Y, axis=-1) - G) * c;
    d(dL) = sum(G * (Y * S - P)) / rows;   written with fine ops (second derivatives).

    It computes in few passes over memory (``row_exps``): the lesson of coarse ops.
    Its optional fourth input, the loss these logits gave, lets it take the exponentials
    the loss's forward pass computed, instead of computing them again (``_saved``).
    """

    name = "softmax_cross_entropy_gradient"
    integer_inputs = (1,)

    def compute(self, logits, labels, output_grad, loss=None):
        xp = namespace(logits)
        saved = _take_saved(loss, logits, labels)  # (its forward pass checked the labels)
        if saved is None:  # not handed the loss computed from these logits: compute
            failed = check_labels(labels, logits)
            if logits.size == 0:
                return xp.zeros_like(logits)
            exps, sums, _ = row_exps(rows_of(logits))
        else:
            failed, exps, sums = saved
        scale = output_grad / len(exps)  # dL / rows
        if labels.dtype.kind in "iu":  # softmax, minus 1 at each row's class; times scale
            exps *= (scale / sums)[:, None]
            exps[xp.arange(len(exps)), in_range(labels, failed, exps).reshape(-1)] -= scale
            exps = exps if failed is None else xp.where(failed, xp.nan, exps)
        else:
            p = rows_of(labels.astype(logits.dtype, copy=False))
            exps *= (row_sums(p) / sums)[:, None]
            exps -= p
            exps *= scale
        return exps.reshape(logits.shape)

    def infer(self, logits, labels, output_grad, loss=None):
        return Spec(logits.shape, logits.dtype)

    def gradient(self, node, output_grad):
        logits, labels, loss_grad = node.inputs[:3]  # (the loss: no gradient through it)
        probs, scale = softmax(logits), loss_grad / row_count(logits)
        mass = label_mass(logits, labels)
        weighted = output_grad * scale if mass is None else output_grad * (mass * scale)
        d_logits = probs * (weighted - sum(weighted * probs, axis=-1, keepdims=True))
        d_loss_grad = sum(output_grad * logits_adjoint(logits, labels)) / row_count(logits)
        d_labels = None
        if mass is not None:
            d_labels = (sum(output_grad * probs, axis=-1, keepdims=True) - output_grad) * scale
        return [d_logits, d_labels, d_loss_grad, None][: len(node.inputs)]

    def jvp(self, node, logits_dot, labels_dot, loss_grad_dot, loss_dot=None):
        logits, labels, loss_grad = node.inputs[:3]
        probs, scale = softmax(logits), loss_grad / row_count(logits)
        mass = label_mass(logits, labels)
        moved = probs * (logits_dot - sum(probs * logits_dot, axis=-1, keepdims=True))
        tangent = moved if mass is None else moved * mass
        if labels_dot is not None:
            tangent = tangent + probs * sum(labels_dot, axis=-1, keepdims=True) - labels_dot
        tangent = tangent * scale
        if loss_grad_dot is not None:
            tangent = tangent + logits_adjoint(logits, labels) * (loss_grad_dot / row_count(logits))
        return tangent


def softmax_cross_entropy_gradient(logits, labels, output_grad, loss=None, *, name=None) -> Node:
    """(softmax(logits) * S - P) * output_grad / rows: ``SoftmaxCrossEntropyGradient``.
    ``loss``, the ``softmax_cross_entropy`` node of these logits and labels: handed it,
    the op takes the exponentials that the loss's forward pass left (``_saved``)."""
    inputs = (logits, labels, output_grad) if loss is None else (logits, labels, output_grad, loss)
    return SoftmaxCrossEntropyGradient.apply(*inputs, name=name)


# The exponentials of the latest forward pass of softmax_cross_entropy, left for its
# gradient op (as PyTorch's backward reads what its forward saved): (loss, logits,
# labels, failed, exps, sums), by the loss value's id. The gradient op takes them, once,
# when it is handed that very loss value with those very logits and labels; any other
# computes its own. One at a time, so nothing piles up (dict.pop: atomic in threads).
_saved: dict[int, tuple] = {}


def _take_saved(loss, logits, labels) -> tuple | None:
    """(failed, exps, sums) that the forward pass of ``loss`` left, or None."""
    saved = None if loss is None else _saved.pop(id(loss), None)
    if saved is None or saved[0] is not loss or saved[1] is not logits or saved[2] is not labels:
        return None
    return saved[3:]


def row_count(logits: Node) -> Node:
    """The number of rows of ``logits`` (all axes but the last), as a node."""
    return count(logits) / count(logits, axis=-1)


def label_mass(logits: Node, labels: Node) -> Node | None:
    """S = sum(P, axis=-1, keepdims=True), each row's label mass; None for class indices
    (whose rows sum to 1). Labels of a dtype not known yet count as probabilities."""
    if labels.dtype is not None and not is_floating(labels.dtype):
        return None
    return sum(one_hot(labels, logits), axis=-1, keepdims=True)


def logits_adjoint(logits: Node, labels: Node) -> Node:
    """softmax(Z) * S - P, the summed loss's derivative by the logits, of fine ops."""
    mass = label_mass(logits, labels)
    probs = softmax(logits) if mass is None else softmax(logits) * mass
    return probs - one_hot(labels, logits)


def softmax_cross_entropy(logits, labels, *, name: str | None = None) -> Node:
    """Mean cross-entropy between softmax(logits) and labels, over all rows.

    ``labels`` are integer class indices of shape ``logits.shape[:-1]`` or float
    probabilities (one-hot or soft) of ``logits``' shape.

    >>> import autodiff as ad
    >>> logits = ad.tensor([[2.0, 0.0], [0.0, 2.0]])
    >>> round(float(ad.softmax_cross_entropy(logits, [0, 1]).value), 4)
    0.1269
    """
    return SoftmaxCrossEntropy.apply(logits, labels, name=name)


def softmax_cross_entropy_composed(logits, labels, *, name: str | None = None) -> Node:
    """The same loss built from fine-grained ops (more nodes, same value and gradient)."""
    return named(
        -sum(one_hot(labels, logits) * log_softmax(logits)) / row_count(logits),
        name,
    )
