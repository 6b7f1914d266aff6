"""Static shapes and dtypes: what a compiler knows about a value before running the graph.

A pass may replace ``x * 1`` by ``x`` only if the product has the shape and dtype of
``x``: multiplying by an array of ones of a bigger shape broadcasts ``x``, and
multiplying a float32 ``x`` by a float64 one upcasts it. So the passes (passes.py) first
*infer* each node's signature, its shape and dtype, from the leaves, one op at a time,
as shape inference does in TensorFlow or XLA. Known are

* constants and tensors: their values' shapes and dtypes. A graph optimised with this
  knowledge is *specialised* to them: ``Executor(optimize=True)`` refuses a tensor fed
  with another shape or dtype;
* placeholders: what was declared. An axis declared ``None`` becomes a symbol, a ``Dim``
  ("axis 0 of x"), and an undeclared shape or dtype is represented by the node itself
  ("the shape of x"), so ``sin(x)`` is known to have the shape of ``x`` even when nobody
  knows what that is.

Two signatures that compare equal are equal in every run (for a graph that runs without
error); signatures that differ may still turn out equal. Passes only act on equality.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import backend
from .graph import Node, Placeholder, find_topo_sort
from .ops import elementwise, linalg, losses, reductions, shape

WEAK = "Python number"  # the dtype of a weak scalar: it takes the dtype of the array it meets


@dataclass(frozen=True)
class Dim:
    """The length of axis ``axis`` of ``node``'s value: a symbol, unknown until it runs."""

    node: Node
    axis: int

    def __repr__(self) -> str:
        return f"{self.node.name}.shape[{self.axis}]"


def _same(a: Any, b: Any) -> bool:
    # A Node stands for "whatever this node's shape (or dtype) is": equal only to itself.
    # (NumPy would compare a dtype with a Node by reading the Node's .dtype.)
    if isinstance(a, Node) or isinstance(b, Node) or a is WEAK or b is WEAK:
        return a is b
    return a == b


@dataclass(frozen=True, eq=False)
class Signature:
    """A node's shape and dtype as far as they are known statically.

    ``shape``: a tuple of ints and ``Dim`` symbols, or a Node (the same shape as that
    node, rank unknown). ``dtype``: a dtype, ``WEAK`` (a Python number), or a Node.

    >>> import autodiff as ad
    >>> x = ad.Variable("x", shape=(None, 3), dtype="float32")
    >>> Signatures().of(ad.sin(x) + 1)
    Signature(shape=(x.shape[0], 3), dtype=dtype('float32'))
    """

    shape: Any
    dtype: Any

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Signature)
            and _same(self.shape, other.shape)
            and _same(self.dtype, other.dtype)
        )

    __hash__ = None  # type: ignore[assignment]  # equality is by meaning, not for dict keys

    @property
    def is_static(self) -> bool:
        """True when shape and dtype are fully known (plain ints and a real dtype)."""
        dims_known = isinstance(self.shape, tuple) and all(type(d) is int for d in self.shape)
        return dims_known and not isinstance(self.dtype, Node) and self.dtype is not WEAK


class Signatures:
    """The signature of every node asked about, inferred once, inputs first.

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> signatures = Signatures()
    >>> signatures.of(ad.cos(x) * x) == signatures.of(x)
    True
    """

    def __init__(self) -> None:
        self._known: dict[Node, Signature] = {}

    def of(self, node: Node) -> Signature:
        if node not in self._known:  # infer the missing ones, iteratively (deep graphs)
            for n in find_topo_sort([node], descend=lambda n: n not in self._known):
                if n not in self._known:
                    self._known[n] = infer(n, [self._known[x] for x in n.inputs])
        return self._known[node]


def infer(node: Node, inputs: list[Signature]) -> Signature:
    """The signature of ``node`` from those of its inputs, by its op's rule."""
    if node.op.is_leaf:
        return leaf_signature(node)
    rule = RULES.get(type(node.op))
    if rule is None:  # an op without a rule: known to equal only itself
        return Signature(node, node)
    return rule(node, *inputs)


