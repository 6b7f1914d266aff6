"""Hypothesis strategies shared by the tests.

``OP_CASES`` maps the name of every registered op to a strategy drawing a ``Case``: a
function of Nodes that applies the op, float64 arguments at which the op is smooth
(away from kinks such as relu's 0), and a NumPy reference for the forward value.
``tests/ops/test_every_op.py`` loops over ``Op.registry``: an op missing here fails the suite.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import autodiff as ad
from autodiff.ops.reductions import tie_weights
from autodiff.ops.shape import sum_to_shape


@dataclass
class Case:
    fn: Callable  # Nodes -> Node
    args: list  # float64 arrays, the differentiable arguments of fn
    reference: Callable  # NumPy arrays -> array, the expected forward value

    def __repr__(self):  # what hypothesis prints for a failing example
        shapes = [a.shape for a in self.args]
        return f"Case(args shapes={shapes}, args={self.args})"


def floats(lo=-2.0, hi=2.0):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


def away_from_zero(lo=0.2, hi=2.0):
    return st.one_of(floats(lo, hi), floats(-hi, -lo))


shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3)
nonscalar_shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3)
broadcasting_pairs = hnp.mutually_broadcastable_shapes(
    num_shapes=2, min_dims=0, max_dims=3, min_side=1, max_side=3
)


def arrays(shape, elements=None):
    return hnp.arrays(np.float64, shape, elements=elements if elements is not None else floats())


@st.composite
def unary(draw, op, reference, elements=None, shape=shapes):
    x = draw(arrays(draw(shape), elements))
    return Case(op, [x], reference)


@st.composite
def binary(draw, op, reference, a_elements=None, b_elements=None):
    a_shape, b_shape = draw(broadcasting_pairs).input_shapes
    a = draw(arrays(a_shape, a_elements))
    b = draw(arrays(b_shape, b_elements))
    return Case(op, [a, b], reference)


@st.composite
def reduction_axis(draw, ndim):
    """None, one axis (maybe negative) or a tuple of distinct axes."""
    if ndim == 0:
        return None
    choice = draw(st.sampled_from(["none", "one", "several"]))
    if choice == "none":
        return None
    if choice == "one":
        return draw(st.integers(-ndim, ndim - 1))
    axes = draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True))
    return tuple(axes)


@st.composite
def reductions(draw, op, reference, elements=None, values=None):
    """``op(x, axis, keepdims)`` cases; ``values(shape)``, a strategy, draws x if given."""
    x = draw(values(draw(shapes)) if values else arrays(draw(shapes), elements))
    axis = draw(reduction_axis(x.ndim))
    keepdims = draw(st.booleans())
    return Case(
        lambda a: op(a, axis=axis, keepdims=keepdims),
        [x],
        lambda a: reference(a, axis=axis, keepdims=keepdims),
    )


@st.composite
def distinct_arrays(draw, shape):
    """Arrays whose elements differ by at least 0.25 (max's gradient check needs no ties
    within a finite-difference step of each other)."""
    size = int(np.prod(shape))
    order = draw(st.permutations(range(size)))
    return (np.asarray(order, dtype=np.float64).reshape(shape) - size / 2) / 4


def extrema(op, reference):
    """max / min cases: distinct elements, any axis, keepdims or not."""
    return reductions(op, reference, values=distinct_arrays)


@st.composite
def ties(draw):
    """tie_weights(x, max(x)): 1 where each slice's max is, 0 elsewhere. Distinct elements,
    since a tie would make the finite differences jump (tests/ops/test_reductions.py
    checks ties)."""
    x = draw(distinct_arrays(draw(shapes)))
    axis = draw(reduction_axis(x.ndim))
    keepdims = draw(st.booleans())

    def reference(a):
        hits = (a == a.max(axis=axis, keepdims=True)).astype(a.dtype)
        return hits / hits.sum(axis=axis, keepdims=True)

    return Case(lambda a: tie_weights(a, ad.max(a, axis, keepdims), axis, keepdims), [x], reference)


@st.composite
def arg_extrema(draw, op, reference):
    """argmax / argmin: integer output, not differentiable (Op.differentiable is False,
    so the gradient tests leave them out)."""
    x = draw(distinct_arrays(draw(shapes)))
    axis = draw(st.none() | st.integers(-x.ndim, x.ndim - 1)) if x.ndim else None
    return Case(lambda a: op(a, axis), [x], lambda a: reference(a, axis))


@st.composite
def image_geometry(draw):
    """An image shape (N, C, H, W) and an im2col geometry that fits it."""
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 1)), draw(st.integers(0, 1)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    smallest = [dilation[i] * (kernel[i] - 1) + 1 - 2 * padding[i] for i in (0, 1)]
    h = draw(st.integers(max(smallest[0], 1), 5))
    w = draw(st.integers(max(smallest[1], 1), 5))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 2)), h, w)
    return shape, dict(kernel=kernel, stride=stride, padding=padding, dilation=dilation)


def np_im2col(x, kernel, stride, padding, dilation):
    """The reference: a loop over output pixels, reading each patch."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    rows = []
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                patch = padded[b, :, i * sh : i * sh + dh * (kh - 1) + 1 : dh]
                patch = patch[:, :, j * sw : j * sw + dw * (kw - 1) + 1 : dw]
                rows.append(patch.reshape(-1))
    return np.asarray(rows).reshape(n * oh * ow, c * kh * kw)


