"""Losses: the coarse op at the end of a network.

``softmax_cross_entropy`` is one op (a "coarse" operator): its forward pass uses the
log-sum-exp trick and its gradient is the famous ``softmax(logits) - labels`` for rows
of labels that sum to 1 (in general ``softmax(logits) * sum(labels) - labels``). The
lecture compares it with the same loss composed of fine ops
(``-mean(sum(labels * log_softmax(logits), axis=-1))``).

The loss and its gradient both need ``softmax(logits)``. It is a node of its own that
both read, so a training step computes it once, and a drawing shows the loss and its
gradient reading the same node.
"""

from __future__ import annotations

import functools
from types import MappingProxyType

import numpy as np

from ..core.backend import check_on_device, device_of, is_floating, namespace
from ..core.errors import DomainError, DTypeError, ShapeError
from ..core.graph import Node, Op, Spec, as_node, named
from .reductions import count, log_softmax, logsumexp_values, row_sums, softmax, softmax_rows, sum
from .shape import shape_of
from .static_shapes import UNKNOWN, is_symbol, result_dtype, same


def check_labels(labels, logits):
    """Raise a readable error unless ``labels`` fit ``logits`` (indices or probabilities).

    On the GPU, class indices are checked on the device (no wait for the GPU): a device
    flag is returned, true if one is out of range, to make the result NaN, and the error
    is raised by ``backend.check_on_device``: at the next read of a value by the host,
    as ``import autodiff`` sets it up (system/backend.py).
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
        unsigned = labels.view(labels.dtype.char.upper())  # (int64 as uint64: negatives huge)
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


def at_labels(labels, failed, z):
    """Where each row's labelled class lies in ``z.reshape(-1)`` (``z``: rows of classes):
    row * classes + label. NumPy picks by one flat index three times as fast as by
    (row, class) pairs (65536 rows: 68 us against 184). On the GPU (``failed``: see
    ``check_labels``) the labels are wrapped into range: the result is NaN if one was
    out, and an error is raised at the next read."""
    rows, classes = z.shape
    labels = labels if failed is None else labels % classes
    xp = namespace(z)
    starts = _row_starts(rows, classes) if xp is np else xp.arange(0, rows * classes, classes)
    return xp.add(starts, labels.reshape(-1), dtype="int64")


@functools.lru_cache(maxsize=64)
def _row_starts(rows: int, classes: int) -> np.ndarray:
    """Where each row of a (rows, classes) array starts in its flat view: 0, classes, ...
    (kept: a training loop asks for the same every step). Read-only."""
    starts = np.arange(0, rows * classes, classes)
    starts.flags.writeable = False
    return starts


def rows_of(x):
    """``x`` as a 2-D array of rows, its last axis the classes (a view when it can be)."""
    return x if x.ndim == 2 else x.reshape(-1, x.shape[-1])


# Per float dtype: the smallest probability whose log keeps every bit of the
# log-sum-exp read off it (the square root of the smallest normal number). Read-only.
_CLEAR = MappingProxyType({t: float(np.sqrt(np.finfo(t).tiny)) for t in "efdg"})


def clear(p) -> bool:
    """Whether every probability in ``p`` keeps the bits of its log (at least ``_CLEAR``);
    asked on the CPU only (on the GPU the answer would wait for the device: False)."""
    return device_of(p) == "cpu" and p.min() >= _CLEAR.get(p.dtype.char, 1)


def row_logsumexp(z, probs):
    """Each row's log-sum-exp, read off its softmax: ``probs = exp(z - lse)``, so
    ``lse = z[k] - log(probs[k])`` at any class k whose probability is not rounded
    away. Column 0 where every row's is clear of that (checked on the CPU: the usual
    case), else each row's likeliest class (NumPy's argmax of short rows is slow)."""
    xp, first = namespace(z), probs[:, 0]
    if clear(first):
        return z[:, 0] - xp.log(first)
    at = at_labels(probs.argmax(axis=1), None, probs)
    return z.reshape(-1)[at] - xp.log(probs.reshape(-1)[at])


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
    nothing to the loss and gets no gradient. The third input is Y = softmax(Z): for
    class indices L = -mean(log(Y[class])) (while no such Y is rounded away), else each
    row's log-sum-exp is read off Y (``row_logsumexp``) and log_softmax(Z) = Z - lse.
    (Y gets no gradient: dZ above is the whole derivative by Z, through Y too.)
    """

    name = "softmax_cross_entropy"
    integer_inputs = (1,)

    def compute(self, logits, labels, probs):
        failed = check_labels(labels, logits)
        if logits.size == 0:
            return self.compute_empty(logits, labels)
        z, probs, xp = rows_of(logits), rows_of(probs), namespace(logits)
        if labels.dtype.kind in "iu":  # -log(softmax) at each row's class
            at = at_labels(labels, failed, z)
            picked = probs.reshape(-1)[at]
            if clear(picked):
                loss = -xp.log(picked).sum() / len(z)
            else:  # a probability rounded away: lse - z[class] keeps every bit
                loss = (row_logsumexp(z, probs) - z.reshape(-1)[at]).sum() / len(z)
            return loss if failed is None else xp.where(failed, xp.nan, loss)
        lse = row_logsumexp(z, probs)
        # sum(P * (lse - z)) row by row, in the dtype they meet in (no log_softmax): the
        # difference of two batch totals would lose more of a small loss (three times as
        # much in float32, seventy in float64: test_numerical_stability.py).
        p = rows_of(labels).astype(xp.result_type(labels, z), copy=False)
        return (row_sums(p) * lse - xp.einsum("ij,ij->i", p, z)).sum() / len(z)

    def compute_empty(self, logits, labels):  # the definition itself, for no logits
        rows, xp = logits.size // logits.shape[-1], namespace(logits)
        log_probs = logits - logsumexp_values(logits, -1, keepdims=True)
        if labels.dtype.kind in "iu":
            return -xp.take_along_axis(log_probs, labels[..., None], axis=-1).sum() / rows
        return -(labels * log_probs).sum() / rows

    def infer(self, logits, labels, probs):
        if labels.dtype is None or is_symbol(labels.dtype):
            return Spec((), UNKNOWN)  # indices or probabilities: only the run will tell
        if is_floating(labels.dtype):  # probabilities meet the log-probabilities
            return Spec((), result_dtype(logits.dtype, labels.dtype))
        return Spec((), logits.dtype)  # class indices pick log-probabilities

    def gradient(self, node, output_grad):
        logits, labels, probs = node.inputs
        d_labels = -log_softmax(logits) * (output_grad / row_count(logits))
        d_logits = softmax_cross_entropy_gradient(logits, labels, output_grad, probs)
        return [d_logits, d_labels, None]

    def jvp(self, node, logits_dot, labels_dot, probs_dot):
        logits, labels, _ = node.inputs  # (probs_dot: counted in logits_dot's term)
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

    It computes in few passes over memory: the lesson of coarse ops. Its optional fourth
    input, Y = softmax(Z), the node the loss read too, saves computing the softmax again
    (Y is read, never written: no gradient through it).
    """

    name = "softmax_cross_entropy_gradient"
    integer_inputs = (1,)

    def compute(self, logits, labels, output_grad, probs=None):
        return logits_gradient(logits, labels, output_grad, probs)

    def infer(self, logits, labels, output_grad, probs=None):
        return Spec(logits.shape, logits.dtype)

    def gradient(self, node, output_grad):
        logits, labels, loss_grad = node.inputs[:3]  # (the softmax: no gradient through it)
        probs, scale = softmax(logits), loss_grad / row_count(logits)
        mass = label_mass(logits, labels)
        weighted = output_grad * scale if mass is None else output_grad * (mass * scale)
        d_logits = probs * (weighted - sum(weighted * probs, axis=-1, keepdims=True))
        d_loss_grad = sum(output_grad * logits_adjoint(logits, labels)) / row_count(logits)
        d_labels = None
        if mass is not None:
            d_labels = (sum(output_grad * probs, axis=-1, keepdims=True) - output_grad) * scale
        return [d_logits, d_labels, d_loss_grad, None][: len(node.inputs)]

    def jvp(self, node, logits_dot, labels_dot, loss_grad_dot, probs_dot=None):
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


def logits_gradient(logits, labels, output_grad, probs=None, out=None, checked=False):
    """``SoftmaxCrossEntropyGradient``'s value: a new array, or written into ``out`` (an
    array of the logits' shape and dtype, which may be ``probs`` itself). ``checked``:
    the loss has checked these labels against these logits in the same run (compiled
    code knows: system/compiled.py), so on the CPU they are not checked again (on the
    GPU the check is the flag that makes a bad batch's gradient NaN)."""
    failed = None if checked and device_of(labels) == "cpu" else check_labels(labels, logits)
    xp = namespace(logits)
    if logits.size == 0:
        return xp.zeros_like(logits)
    # C-ordered, so that grad.reshape(-1) below is a view of grad, and writes into it.
    probs = xp.ascontiguousarray(softmax_rows(rows_of(logits)) if probs is None else rows_of(probs))
    out = None if out is None else xp.ascontiguousarray(rows_of(out))
    scale = output_grad / len(probs)  # dL / rows
    if labels.dtype.kind in "iu":  # softmax, minus 1 at each row's class; times scale
        grad = xp.multiply(probs, scale, out=out, dtype=probs.dtype)
        grad.reshape(-1)[at_labels(labels, failed, grad)] -= scale
        grad = grad if failed is None else xp.where(failed, xp.nan, grad)
    else:
        p = rows_of(labels.astype(logits.dtype, copy=False))
        mass = row_sums(p, keepdims=True)
        if device_of(p) == "cpu" and (mass == 1).all():  # (one-hot rows: a pass saved)
            grad = xp.subtract(probs, p, out=out)
        else:
            grad = xp.multiply(probs, mass, out=out)
            grad -= p
        grad *= scale
    return grad.reshape(logits.shape)


def softmax_cross_entropy_gradient(logits, labels, output_grad, probs=None, *, name=None) -> Node:
    """(softmax(logits) * S - P) * output_grad / rows: ``SoftmaxCrossEntropyGradient``.
    ``probs``, the ``softmax`` node of these logits: handed it, the op reads the softmax
    the loss read, instead of computing it again."""
    inputs = (logits, labels, output_grad) + (() if probs is None else (probs,))
    return SoftmaxCrossEntropyGradient.apply(*inputs, name=name)


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
    probabilities (one-hot or soft) of ``logits``' shape. Two nodes: ``softmax(logits)``,
    which the loss and its gradient both read, and the loss.

    >>> import autodiff as ad
    >>> logits = ad.tensor([[2.0, 0.0], [0.0, 2.0]])
    >>> round(float(ad.softmax_cross_entropy(logits, [0, 1]).value), 4)
    0.1269
    """
    logits, labels = as_node(logits), as_node(labels)  # (logits: one node, read by both)
    return SoftmaxCrossEntropy.apply(logits, labels, softmax(logits), name=name)


def softmax_cross_entropy_composed(logits, labels, *, name: str | None = None) -> Node:
    """The same loss built from fine-grained ops (more nodes, same value and gradient)."""
    return named(
        -sum(one_hot(labels, logits) * log_softmax(logits)) / row_count(logits),
        name,
    )