def leaf_signature(node: Node) -> Signature:
    if not isinstance(node.op, Placeholder) and node.value is not None:
        value = node.value
        if backend.is_weak_scalar(value):
            return Signature((), WEAK)
        return Signature(tuple(value.shape), value.dtype)
    declared, dtype = node.attrs.get("shape"), node.attrs.get("dtype")
    if declared is None:
        return Signature(node, node if dtype is None else dtype)
    dims = tuple(Dim(node, i) if d is None else d for i, d in enumerate(declared))
    return Signature(dims, node if dtype is None else dtype)


# Combining shapes and dtypes ------------------------------------------------------------


def broadcast_dims(a: Any, b: Any, unknown: Dim) -> Any:
    """One axis of a broadcast: equal lengths stay, 1 stretches, a length n meets n or 1."""
    if _same(a, b) or b == 1:
        return a
    if a == 1:
        return b
    if type(a) is int and isinstance(b, Dim):
        return a  # b must be a or 1 for the op to run: either way the result is a
    if type(b) is int and isinstance(a, Dim):
        return b
    return unknown


def broadcast_shapes(a: Any, b: Any, node: Node) -> Any:
    """The shape of ``node``, which broadcasts shapes ``a`` and ``b`` as NumPy does."""
    if _same(a, b) or b == ():
        return a
    if a == ():
        return b
    if isinstance(a, Node) or isinstance(b, Node):
        return node  # ranks unknown: nothing to line up
    ndim = max(len(a), len(b))
    a, b = (1,) * (ndim - len(a)) + a, (1,) * (ndim - len(b)) + b
    return tuple(
        broadcast_dims(d, e, Dim(node, i)) for i, (d, e) in enumerate(zip(a, b, strict=True))
    )


def promote(a: Any, b: Any, node: Node) -> Any:
    """The dtype of ``node``, which combines dtypes ``a`` and ``b`` (NEP 50 promotion)."""
    if a is WEAK and b is WEAK:
        return node  # Python arithmetic or a NumPy scalar: let the constant folder decide
    if _same(a, b) or b is WEAK:
        return a  # a weak number takes the array's dtype
    if a is WEAK:
        return b
    if isinstance(a, Node) or isinstance(b, Node):
        return node
    return backend.result_dtype(a, b)


def _strong(dtype: Any, node: Node) -> Any:
    # NumPy functions turn a Python number into a float64 scalar: not worth tracking.
    return node if dtype is WEAK else dtype


# Rules, by op family ------------------------------------------------------------------------

Rule = Callable[..., Signature]


def same_as_input(node: Node, x: Signature, *rest: Signature) -> Signature:
    return Signature(x.shape, _strong(x.dtype, node))


def broadcasting(node: Node, a: Signature, b: Signature) -> Signature:
    return Signature(broadcast_shapes(a.shape, b.shape, node), promote(a.dtype, b.dtype, node))


def like_input(node: Node, x: Signature) -> Signature:
    return x  # ones_like(x), zeros_like(x): x's shape and dtype (ones_like(2.0) is 1.0)


def shaped_like_second(node: Node, g: Signature, like: Signature) -> Signature:
    return Signature(like.shape, _strong(g.dtype, node))  # sum_to_like, broadcast_like, ...


def one_hot(node: Node, labels: Signature, logits: Signature) -> Signature:
    return Signature(logits.shape, _strong(logits.dtype, node))


def count(node: Node, x: Signature) -> Signature:
    return Signature((), _strong(x.dtype, node))