def np_col2im(columns, shape, kernel, stride, padding, dilation):
    """The reference: the transpose of np_im2col, read off its matrix."""
    size = int(np.prod(shape))
    basis = np.eye(size).reshape(size, *shape)
    matrix = np.stack([np_im2col(e, kernel, stride, padding, dilation).ravel() for e in basis])
    return (matrix @ columns.ravel()).reshape(shape)


@st.composite
def im2cols(draw):
    shape, geometry = draw(image_geometry())
    x = draw(arrays(shape))
    return Case(lambda a: ad.im2col(a, **geometry), [x], lambda a: np_im2col(a, **geometry))


@st.composite
def col2ims(draw):
    shape, geometry = draw(image_geometry())
    like = ad.constant(np.zeros(shape))
    columns_shape = np_im2col(np.zeros(shape), **geometry).shape
    g = draw(arrays(columns_shape))
    return Case(
        lambda a: ad.col2im(a, like, **geometry),
        [g],
        lambda a: np_col2im(a, shape, **geometry),
    )


@st.composite
def normalizations(draw, op, reference):
    x = draw(arrays(draw(nonscalar_shapes)))
    axis = draw(st.integers(-x.ndim, x.ndim - 1))
    return Case(lambda a: op(a, axis=axis), [x], lambda a: reference(a, axis))


def np_logsumexp(x, axis=None, keepdims=False):
    return np.log(np.exp(x).sum(axis=axis, keepdims=keepdims))


def np_softmax(x, axis):
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


@st.composite
def bigger_shape(draw, shape):
    """A shape that ``shape`` broadcasts to: extra leading axes, size-1 axes stretched."""
    leading = draw(st.lists(st.integers(1, 3), max_size=2))
    stretched = [draw(st.integers(1, 3)) if d == 1 else d for d in shape]
    return tuple(leading) + tuple(stretched)


@st.composite
def transposes(draw):
    x = draw(arrays(draw(shapes)))
    axes = draw(st.none() | st.permutations(range(x.ndim)).map(tuple))
    return Case(lambda a: ad.transpose(a, axes), [x], lambda a: np.transpose(a, axes))


@st.composite
def reshapes(draw):
    x = draw(arrays(draw(shapes)))
    target = draw(st.sampled_from([(-1,), tuple(reversed(x.shape)), (1, *x.shape, 1)]))
    return Case(lambda a: ad.reshape(a, target), [x], lambda a: np.reshape(a, target))


@st.composite
def broadcasts_to(draw):
    x = draw(arrays(draw(shapes)))
    target = draw(bigger_shape(x.shape))
    return Case(lambda a: ad.broadcast_to(a, target), [x], lambda a: np.broadcast_to(a, target))


@st.composite
def sums_to_like(draw):
    small = draw(shapes)
    g = draw(arrays(draw(bigger_shape(small))))
    like = ad.constant(np.zeros(small))
    return Case(lambda a: ad.sum_to_like(a, like), [g], lambda a: sum_to_shape(a, small))


@st.composite
def broadcasts_like(draw):
    small = draw(shapes)
    big = draw(bigger_shape(small))
    like = ad.constant(np.zeros(big))
    g = draw(arrays(small))
    return Case(lambda a: ad.broadcast_like(a, like), [g], lambda a: np.broadcast_to(a, big))


@st.composite
def reduced_broadcasts_like(draw):
    """broadcast_like with ``axis``: g lacks the reduced axes of like (no keepdims)."""
    big = draw(nonscalar_shapes)
    axis = draw(reduction_axis(len(big)).filter(lambda a: a is not None))
    kept = np.sum(np.zeros(big), axis=axis).shape
    like = ad.constant(np.zeros(big))
    g = draw(arrays(kept))
    return Case(
        lambda a: ad.broadcast_like(a, like, axis),
        [g],
        lambda a: np.broadcast_to(np.expand_dims(a, axis), big),
    )


@st.composite
def reduced_sums_to_like(draw):
    big = draw(nonscalar_shapes)
    axis = draw(reduction_axis(len(big)).filter(lambda a: a is not None))
    like = ad.constant(np.zeros(np.sum(np.zeros(big), axis=axis).shape))
    g = draw(arrays(big))
    return Case(lambda a: ad.sum_to_like(a, like, axis), [g], lambda a: a.sum(axis=axis))


@st.composite
def reshapes_like(draw):
    x = draw(arrays(draw(shapes)))
    like = ad.constant(np.zeros((1, x.size)))
    return Case(lambda a: ad.reshape_like(a, like), [x], lambda a: a.reshape(1, -1))


