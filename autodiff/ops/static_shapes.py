"""Static shapes and dtypes: what a compiler knows about a value before running the graph.

A pass may replace ``x * 1`` by ``x`` only if the product has the shape and dtype of
``x``: multiplying by an array of ones of a bigger shape broadcasts ``x``, and
multiplying a float32 ``x`` by a float64 one upcasts it. So the passes (system/passes.py) first
*infer* each node's signature, its shape and dtype, from the leaves, one op at a time,
as shape inference does in TensorFlow or XLA. Each step is the op's own shape rule,
``Op.infer``, the one that memory planning (system/memory.py) runs on concrete shapes. Known are

* constants and tensors: their values' shapes and dtypes. A graph optimised with this
  knowledge is *specialised* to them: ``Executor(optimize=True)`` refuses a tensor fed
  with another shape or dtype;
* placeholders: what was declared. An axis declared ``None`` becomes a symbol, a ``Dim``
  ("axis 0 of x"), and an undeclared shape or dtype is represented by the node itself
  ("the shape of x"), so ``sin(x)`` is known to have the shape of ``x`` even when nobody
  knows what that is.

A shape rule passes such symbols on, and says ``UNKNOWN`` for an axis, a shape or a
dtype it cannot tell; ``Signatures`` then names it after the node ("axis 1 of y").
The helpers below (``same``, ``broadcast_shapes``, ``result_dtype``) are NumPy's rules
extended to symbols: two signatures that compare equal are equal in every run (for a
graph that runs without error); signatures that differ may still turn out equal.
Passes only act on equality.

It sits with the ops because their shape rules use these helpers, and ops made of
others (``conv2d``, ``batch_norm``) need a shape while the graph is built; the passes
(system/passes.py) and ``ad.gradients`` (system/gradients.py) read it from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core import backend
from ..core.graph import Node, Placeholder, Spec, find_topo_sort


class Unknown:
    """What a shape rule cannot tell before running: an axis, a shape or a dtype."""

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = Unknown()


@dataclass(frozen=True)
class Dim:
    """The length of axis ``axis`` of ``node``'s value: a symbol, unknown until it runs."""

    node: Node
    axis: int

    def __repr__(self) -> str:
        return f"{self.node.name}.shape[{self.axis}]"


def is_symbol(x: Any) -> bool:
    """True for a length, shape or dtype known only by name (a Dim, a Node, UNKNOWN)."""
    return isinstance(x, (Dim, Node, Unknown))


def has_rank(shape: Any) -> bool:
    """True when the number of axes is known (a tuple, possibly holding Dims)."""
    return isinstance(shape, tuple)


def is_static(shape: Any) -> bool:
    """True for a shape of plain numbers: no symbol anywhere."""
    return has_rank(shape) and not any(is_symbol(d) for d in shape)


def same(a: Any, b: Any) -> bool:
    """Whether two lengths, shapes or dtypes are provably equal.

    A Node stands for "whatever this node's shape (or dtype) is", None for the dtype of
    a Python number: each equals only itself. (NumPy would compare a dtype with a Node by
    reading the Node's .dtype, and finds ``np.dtype('float64') == None``.)

    >>> same((2, 3), (2, 3)), same(UNKNOWN, 3)
    (True, False)
    """
    if a is None or b is None or isinstance(a, (Node, Unknown)) or isinstance(b, (Node, Unknown)):
        return a is b
    return bool(a == b)


# NumPy's rules, extended to symbols -----------------------------------------------------------


def broadcast_shapes(*shapes: Any) -> Any:
    """The shape that values of these shapes broadcast to, as NumPy's rule says.

    Plain shapes go to NumPy (a ValueError if they do not fit). With symbols: equal
    lengths stay, 1 stretches, and a length n meets a symbol that must be n or 1.

    >>> broadcast_shapes((3, 1), (4,)), broadcast_shapes((UNKNOWN, 3), (1,))
    ((3, 4), (UNKNOWN, 3))
    """
    if all(is_static(shape) for shape in shapes):
        return backend.broadcast_shapes(*shapes)
    result = shapes[0]
    for shape in shapes[1:]:
        result = _broadcast_two(result, shape)
    return result


def _broadcast_two(a: Any, b: Any) -> Any:
    if same(a, b) or b == ():
        return a
    if a == ():
        return b
    if not (has_rank(a) and has_rank(b)):
        return UNKNOWN  # ranks unknown: nothing to line up
    ndim = max(len(a), len(b))
    a, b = (1,) * (ndim - len(a)) + a, (1,) * (ndim - len(b)) + b
    return tuple(_broadcast_dims(d, e) for d, e in zip(a, b, strict=True))


