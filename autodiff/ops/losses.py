"""Losses: the coarse op at the end of a network.

``softmax_cross_entropy`` is one op (a "coarse" operator): its forward pass uses the
log-sum-exp trick and its gradient is the famous ``softmax(logits) - labels`` for rows
of labels that sum to 1 (in general ``softmax(logits) * sum(labels) - labels``). The
lecture compares it with the same loss composed of fine ops
(``-mean(sum(labels * log_softmax(logits), axis=-1))``).
"""

from __future__ import annotations

from ..backend import check_later, device_of, is_floating, namespace
from ..graph import DomainError, DTypeError, Node, Op, ShapeError, Spec, named
from ..static_shapes import UNKNOWN, is_symbol, result_dtype, same
from .reductions import count, log_softmax, logsumexp_values, softmax, sum
from .shape import shape_of


def check_labels(labels, logits):
    """Raise a readable error unless ``labels`` fit ``logits`` (indices or probabilities).

    On the GPU, class indices are checked on the device (no wait for the GPU): a device
    flag is returned, true if one is out of range, to make the result NaN, and the error
    is raised at the next read of a value by the host (``backend.check_later``).
    """
    classes, rows_shape = logits.shape[-1], shape_of(logits)[:-1]
    if labels.dtype.kind in "iu":
        if shape_of(labels) != rows_shape:
            raise ShapeError(
                f"softmax_cross_entropy: class-index labels of shape {shape_of(labels)} do "
                f"not match logits of shape {shape_of(logits)}: give one index per row, "
                f"shape {rows_shape}, or probabilities of shape {shape_of(logits)}."
            )
        if labels.size and device_of(labels) == "gpu":  # viewed unsigned: negatives are huge
            failed = (labels.view(labels.dtype.str.replace("i", "u")) >= classes).any()
            check_later(failed, index_error(classes, GPU_FOUND))
            return failed
        if labels.size and (labels.min() < 0 or labels.max() >= classes):
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
        rows, xp = logits.size // logits.shape[-1], namespace(logits)
        log_probs = logits - logsumexp_values(logits, -1, keepdims=True)
        if labels.dtype.kind in "iu":  # pick each row's log-probability of its class
            picked = xp.take_along_axis(log_probs, labels[..., None], axis=-1)
            if failed is not None:  # on the GPU (where indices wrap): NaN, an error later
                return xp.where(failed, xp.nan, -picked.sum() / rows)
            return -picked.sum() / rows
        return -(labels * log_probs).sum() / rows

    def infer(self, logits, labels):
        if labels.dtype is None or is_symbol(labels.dtype):
            return Spec((), UNKNOWN)  # indices or probabilities: only the run will tell
        if is_floating(labels.dtype):  # probabilities meet the log-probabilities
            return Spec((), result_dtype(logits.dtype, labels.dtype))
        return Spec((), logits.dtype)  # class indices pick log-probabilities

    def gradient(self, node, output_grad):
        logits, labels = node.inputs
        scale = output_grad / (count(logits) / count(logits, axis=-1))
        d_logits = logits_adjoint(logits, labels) * scale
        d_labels = -log_softmax(logits) * scale
        return [d_logits, d_labels]

    def jvp(self, node, logits_dot, labels_dot):
        logits, labels = node.inputs
        rows = count(logits) / count(logits, axis=-1)
        tangent = sum(logits_adjoint(logits, labels) * logits_dot) / rows
        if labels_dot is not None:
            tangent = tangent - sum(log_softmax(logits) * labels_dot) / rows
        return tangent


def logits_adjoint(logits: Node, labels: Node, *, name: str | None = None) -> Node:
    """softmax(Z) * S - P: the derivative of the summed loss by the logits, row by row.

    S, each row's label mass, is 1 for class indices, so they skip the row sum; for
    probabilities it is summed, since soft or masked rows need not sum to 1.
    """
    probs = one_hot(labels, logits)
    if labels.dtype is not None and not is_floating(labels.dtype):
        return named(softmax(logits) - probs, name)
    return named(softmax(logits) * sum(probs, axis=-1, keepdims=True) - probs, name)


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
        -sum(one_hot(labels, logits) * log_softmax(logits))
        / (count(logits) / count(logits, axis=-1)),
        name,
    )