@st.composite
def matmuls(draw):
    n, k, m = (draw(st.integers(1, 3)) for _ in range(3))
    trans_A, trans_B = draw(st.booleans()), draw(st.booleans())
    batch_a, batch_b = draw(
        hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, max_side=2)
    ).input_shapes
    a = draw(arrays(batch_a + ((k, n) if trans_A else (n, k))))
    b = draw(arrays(batch_b + ((m, k) if trans_B else (k, m))))

    def reference(a, b):
        return np.matmul(
            np.swapaxes(a, -1, -2) if trans_A else a, np.swapaxes(b, -1, -2) if trans_B else b
        )

    return Case(lambda x, y: ad.matmul(x, y, trans_A, trans_B), [a, b], reference)


@st.composite
def logits_and_labels(draw):
    rows_shape = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3))
    classes = draw(st.integers(2, 4))
    logits = draw(arrays(rows_shape + (classes,), floats(-3, 3)))
    indices = draw(hnp.arrays(np.int64, rows_shape, elements=st.integers(0, classes - 1)))
    weights = draw(arrays(rows_shape + (classes,), floats(0.1, 1.0)))
    probs = weights / weights.sum(axis=-1, keepdims=True)
    return logits, indices, probs


def np_cross_entropy(logits, probs):
    log_probs = logits - np_logsumexp(logits, axis=-1, keepdims=True)
    return -(probs * log_probs).sum() / (logits.size // logits.shape[-1])


@st.composite
def cross_entropies(draw):
    logits, indices, probs = draw(logits_and_labels())
    if draw(st.booleans()):  # class indices: differentiate the logits only
        one_hot = np.eye(logits.shape[-1])[indices]
        return Case(
            lambda z: ad.softmax_cross_entropy(z, indices),
            [logits],
            lambda z: np_cross_entropy(z, one_hot),
        )
    return Case(ad.softmax_cross_entropy, [logits, probs], np_cross_entropy)


def np_cross_entropy_gradient(logits, probs, loss_grad):
    """(softmax(Z) * S - P) * dL / rows, S the rows' label mass."""
    softmax = np_softmax(logits, axis=-1)
    mass = probs.sum(axis=-1, keepdims=True)
    return (softmax * mass - probs) * loss_grad / (logits.size // logits.shape[-1])


@st.composite
def cross_entropy_gradients(draw):
    logits, indices, probs = draw(logits_and_labels())
    loss_grad = draw(arrays((), floats(0.2, 2.0)))
    gradient = ad.ops.losses.softmax_cross_entropy_gradient
    # Handed the softmax of these logits (the loss's node), the op reads it; else it
    # computes its own.
    handed = draw(st.booleans())
    softmax_of = ad.softmax if handed else (lambda z: None)
    if draw(st.booleans()):  # class indices: differentiate the logits and dL
        one_hot = np.eye(logits.shape[-1])[indices]
        return Case(
            lambda z, g: gradient(z, indices, g, softmax_of(z)),
            [logits, loss_grad],
            lambda z, g: np_cross_entropy_gradient(z, one_hot, g),
        )
    return Case(
        lambda z, p, g: gradient(z, p, g, softmax_of(z)),
        [logits, probs, loss_grad],
        np_cross_entropy_gradient,
    )


@st.composite
def one_hots(draw):
    logits, indices, probs = draw(logits_and_labels())
    if draw(st.booleans()):
        return Case(
            lambda z: ad.one_hot(indices, z), [logits], lambda z: np.eye(z.shape[-1])[indices]
        )
    # The logits only lend their shape and dtype: their gradient must come out zero.
    return Case(ad.one_hot, [probs, logits], lambda p, z: p)


@st.composite
def counts(draw):
    x = draw(arrays(draw(shapes)))
    axis = draw(reduction_axis(x.ndim))
    # A reduction over `axis` combines (all elements) / (elements left) of them.
    expected = np.asarray(x.size // np.sum(x, axis=axis).size, dtype=x.dtype)
    return Case(lambda a: ad.count(a, axis), [x], lambda a: expected)


@st.composite
def power_scalars(draw):
    exponent = draw(st.sampled_from([0, 1, 2, 3, -1, 0.5, -1.5, 2.5]))
    x = draw(arrays(draw(shapes), floats(0.5, 2.0)))
    return Case(lambda a: a**exponent, [x], lambda a: a**exponent)


@st.composite
def steps(draw):
    at_zero = draw(st.sampled_from([0.0, 0.5, 1.0]))
    x = draw(arrays(draw(shapes), away_from_zero()))
    return Case(lambda a: ad.step(a, at_zero), [x], lambda a: np.heaviside(a, at_zero))


FUSED_FORMULAS = [  # smooth where the arguments are drawn (b in [0.5, 2])
    lambda a, b: a * (1 - b * b),
    lambda a, b: ad.tanh(a) / b + ad.exp(-a * a) * ad.sigmoid(b),
    lambda a, b: ad.sqrt(b) ** 3 - ad.sin(a * b) + ad.log(b) * ad.cos(a),
    lambda a, b: -(a - b) / (1 + b**2),
]


@st.composite
def fused_ops(draw):
    formula = draw(st.sampled_from(FUSED_FORMULAS))
    a_shape, b_shape = draw(broadcasting_pairs).input_shapes
    a, b = draw(arrays(a_shape)), draw(arrays(b_shape, floats(0.5, 2.0)))

    def unfused(a, b):  # the reference: the same ops, one node each
        return formula(ad.tensor(a), ad.tensor(b)).value

    return Case(ad.fusion.fused(formula), [a, b], unfused)


grid = st.integers(-4, 4).map(lambda k: k / 2)  # maximum's inputs never tie:
off_grid = st.integers(-4, 4).map(lambda k: k / 2 + 0.25)  # they differ by >= 0.25
positive = floats(0.5, 3.0)


# -- more elementwise ops --------------------------------------------------------------------


@st.composite
def wheres(draw):
    """where(cond, a, b) with a boolean array cond; all three shapes broadcast."""
    c_shape, a_shape, b_shape = draw(
        hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, max_side=3)
    ).input_shapes
    cond = draw(hnp.arrays(np.bool_, c_shape))
    a, b = draw(arrays(a_shape)), draw(arrays(b_shape))
    return Case(lambda x, y: ad.where(cond, x, y), [a, b], lambda x, y: np.where(cond, x, y))


@st.composite
def wheres_by_comparison(draw):
    """where(a > b, a, b), the condition a Node; a and b never tie (a kink)."""
    a_shape, b_shape = draw(broadcasting_pairs).input_shapes
    a, b = draw(arrays(a_shape, off_grid)), draw(arrays(b_shape, grid))
    return Case(lambda x, y: ad.where(x > y, x, y), [a, b], np.maximum)


@st.composite
def clips(draw):
    """x on the quarter points, bounds on the half points: never at a bound (a kink)."""
    lo, hi = draw(
        st.sampled_from([(-1.0, 1.0), (-0.5, 0.5), (0.0, 0.0), (None, 0.5), (-0.5, None)])
    )
    x = draw(arrays(draw(shapes), off_grid))
    return Case(lambda a: ad.clip(a, lo, hi), [x], lambda a: np.clip(a, lo, hi))


def np_gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def comparisons(op, reference):
    """Inputs on a grid of halves, so that ties (equal values) happen."""
    return binary(op, reference, grid, grid)


OP_CASES = {
    "add": binary(ad.add, np.add),
    "subtract": binary(ad.subtract, np.subtract),
    "multiply": binary(ad.multiply, np.multiply),
    "divide": binary(ad.divide, np.divide, b_elements=away_from_zero(0.5)),
    "power": binary(ad.power, np.power, a_elements=floats(0.5, 2.0)),
    "power_scalar": power_scalars(),
    "negative": unary(ad.negative, np.negative),
    "exp": unary(ad.exp, np.exp),
    "log": unary(ad.log, np.log, positive),
    "sin": unary(ad.sin, np.sin),
    "cos": unary(ad.cos, np.cos),
    "tanh": unary(ad.tanh, np.tanh),
    "sigmoid": unary(ad.sigmoid, lambda x: 1 / (1 + np.exp(-x)), floats(-4, 4)),
    "relu": unary(ad.relu, lambda x: np.maximum(x, 0), away_from_zero()),
    "sqrt": unary(ad.sqrt, np.sqrt, positive),
    "maximum": binary(ad.maximum, np.maximum, off_grid, grid),
    "step": steps(),
    "ones_like": unary(ad.ones_like, np.ones_like),
    "zeros_like": unary(ad.zeros_like, np.zeros_like),
    "sum": reductions(ad.sum, np.sum),
    "count": counts(),
    "logsumexp": reductions(ad.logsumexp, np_logsumexp),
    "softmax": normalizations(ad.softmax, np_softmax),
    "log_softmax": normalizations(ad.log_softmax, lambda x, axis: np.log(np_softmax(x, axis))),
    "transpose": transposes(),
    "reshape": reshapes(),
    "broadcast_to": broadcasts_to(),
    "sum_to_like": st.one_of(sums_to_like(), reduced_sums_to_like()),
    "broadcast_like": st.one_of(broadcasts_like(), reduced_broadcasts_like()),
    "reshape_like": reshapes_like(),
    "matmul": matmuls(),
    "one_hot": one_hots(),
    "softmax_cross_entropy": cross_entropies(),
    "softmax_cross_entropy_gradient": cross_entropy_gradients(),
    "fused": fused_ops(),
    # more elementwise ops
    "abs": unary(ad.abs, np.abs, away_from_zero()),
    "minimum": binary(ad.minimum, np.minimum, off_grid, grid),
    "where": st.one_of(wheres(), wheres_by_comparison()),
    "clip": clips(),
    "log1p": unary(ad.log1p, np.log1p, floats(-0.5, 2.0)),
    "expm1": unary(ad.expm1, np.expm1),
    "gelu": unary(ad.gelu, np_gelu, floats(-3.0, 3.0)),
    "equal": comparisons(ad.equal, np.equal),
    "not_equal": comparisons(ad.not_equal, np.not_equal),
    "less": comparisons(ad.less, np.less),
    "less_equal": comparisons(ad.less_equal, np.less_equal),
    "greater": comparisons(ad.greater, np.greater),
    "greater_equal": comparisons(ad.greater_equal, np.greater_equal),
    # reductions, convolution, normalisation
    "max": extrema(ad.max, np.max),
    "min": extrema(ad.min, np.min),
    "tie_weights": ties(),
    "prod": reductions(ad.prod, np.prod, away_from_zero(0.5)),
    "argmax": arg_extrema(ad.argmax, np.argmax),
    "argmin": arg_extrema(ad.argmin, np.argmin),
    "im2col": im2cols(),
    "col2im": col2ims(),
}

# -- indexing, joining and axes ----------------------------------------------------------


@st.composite
def indices(draw, shape):
    """Any index NumPy takes for an array of ``shape``: basic (ints, slices with steps,
    None, ...), integer arrays (repeats included) or a boolean mask; one that picks at
    least one element (empty picks are tested on their own, in tests/ops/test_indexing.py)."""
    kind = draw(st.sampled_from(["basic", "integers", "mask"]))
    if kind == "basic":
        index = hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True)
    elif kind == "integers":
        index = hnp.integer_array_indices(shape, result_shape=hnp.array_shapes(max_dims=2))
    else:
        axes = draw(st.integers(1, len(shape)))
        index = hnp.arrays(np.bool_, shape[:axes])
    return draw(index.filter(lambda i: np.zeros(shape)[i].size > 0))


@st.composite
def getitems(draw):
    x = draw(arrays(draw(nonscalar_shapes)))
    index = draw(indices(x.shape))
    return Case(lambda a: a[index], [x], lambda a: a[index])


@st.composite
def scatters_like(draw):
    shape = draw(nonscalar_shapes)
    index = draw(indices(shape))
    like = ad.constant(np.zeros(shape))
    g = draw(arrays(np.zeros(shape)[index].shape))

    def reference(g):
        out = np.zeros(shape)
        np.add.at(out, ad.ops.indexing.normalize_index(index), g)
        return out

    return Case(lambda a: ad.scatter_like(a, like, index), [g], reference)


@st.composite
def concatenations(draw):
    shape = draw(nonscalar_shapes)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    xs = []
    for _ in range(draw(st.integers(1, 3))):
        part = list(shape)
        part[axis] = draw(st.integers(1, 3))
        xs.append(draw(arrays(tuple(part))))
    return Case(lambda *a: ad.concatenate(a, axis), xs, lambda *a: np.concatenate(a, axis=axis))


@st.composite
def split_parts(draw):
    shape = draw(nonscalar_shapes)
    axis = draw(st.integers(0, len(shape) - 1))
    kind = draw(st.sampled_from(["equal", "indices", "likes"]))
    if kind == "likes":  # as in concatenate's gradient: the parts are the likes' lengths
        lengths = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
        part = draw(st.integers(0, len(lengths) - 1))
        likes = []
        for n in lengths:
            like_shape = list(shape)
            like_shape[axis] = n
            likes.append(ad.constant(np.zeros(like_shape)))
        full = list(shape)
        full[axis] = sum(lengths)
        x = draw(arrays(tuple(full)))
        edges = np.cumsum(lengths)[:-1]
        return Case(
            lambda a: ad.split_part(a, *likes, axis=axis, part=part),
            [x],
            lambda a: np.split(a, edges, axis=axis)[part],
        )
    if kind == "equal":
        sections = draw(st.sampled_from([k for k in (1, 2, 3) if shape[axis] % k == 0]))
        count = sections
    else:
        sections = tuple(sorted(draw(st.lists(st.integers(0, shape[axis]), max_size=2))))
        count = len(sections) + 1
    part = draw(st.integers(0, count - 1))
    x = draw(arrays(shape))
    return Case(
        lambda a: ad.split(a, sections, axis)[part],
        [x],
        lambda a: np.split(a, sections, axis=axis)[part],
    )


@st.composite
def squeezes(draw):
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=2))
    ones = [i for i, n in enumerate(shape) if n == 1]
    axis = draw(st.none() | (st.sampled_from(ones) if ones else st.none()))
    x = draw(arrays(shape))
    return Case(lambda a: ad.squeeze(a, axis), [x], lambda a: np.squeeze(a, axis))