def cross_entropy(node: Node, logits: Signature, labels: Signature) -> Signature:
    dtype = labels.dtype
    if isinstance(dtype, Node) or dtype is WEAK:
        return Signature((), node)
    if backend.is_floating(dtype):  # probabilities: combined with the log-probabilities
        return Signature((), promote(logits.dtype, dtype, node))
    return Signature((), _strong(logits.dtype, node))  # class indices


def reduction(node: Node, x: Signature) -> Signature:
    axis, keepdims = node.attrs["axis"], node.attrs["keepdims"]
    dtype = _strong(x.dtype, node)
    if isinstance(x.shape, Node) or (axis is not None and x.shape == ()):
        return Signature(() if axis is None and not keepdims else node, dtype)
    ndim = len(x.shape)
    axes = set(range(ndim)) if axis is None else {a % ndim for a in _as_tuple(axis)}
    if keepdims:
        return Signature(tuple(1 if i in axes else d for i, d in enumerate(x.shape)), dtype)
    return Signature(tuple(d for i, d in enumerate(x.shape) if i not in axes), dtype)


def transposed(node: Node, x: Signature) -> Signature:
    axes = node.attrs["axes"]
    if isinstance(x.shape, Node):
        return Signature(node, _strong(x.dtype, node))
    dims = x.shape[::-1] if axes is None else tuple(x.shape[a] for a in axes)
    return Signature(dims, _strong(x.dtype, node))


def reshaped(node: Node, x: Signature) -> Signature:
    target = node.attrs["shape"]
    if -1 in target:  # the missing length is the size over the others, if sizes are known
        known = isinstance(x.shape, tuple) and all(type(d) is int for d in x.shape)
        rest = _product(d for d in target if d != -1)
        missing = _product(x.shape) // rest if known and rest else Dim(node, target.index(-1))
        target = tuple(missing if d == -1 else d for d in target)
    return Signature(target, _strong(x.dtype, node))


def broadcast_to(node: Node, x: Signature) -> Signature:
    return Signature(node.attrs["shape"], _strong(x.dtype, node))


def matmul(node: Node, a: Signature, b: Signature) -> Signature:
    dtype = promote(a.dtype, b.dtype, node)
    if (
        isinstance(a.shape, Node)
        or isinstance(b.shape, Node)
        or min(len(a.shape), len(b.shape)) < 2
    ):
        return Signature(node, dtype)
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], node)
    rows = a.shape[-1] if node.attrs["trans_A"] else a.shape[-2]
    columns = b.shape[-2] if node.attrs["trans_B"] else b.shape[-1]
    return Signature((*batch, rows, columns), dtype)


def _as_tuple(axis: Any) -> tuple[int, ...]:
    return (axis,) if isinstance(axis, int) else tuple(axis)


def _product(numbers: Any) -> int:
    result = 1
    for n in numbers:
        result *= n
    return result


_e, _r, _s = elementwise, reductions, shape
RULES: dict[type, Rule] = {
    **dict.fromkeys(
        [_e.Negative, _e.Exp, _e.Log, _e.Sin, _e.Cos, _e.Tanh, _e.Sigmoid, _e.Relu, _e.Sqrt],
        same_as_input,
    ),
    **dict.fromkeys([_e.PowerScalar, _e.Step, _r.Softmax, _r.LogSoftmax], same_as_input),
    **dict.fromkeys(
        [_e.Add, _e.Subtract, _e.Multiply, _e.Divide, _e.Power, _e.Maximum], broadcasting
    ),
    _e.OnesLike: like_input,
    _e.ZerosLike: like_input,
    **dict.fromkeys([_s.SumToLike, _s.BroadcastLike, _s.ReshapeLike], shaped_like_second),
    _s.Transpose: transposed,
    _s.Reshape: reshaped,
    _s.BroadcastTo: broadcast_to,
    _r.Sum: reduction,
    _r.LogSumExp: reduction,
    _r.Count: count,
    linalg.MatMul: matmul,
    losses.OneHot: one_hot,
    losses.SoftmaxCrossEntropy: cross_entropy,
}