def _broadcast_dims(d: Any, e: Any) -> Any:
    if same(d, e) or e == 1:
        return d
    if d == 1:
        return e
    if not is_symbol(d) and not is_symbol(e):
        raise ValueError(f"cannot broadcast lengths {d} and {e}")
    if not is_symbol(d):
        return d  # e must be d or 1 for the op to run: either way the result is d
    if not is_symbol(e):
        return e
    return UNKNOWN


def result_dtype(*dtypes: Any) -> Any:
    """The dtype NumPy gives when combining these (NEP 50 promotion).

    None stands for a Python number, which takes the dtype of the array it meets; None
    if all are Python numbers. A symbol combined with another dtype is UNKNOWN.
    """
    strong = [d for d in dtypes if d is not None]
    if not strong:
        return None
    if all(same(d, strong[0]) for d in strong[1:]):
        return strong[0]
    if any(is_symbol(d) for d in strong):
        return UNKNOWN
    return backend.result_dtype(*strong)


# Signatures: the shape rules run over a graph -----------------------------------------------


@dataclass(frozen=True, eq=False)
class Signature:
    """A node's shape and dtype as far as they are known statically.

    ``shape``: a tuple of ints and ``Dim`` symbols, or a Node (the same shape as that
    node, rank unknown). ``dtype``: a dtype, None (a Python number), or a Node.

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
            and same(self.shape, other.shape)
            and same(self.dtype, other.dtype)
        )

    __hash__ = None  # type: ignore[assignment]  # equality is by meaning, not for dict keys

    @property
    def is_static(self) -> bool:
        """True when shape and dtype are fully known (plain ints and a real dtype)."""
        return is_static(self.shape) and self.dtype is not None and not is_symbol(self.dtype)


class Signatures:
    """The signature of every node asked about, inferred once, inputs first.

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> signatures = Signatures()
    >>> signatures.of(ad.cos(x) * x) == signatures.of(x)
    True
    """

    def __init__(self, fed_leaves: bool = False) -> None:
        self._known: dict[Node, Signature] = {}
        # True: any leaf holding an array may be fed another (an Executor's feed_dict
        # overrides any leaf), so only placeholders' declarations and Python numbers
        # are known.
        self.fed_leaves = fed_leaves

    def of(self, node: Node) -> Signature:
        if node not in self._known:  # infer the missing ones, iteratively (deep graphs)
            for n in find_topo_sort([node], descend=lambda n: n not in self._known):
                if n not in self._known:
                    self._known[n] = self._infer(n)
        return self._known[node]

    def _infer(self, node: Node) -> Signature:
        value = node.value
        if self.fed_leaves and node.op.is_leaf and not backend.is_weak_scalar(value):
            if not isinstance(node.op, Placeholder):
                return Signature(node, node)  # as an undeclared placeholder
        return infer(node, [self._known[x] for x in node.inputs])


def infer(node: Node, inputs: list[Signature]) -> Signature:
    """The signature of ``node`` from those of its inputs, by its op's shape rule."""
    if node.op.is_leaf:
        return leaf_signature(node)
    try:
        spec = node.op.infer(*[Spec(x.shape, x.dtype) for x in inputs], **node.attrs)
    except (NotImplementedError, ValueError, IndexError, ZeroDivisionError):
        # No rule, or inputs that do not fit (the graph fails when it runs): known to
        # equal only itself.
        return Signature(node, node)
    return named(spec, node)


def named(spec: Spec, node: Node) -> Signature:
    """``spec`` with what the rule could not tell named after ``node``."""
    shape = spec.shape
    if shape is UNKNOWN:
        shape = node
    elif has_rank(shape):
        shape = tuple(Dim(node, i) if d is UNKNOWN else d for i, d in enumerate(shape))
    # An op on Python numbers alone gives a number (x + 1) or a float64 scalar (exp):
    # not worth tracking which.
    dtype = node if spec.dtype is None or spec.dtype is UNKNOWN else spec.dtype
    return Signature(shape, dtype)


def leaf_signature(node: Node) -> Signature:
    if not isinstance(node.op, Placeholder) and node.value is not None:
        value = node.value
        if backend.is_weak_scalar(value):
            return Signature((), None)
        return Signature(tuple(value.shape), value.dtype)
    declared, dtype = node.attrs.get("shape"), node.attrs.get("dtype")
    if declared is None:
        return Signature(node, node if dtype is None else dtype)
    dims = tuple(Dim(node, i) if d is None else d for i, d in enumerate(declared))
    return Signature(dims, node if dtype is None else dtype)