@st.composite
def expand_dimses(draw):
    x = draw(arrays(draw(shapes)))
    axis = draw(st.integers(-x.ndim - 1, x.ndim))
    return Case(lambda a: ad.expand_dims(a, axis), [x], lambda a: np.expand_dims(a, axis))


@st.composite
def flattens(draw):
    x = draw(arrays(draw(shapes)))
    start = draw(st.integers(0, max(x.ndim - 1, 0)))
    return Case(lambda a: ad.flatten(a, start), [x], lambda a: a.reshape(a.shape[:start] + (-1,)))


@st.composite
def place_parts(draw):
    case = draw(split_parts())
    (x,) = case.args
    node = case.fn(ad.constant(x))  # a split_part: place its part of a g back
    assume(node.value.size > 0)  # (empty parts: tests/ops/test_indexing.py)
    like = ad.constant(np.zeros(x.shape))
    g = draw(arrays(node.shape))
    attrs = node.attrs
    likes = node.inputs[1:]

    def reference(g):
        out = np.zeros(x.shape)
        out[ad.ops.indexing._slab(x.shape, [y.value for y in likes], **attrs)] = g
        return out

    return Case(lambda a: ad.place_part(a, like, *likes, **attrs), [g], reference)


@st.composite
def dropout_masks(draw):
    x = draw(arrays(draw(shapes)))
    p = draw(st.sampled_from([0.0, 0.25, 0.5, 0.9]))
    seed = draw(st.integers(0, 2**16))

    def reference(a):  # the draws of a Generator seeded alike
        uniform = np.random.default_rng(seed).random(a.shape)
        return (uniform >= p) / (1 - p)

    return Case(lambda a: ad.dropout_mask(a, p, np.random.default_rng(seed)), [x], reference)


OP_CASES.update(
    dropout_mask=dropout_masks(),
    getitem=getitems(),
    place_part=place_parts(),
    scatter_like=scatters_like(),
    concatenate=concatenations(),
    split_part=split_parts(),
    squeeze=squeezes(),
    expand_dims=expand_dimses(),
    flatten=flattens(),
)


# -- symbolic expressions -----------------------------------------------------------------


def expressions(with_functions=False, max_leaves=8, fractions=False, specials=()):
    """Random autodiff.symbolic expressions in x and y: + - * / neg, small integer powers,
    (``with_functions``) sin cos exp log tanh, (``fractions``) Fraction leaves, and the
    numbers in ``specials`` (such as inf, nan, 1e308) as leaves."""
    from autodiff import symbolic

    x, y = symbolic.Symbol("x"), symbolic.Symbol("y")
    leaves = st.sampled_from([x, y]) | st.integers(-3, 3).map(symbolic.Number)
    if fractions:
        leaves = leaves | st.fractions(-3, 3, max_denominator=5).map(symbolic.Number)
    if specials:
        leaves = leaves | st.sampled_from(specials).map(symbolic.Number)

    def extend(children):
        binary_ops = st.sampled_from(["+", "-", "*", "/"])
        combined = st.tuples(binary_ops, children, children).map(
            lambda t: {"+": t[1] + t[2], "-": t[1] - t[2], "*": t[1] * t[2], "/": t[1] / t[2]}[t[0]]
        )
        powers = st.tuples(children, st.integers(-2, 3)).map(lambda t: t[0] ** t[1])
        options = combined | powers | children.map(lambda e: -e)
        if with_functions:
            names = st.sampled_from(symbolic.FUNCTIONS)
            options = options | st.tuples(names, children).map(
                lambda t: symbolic.function(t[0], t[1])
            )
        return options

    return st.recursive(leaves, extend, max_leaves=max_leaves)


# -- devices ---------------------------------------------------------------------------------

HAS_GPU = "gpu" in ad.backend.available_devices()
NO_GPU = f"no GPU here: {ad.backend.gpu_problem()}"
GPU_MARKS = [pytest.mark.gpu, pytest.mark.skipif(not HAS_GPU, reason=NO_GPU)]
DEVICES = [pytest.param("cpu"), pytest.param("gpu", marks=GPU_MARKS)]


# The GPU against the CPU: cuBLAS and CuPy's reductions add in another order than NumPy,
# so sums that cancel near zero differ in their last bits: a relative and an absolute
# tolerance per float dtype (integers and booleans: exact).
GPU_TOLERANCE = {
    np.dtype("float64"): {"rtol": 1e-9, "atol": 1e-12},
    np.dtype("float32"): {"rtol": 2e-5, "atol": 1e-6},
    np.dtype("float16"): {"rtol": 2e-3, "atol": 1e-3},
}


def assert_same_on_gpu(on_gpu, on_cpu, what=""):
    """A GPU result (array or Node) equals the CPU's within GPU_TOLERANCE of its dtype."""
    on_gpu, on_cpu = (v.value if isinstance(v, ad.Node) else v for v in (on_gpu, on_cpu))
    got, want = ad.backend.to_numpy(on_gpu), np.asarray(on_cpu)
    assert got.dtype == want.dtype, f"{what}: {got.dtype} on the GPU, {want.dtype} on the CPU"
    tolerance = GPU_TOLERANCE.get(want.dtype, {"rtol": 0, "atol": 0})
    np.testing.assert_allclose(got, want, **tolerance, err_msg=what)


def requires_gpu(test):
    """Mark a test ``gpu`` (select with ``-m gpu``) and skip it, saying why, without one."""
    for mark in GPU_MARKS:
        test = mark(test)
    return test


# -- random graphs (memory planning) ----------------------------------------------------

UNARY = [ad.sin, ad.cos, ad.tanh, ad.sigmoid, ad.negative, ad.relu, ad.exp, ad.softmax]
BINARY = [ad.add, ad.subtract, ad.multiply, ad.maximum]


@dataclass
class Graph:
    outputs: list  # Nodes
    feed: dict  # placeholder -> float64 array
    nodes: list  # every node built, in creation order

    def __repr__(self):
        ops = [n.op.name for n in self.nodes if not n.op.is_leaf]
        return f"Graph(ops={ops}, feed shapes={[v.shape for v in self.feed.values()]})"


@st.composite
def graphs(draw, max_ops=12):
    """A random graph over a few placeholders: elementwise ops (with broadcasting and
    Python numbers), reductions, views (transpose, reshape), matmuls and softmax, with
    one to three of its nodes as outputs. Shapes are tracked so every op fits."""
    shapes = st.sampled_from([(3, 4), (4, 3), (1, 4), (4,), (3, 1), ()])
    nodes, shape, feed = [], {}, {}
    for i in range(draw(st.integers(1, 3))):
        x = ad.Variable(f"x{i}")
        shape[x] = draw(shapes)
        feed[x] = draw(arrays(shape[x]))
        nodes.append(x)
    for _ in range(draw(st.integers(1, max_ops))):
        a = draw(st.sampled_from(nodes))
        node, out_shape = _random_op(draw, a, nodes, shape)
        nodes.append(node)
        shape[node] = out_shape
    computed = [n for n in nodes if not n.op.is_leaf]
    extra = draw(st.lists(st.sampled_from(computed), max_size=2, unique=True))
    outputs = list(dict.fromkeys([computed[-1], *extra]))
    return Graph(outputs, feed, nodes)


def _random_op(draw, a, nodes, shape):
    kind = draw(st.sampled_from(["unary", "binary", "number", "reduce", "view", "matmul"]))
    sa = shape[a]
    if kind == "binary":
        partners = [b for b in nodes if _broadcasts(sa, shape[b])]
        b = draw(st.sampled_from(partners))
        return draw(st.sampled_from(BINARY))(a, b), np.broadcast_shapes(sa, shape[b])
    if kind == "number":
        return draw(st.sampled_from([lambda x: x * 2.0, lambda x: 1.0 - x]))(a), sa
    if kind == "reduce" and sa:
        keepdims = draw(st.booleans())
        return ad.sum(a, axis=-1, keepdims=keepdims), sa[:-1] + ((1,) if keepdims else ())
    if kind == "view" and len(sa) == 2:
        if draw(st.booleans()):
            return a.T, sa[::-1]
        return ad.reshape(ad.reshape(a, (-1,)), sa[::-1]), sa[::-1]
    if kind == "matmul" and len(sa) == 2:
        partners = [b for b in nodes if len(shape[b]) == 2 and shape[b][0] == sa[1]]
        if partners:
            b = draw(st.sampled_from(partners))
            return ad.matmul(a, b), (sa[0], shape[b][1])
    unary = draw(st.sampled_from(UNARY if sa else UNARY[:-1]))
    return unary(a), sa


def _broadcasts(a, b):
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


@st.composite
def chains(draw, max_layers=12):
    """A chain of layers h = f(h, w_k) on a vector, for checkpointing: returns the
    Graph (output: the sum of the last layer) and its leaves [x, w_1, ...]."""
    size = draw(st.integers(1, 5))
    x = ad.Variable("x")
    leaves, feed, h = [x], {x: draw(arrays((size,)))}, x
    for k in range(draw(st.integers(1, max_layers))):
        w = ad.Variable(f"w{k}")
        feed[w] = draw(arrays((size,)))
        leaves.append(w)
        layer = draw(st.sampled_from(["tanh(h * w)", "sin(h) + w", "h * w - h", "exp(-h * h)"]))
        h = {
            "tanh(h * w)": lambda h, w: ad.tanh(h * w),
            "sin(h) + w": lambda h, w: ad.sin(h) + w,
            "h * w - h": lambda h, w: h * w - h,
            "exp(-h * h)": lambda h, w: ad.exp(-h * h),
        }[layer](h, w)
    loss = h.sum()
    return Graph([loss], feed, ad.find_topo_sort([loss])), leaves


# -- random graphs (for the graph passes) ---------------------------------------------------

# Every leaf has one of these shapes, so any two values broadcast (to at most (2, 3)).
GRAPH_SHAPES = [(), (3,), (1, 3), (2, 1), (2, 3)]

GRAPH_UNARY = {
    "negative": ad.negative,
    "sin": ad.sin,
    "cos": ad.cos,
    "tanh": ad.tanh,
    "sigmoid": ad.sigmoid,
    "square": lambda a: a**2,
    "power 1": lambda a: a**1,
    "ones_like": ad.ones_like,
    "zeros_like": ad.zeros_like,
    "sum": ad.sum,
}
GRAPH_ARITHMETIC = {"add": ad.add, "subtract": ad.subtract, "multiply": ad.multiply}
GRAPH_SHAPING = {  # written as gradient graphs use them, so that the shapes always fit
    "sum_to_like": lambda a, b: ad.sum_to_like(a * b, a),
    "broadcast_like": lambda a, b: ad.broadcast_like(a, a + b),
    "reshape_like": lambda a, b: ad.reshape_like(a, a),
}
NUMBERS = [0, 1, 0.0, 1.0, -1.0, 2.0, 0.5]  # Python numbers, as in x * 1 or x + 0


class RandomGraph:
    def __init__(self, outputs, wrt, feed):
        self.outputs = outputs  # Nodes
        self.wrt = wrt  # the leaves that may be differentiated: placeholders and tensors
        self.feed = feed  # a value for every placeholder

    def __repr__(self):  # what hypothesis prints for a failing example
        order = ad.find_topo_sort(self.outputs)
        index = {node: i for i, node in enumerate(order)}
        lines = []
        for i, node in enumerate(order):
            inputs = ", ".join(f"%{index[x]}" for x in node.inputs)
            shown = node.value if node.op.name == "constant" else node.attrs or ""
            lines.append(f"%{i} = {node.op.name} {node.name}({inputs}) {shown}")
        return (
            "RandomGraph(\n  "
            + "\n  ".join(lines)
            + f"\n  outputs {[index[o] for o in self.outputs]})"
        )


@st.composite
def graph_leaf(draw, index, dtype):
    """A placeholder (shape declared, partly declared or not at all) or a tensor."""
    shape = draw(st.sampled_from(GRAPH_SHAPES))
    value = draw(arrays(shape, floats(-1, 1))).astype(dtype)
    kind = draw(st.sampled_from(["declared", "batch axis unknown", "undeclared", "tensor"]))
    name = f"x{index}"
    if kind == "tensor":
        return ad.tensor(value, name=name), None
    if kind == "declared":
        return ad.Variable(name, shape, dtype), value
    if kind == "batch axis unknown" and shape:
        return ad.Variable(name, (None, *shape[1:]), dtype), value
    return ad.Variable(name), value


@st.composite
def graph_constant(draw, dtype, mixed_dtypes):
    """A small array constant of zeros, ones or other numbers."""
    shape = draw(st.sampled_from(GRAPH_SHAPES))
    fill = draw(st.sampled_from(["zeros", "ones", "random"]))
    values = {"zeros": np.zeros(shape), "ones": np.ones(shape)}
    value = values.get(fill, draw(arrays(shape, floats(-1, 1))))
    dtypes = [dtype, dtype, "float64"] if mixed_dtypes else [dtype]
    return ad.constant(value.astype(draw(st.sampled_from(dtypes))))


@st.composite
def random_graphs(draw, dtype="float64", mixed_dtypes=True, max_ops=10):
    """A random expression DAG over 1-3 leaves, array constants and Python numbers.

    Nodes are reused (shared subexpressions), some expressions are built twice (for
    CSE), and only one or two nodes are outputs (the rest is dead). With
    ``mixed_dtypes``, some constants are float64 whatever ``dtype`` is, so that dtype
    promotion is exercised too.
    """
    leaves = [draw(graph_leaf(i, dtype)) for i in range(draw(st.integers(1, 3)))]
    nodes = [leaf for leaf, _ in leaves]
    nodes += [draw(graph_constant(dtype, mixed_dtypes)) for _ in range(draw(st.integers(0, 2)))]
    for _ in range(draw(st.integers(1, max_ops))):
        pick = st.sampled_from(nodes)
        action = draw(st.sampled_from(["unary", "arithmetic", "arithmetic", "shaping", "again"]))
        if action == "unary":
            nodes.append(GRAPH_UNARY[draw(st.sampled_from(sorted(GRAPH_UNARY)))](draw(pick)))
        elif action == "arithmetic":
            op = GRAPH_ARITHMETIC[draw(st.sampled_from(sorted(GRAPH_ARITHMETIC)))]
            a, b = draw(pick), draw(pick | st.sampled_from(NUMBERS))
            nodes.append(op(a, b) if draw(st.booleans()) else op(b, a))
        elif action == "shaping":
            op = GRAPH_SHAPING[draw(st.sampled_from(sorted(GRAPH_SHAPING)))]
            nodes.append(op(draw(pick), draw(pick)))
        else:  # the same expression again: a common subexpression
            node = draw(pick)
            if not node.op.is_leaf:
                nodes.append(type(node.op).apply(*node.inputs, **node.attrs))
    outputs = [nodes[-1]] + draw(st.lists(st.sampled_from(nodes), max_size=1))
    wrt = [leaf for leaf, _ in leaves]
    return RandomGraph(outputs, wrt, {leaf: v for leaf, v in leaves if v is not None})
