"""Graph optimisation: passes that rewrite a graph into a smaller one with the same values.

A framework that sees the whole graph before running it (define-then-run) can improve
it first, as a compiler improves a program. Gradient graphs need it most: ``gradients()``
applies each op's rule mechanically, so it multiplies by ``ones_like(loss)``, sums
gradients down to shapes they already have, and builds ``cos(x)`` twice when ``sin(x)``
is used twice. Every pass here is a function from graph to graph:

* ``eliminate_dead_code``: stop computing values that nothing reads;
* ``fold_constants``: compute at compile time what depends only on constants;
* ``eliminate_common_subexpressions``: compute each distinct expression once;
* ``simplify_algebra``: ``x * 1 = x``, ``x + 0 = x``, ``-(-x) = x``, no-op reshapes, ...;
* ``optimize``: all of them, again and again, until nothing changes (a fixed point).

The convention, the same for every pass: ``new_outputs, report = a_pass(outputs)``.
``outputs`` is a Node or a list of Nodes; ``new_outputs`` is a list of Nodes computing
the same values, in the same order; ``report`` says how many nodes there were before and
after. The input graph is never changed: a node whose inputs change is copied, and
unchanged parts are shared, so a pass that finds nothing to do returns the very same
nodes. Leaves are never copied, so feeding a placeholder works on the new graph too.
New nodes are symbolic (no values): run them with ``ad.evaluate`` or an ``Executor``,
or let ``ad.Executor(outputs, optimize=True)`` do all of it. To write a pass of your
own, give ``rewrite`` a rule that replaces one node at a time, as the passes here do.

>>> import autodiff as ad
>>> x = ad.Variable("x", shape=(), dtype="float64")
>>> (dx,) = ad.gradients(x * x + ad.sin(x), [x])
>>> (small,), report = optimize([dx])
>>> report.nodes_before, report.nodes_after
(11, 4)
>>> float(ad.evaluate(small, {x: 0.0}))
1.0
"""

from __future__ import annotations

import html
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import backend
from ..core.backend import is_weak_scalar
from ..core.graph import Constant, Node, TensorLeaf, constant, deferred, find_topo_sort
from ..ops import elementwise as ew
from ..ops import shape as shape_ops
from ..ops.static_shapes import Signatures

Rule = Callable[[Node], "Node | None"]
Pass = Callable[[Sequence[Node]], "tuple[list[Node], PassReport]"]


# Reports -----------------------------------------------------------------------------------


@dataclass
class PassReport:
    """What one pass did: the number of nodes before and after it.

    >>> print(PassReport("fold_constants", 12, 9))
    fold_constants: 12 -> 9 nodes
    """

    name: str
    nodes_before: int
    nodes_after: int

    @property
    def removed(self) -> int:
        return self.nodes_before - self.nodes_after

    def __str__(self) -> str:
        return f"{self.name}: {self.nodes_before} -> {self.nodes_after} nodes"

    def _repr_html_(self) -> str:
        return _html_table([self._row()], ["pass", "nodes before", "nodes after"])

    def _row(self) -> list[str]:
        return [self.name, str(self.nodes_before), str(self.nodes_after)]


@dataclass
class OptimizeReport:
    """What ``optimize`` did: every pass it ran, round by round, and the totals.

    Printed, or shown in a notebook, it is a table with one row per pass run.
    """

    nodes_before: int
    nodes_after: int
    rounds: int = 0
    passes: list[PassReport] = field(default_factory=list)

    def _rows(self) -> list[list[str]]:
        per_round = max(1, len(self.passes) // max(1, self.rounds))
        rows = [[str(1 + i // per_round), *p._row()] for i, p in enumerate(self.passes)]
        total = f"total, {self.rounds} round{'s' if self.rounds != 1 else ''}"
        return rows + [["", total, str(self.nodes_before), str(self.nodes_after)]]

    def __str__(self) -> str:
        rows = [["round", "pass", "nodes before", "nodes after"], *self._rows()]
        width = max(len(row[1]) for row in rows)
        return "\n".join(f"{a:>5}  {b:<{width}}  {c:>12}  {d:>11}" for a, b, c, d in rows)

    def _repr_html_(self) -> str:
        return _html_table(self._rows(), ["round", "pass", "nodes before", "nodes after"])


def _html_table(rows: list[list[str]], columns: list[str]) -> str:
    header = "<tr>" + "".join(f"<th>{name}</th>" for name in columns) + "</tr>"
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    return f"<table>{header}{body}</table>"


# The one loop every pass shares ----------------------------------------------------------------


def check_outputs(pass_name: str, outputs: Any) -> list[Node]:
    """``outputs`` (a Node, or a list or tuple of them) as a list, or a TypeError that
    names the pass: the first thing every graph rewrite does."""
    if isinstance(outputs, Node) or not isinstance(outputs, (list, tuple)):
        outputs = [outputs]
    for node in outputs:
        if not isinstance(node, Node):
            raise TypeError(
                f"{pass_name}: expected a Node or a list of Nodes, got {type(node).__name__}: "
                f"{node!r}. Pass the outputs of a graph built with autodiff ops."
            )
    return list(outputs)


def rewrite(pass_name: str, outputs: Any, rule: Rule) -> tuple[list[Node], PassReport]:
    """Rebuild the graph inputs first, letting ``rule`` replace each node.

    ``rule(node)`` sees a node whose inputs are already rewritten, and returns a node
    computing the same value, or None to keep it. A node whose inputs changed is copied.
    """
    outputs = check_outputs(pass_name, outputs)
    topo_order = find_topo_sort(outputs)
    new: dict[Node, Node] = {}
    with deferred():  # nodes made by rules stay symbolic, even when their inputs have values
        for node in topo_order:
            inputs = tuple(new[x] for x in node.inputs)
            current = node if inputs == node.inputs else copy_node(node, inputs)
            new[node] = rule(current) or current
    new_outputs = [new[node] for node in outputs]
    return new_outputs, PassReport(pass_name, len(topo_order), count_nodes(new_outputs))


def copy_node(node: Node, inputs: tuple[Node, ...]) -> Node:
    """``node``'s op, settings and name on new ``inputs``: a rewrite's copy."""
    return Node(node.op, inputs, dict(node.attrs), node.name)


def count_nodes(outputs: Sequence[Node]) -> int:
    """The number of nodes an Executor would visit to compute ``outputs``."""
    return len(find_topo_sort(outputs))


# Dead code -------------------------------------------------------------------------------------


def eliminate_dead_code(outputs: Node | Sequence[Node]) -> tuple[list[Node], PassReport]:
    """Stop computing values that no output reads.

    A graph is held by its outputs, so nodes they do not reach are gone already (Python
    frees them). What remains are nodes computed only for their *shape*: the gradient
    seed ``ones_like(loss)`` needs the shape of ``loss``, not the forward pass that
    computes it. Such shape-only inputs (``Op.shape_inputs``) are pointed at the earliest
    node known to have the same shape and dtype, often a leaf, so the rest goes unrun.

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> (y,), report = eliminate_dead_code([ad.zeros_like(ad.exp(ad.sin(x)))])
    >>> [n.op.name for n in ad.find_topo_sort([y])], report.removed
    (['placeholder', 'zeros_like'], 2)
    """
    signatures = Signatures()

    def rule(node: Node) -> Node | None:
        inputs = list(node.inputs)
        for i in node.op.shape_inputs:
            inputs[i] = _shape_source(inputs[i], signatures)
        return None if tuple(inputs) == node.inputs else copy_node(node, tuple(inputs))

    return rewrite("eliminate_dead_code", outputs, rule)


def _shape_source(node: Node, signatures: Signatures) -> Node:
    """The earliest node known to have the shape and dtype of ``node``."""
    target = signatures.of(node)
    while not node.op.is_leaf:
        for x in node.inputs:
            if signatures.of(x) == target:
                node = x
                break
        else:
            break
    return node


# Constant folding ------------------------------------------------------------------------------


def fold_constants(
    outputs: Node | Sequence[Node], *, fold_tensors: bool = False
) -> tuple[list[Node], PassReport]:
    """Compute now every node whose inputs are all constants, and make it a constant.

    Placeholders and tensors stay leaves, because a feed may give them other values:
    nothing that depends on them is folded. With ``fold_tensors=True`` tensors count as
    constants too (their current values are baked in; later feeds no longer reach them).

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> (y,), report = fold_constants([ad.constant(2.0) * ad.constant(3.0) * x])
    >>> y.inputs[0].op.name, y.inputs[0].value, str(report)
    ('constant', 6.0, 'fold_constants: 5 -> 3 nodes')
    """
    known = (Constant, TensorLeaf) if fold_tensors else (Constant,)

    def rule(node: Node) -> Node | None:
        if node.op.is_leaf or not all(isinstance(x.op, known) for x in node.inputs):
            return None
        try:
            value = node.op.run([x.value for x in node.inputs], node.attrs)
        except Exception:
            return None  # a node that fails keeps its error for when the graph runs
        return constant(value)

    return rewrite("fold_constants", outputs, rule)


# Common subexpressions -------------------------------------------------------------------------

SMALL_CONSTANT = 1024  # constants up to this many elements are compared by value
COMMUTATIVE = (ew.Add, ew.Multiply)  # a + b == b + a exactly, in floating point too


def eliminate_common_subexpressions(
    outputs: Node | Sequence[Node],
) -> tuple[list[Node], PassReport]:
    """Compute each distinct expression once.

    Two nodes are the same when they have the same op, the same attrs and the same
    inputs (after this pass: so whole repeated subgraphs merge, bottom up); constants are
    the same when their values are (dtype, shape and bytes, for small ones). Ops have no
    side effects, so one copy can serve every consumer.

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> (y,), report = eliminate_common_subexpressions([ad.sin(x) + ad.sin(x)])
    >>> y.inputs[0] is y.inputs[1], str(report)
    (True, 'eliminate_common_subexpressions: 4 -> 3 nodes')
    """
    seen: dict[Hashable, Node] = {}

    def rule(node: Node) -> Node | None:
        key = _expression_key(node)
        return None if key is None else seen.setdefault(key, node)

    return rewrite("eliminate_common_subexpressions", outputs, rule)


def _expression_key(node: Node) -> Hashable | None:
    """What makes ``node`` equal to another, or None when only itself is equal to it."""
    if node.op.is_leaf:
        return _constant_key(node.value) if isinstance(node.op, Constant) else None
    inputs = tuple(id(x) for x in node.inputs)  # inputs are canonical already
    if isinstance(node.op, COMMUTATIVE):
        inputs = tuple(sorted(inputs))
    attrs = tuple(sorted((name, type(v), v) for name, v in node.attrs.items()))
    key = (type(node.op), attrs, inputs)
    try:
        hash(key)
    except TypeError:  # an attr that cannot be compared cheaply (a list, an array)
        return None
    return key


def _constant_key(value: Any) -> Hashable | None:
    if is_weak_scalar(value):
        return ("number", type(value), repr(value))  # repr: 0.0 and -0.0 differ, nan == nan
    if value.size > SMALL_CONSTANT:
        return None
    data = backend.to_numpy(value).tobytes()
    return ("array", str(value.dtype), tuple(value.shape), backend.device_of(value), data)


# Algebraic simplification --------------------------------------------------------------------


def simplify_algebra(outputs: Node | Sequence[Node]) -> tuple[list[Node], PassReport]:
    """Apply algebraic identities that make the graph smaller.

    ``x * 1 = x``, ``x / 1 = x``, ``x + 0 = x``, ``x - 0 = x``, ``0 - x = -x``,
    ``x + (-y) = x - y``, ``-(-x) = x``, ``x ** 1 = x``, ``x * 0 = zeros`` (of the
    product's shape and dtype), reshapes and broadcasts to the shape a value already has
    are dropped, and reshaping ones gives ones. "1" and "0" are constants filled with
    that number, or ``ones_like`` / ``zeros_like`` nodes. An identity is used only when
    the result provably has the shape and dtype of the original (static_shapes.py): a
    float32 ``x`` times a float64 array of ones is float64, so it is kept.

    Floating point is not quite algebra: ``x * 0`` is nan, not 0, for an infinite or nan
    ``x`` (the pass assumes finite values, as compilers' fast-math modes do), and
    ``-0.0 + 0`` is ``0.0``, not ``-0.0``. Everything else here is exact.

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> (y,), report = simplify_algebra([-(-(x * 1 + 0))])
    >>> y is x
    True
    """
    facts = _Facts()

    def rule(node: Node) -> Node | None:
        for identity in IDENTITIES.get(type(node.op), ()):
            replacement = identity(node, facts)
            if replacement is not None:
                return replacement
        return None

    return rewrite("simplify_algebra", outputs, rule)


class _Facts:
    """What simplify_algebra knows about nodes without running them."""

    def __init__(self) -> None:
        self.signatures = Signatures()
        self._fills: dict[Node, float | None] = {}

    def same_signature(self, a: Node, b: Node) -> bool:
        return self.signatures.of(a) == self.signatures.of(b)

    def fill(self, node: Node) -> float | None:
        """The number every element of ``node`` equals, when known: 1 for ones_like, ..."""
        while isinstance(node.op, FILL_KEEPING):
            node = node.inputs[0]
        if isinstance(node.op, shape_ops.OnesLike):
            return 1.0
        if isinstance(node.op, shape_ops.ZerosLike):
            return 0.0
        if not isinstance(node.op, Constant):
            return None
        if node not in self._fills:  # checking a big constant takes a pass over it
            self._fills[node] = _uniform_value(node.value)
        return self._fills[node]


FILL_KEEPING = (
    shape_ops.Reshape,
    shape_ops.ReshapeLike,
    shape_ops.BroadcastTo,
    shape_ops.BroadcastLike,
    shape_ops.Transpose,
)


def _uniform_value(value: Any) -> float | None:
    if is_weak_scalar(value):
        return float(value)
    if value.dtype.kind not in "fiu" or value.size == 0:
        return None
    first = value.reshape(-1)[0]
    return float(first) if bool((value == first).all()) else None


def _zeros_shaped_like(node: Node, facts: _Facts) -> Node | None:
    """Zeros with the shape and dtype of ``node``, built without computing ``node``."""
    for x in node.inputs:
        if facts.same_signature(x, node):
            return x if facts.fill(x) == 0 else shape_ops.zeros_like(x)
    signature = facts.signatures.of(node)
    for x in node.inputs:  # a new constant: on the device of an array constant input
        if signature.is_static and isinstance(x.op, Constant) and not is_weak_scalar(x.value):
            xp = backend.namespace(x.value)
            return constant(xp.zeros(signature.shape, dtype=signature.dtype))
    return None


# Each identity: (node, facts) -> a replacement, or None when it does not apply.


def _drop_neutral(node: Node, facts: _Facts, neutral: int) -> Node | None:
    """The input that remains when the other is filled with ``neutral`` (and the
    result keeps that input's shape and dtype)."""
    a, b = node.inputs
    for x, other in ((a, b), (b, a)):
        if facts.fill(other) == neutral and facts.same_signature(x, node):
            return x
    return None


def times_one(node: Node, facts: _Facts) -> Node | None:
    """x * 1 = x and 1 * x = x."""
    return _drop_neutral(node, facts, 1)


def times_zero(node: Node, facts: _Facts) -> Node | None:
    """x * 0 = 0 * x = zeros (for finite x)."""
    if 0 in (facts.fill(node.inputs[0]), facts.fill(node.inputs[1])):
        return _zeros_shaped_like(node, facts)
    return None


def over_one(node: Node, facts: _Facts) -> Node | None:
    """x / 1 = x."""
    x, divisor = node.inputs
    return x if facts.fill(divisor) == 1 and facts.same_signature(x, node) else None


def plus_zero(node: Node, facts: _Facts) -> Node | None:
    """x + 0 = x and 0 + x = x."""
    return _drop_neutral(node, facts, 0)


def minus_zero(node: Node, facts: _Facts) -> Node | None:
    """x - 0 = x and 0 - x = -x."""
    a, b = node.inputs
    if facts.fill(b) == 0 and facts.same_signature(a, node):
        return a
    if facts.fill(a) == 0 and facts.same_signature(b, node):
        return ew.negative(b)
    return None


def plus_negative(node: Node, facts: _Facts) -> Node | None:
    """x + (-y) = x - y and (-x) + y = y - x."""
    a, b = node.inputs
    if isinstance(b.op, ew.Negative):
        return ew.subtract(a, b.inputs[0])
    if isinstance(a.op, ew.Negative):
        return ew.subtract(b, a.inputs[0])
    return None


def double_negative(node: Node, facts: _Facts) -> Node | None:
    """-(-x) = x, and -0 = 0."""
    (x,) = node.inputs
    if isinstance(x.op, ew.Negative):
        return x.inputs[0]
    return x if facts.fill(x) == 0 else None


def power_one(node: Node, facts: _Facts) -> Node | None:
    """x ** 1 = x."""
    exponent = node.attrs["exponent"]
    return node.inputs[0] if exponent == 1 and type(exponent) is not bool else None


def same_shape(node: Node, facts: _Facts) -> Node | None:
    """Reshaping or broadcasting x to the shape it has is x (sum_to_like too)."""
    if node.attrs.get("axis") is not None:  # a reduced axis: the shapes differ
        return None
    x = node.inputs[0]
    return x if facts.same_signature(x, node) else None


def unmoved_transpose(node: Node, facts: _Facts) -> Node | None:
    """Transposing with the identity permutation, or a vector, changes nothing."""
    shape, axes = facts.signatures.of(node.inputs[0]).shape, node.attrs["axes"]
    if axes is not None:
        return node.inputs[0] if list(axes) == list(range(len(axes))) else None
    return node.inputs[0] if isinstance(shape, tuple) and len(shape) <= 1 else None


def fill_like(node: Node, facts: _Facts) -> Node | None:
    """Reshaping or broadcasting ones gives ones (zeros: zeros), of the result's shape."""
    fill = facts.fill(node.inputs[0])
    if fill not in (0, 1) or (isinstance(node.op, shape_ops.SumToLike) and fill != 0):
        return None  # sums of ones are counts, not ones
    for x in node.inputs[1:]:
        if facts.same_signature(x, node):
            return shape_ops.ones_like(x) if fill == 1 else shape_ops.zeros_like(x)
    return None


IDENTITIES: dict[type, list[Callable[[Node, _Facts], Node | None]]] = {
    ew.Multiply: [times_one, times_zero],
    ew.Divide: [over_one],
    ew.Add: [plus_zero, plus_negative],
    ew.Subtract: [minus_zero],
    ew.Negative: [double_negative],
    ew.PowerScalar: [power_one],
    shape_ops.Reshape: [same_shape],
    shape_ops.BroadcastTo: [same_shape],
    shape_ops.ReshapeLike: [same_shape, fill_like],
    shape_ops.BroadcastLike: [same_shape, fill_like],
    shape_ops.SumToLike: [same_shape, fill_like],
    shape_ops.Transpose: [unmoved_transpose],
}


# All of them ---------------------------------------------------------------------------------

DEFAULT_PASSES: tuple[Pass, ...] = (
    fold_constants,
    simplify_algebra,
    eliminate_common_subexpressions,
    eliminate_dead_code,
)


def optimize(
    outputs: Node | Sequence[Node],
    passes: Sequence[Pass] | None = None,
    *,
    max_rounds: int = 10,
) -> tuple[list[Node], OptimizeReport]:
    """Run ``passes`` (default: all four) in rounds until a round changes nothing.

    One pass opens chances for another (folding makes constants that simplify; a
    simplification leaves duplicates to merge), so the rounds repeat to a fixed point:
    optimising the result again returns the very same nodes.

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> (y,), report = optimize([ad.sin(x) * (ad.constant(3.0) - 2) + ad.sin(x) * 0])
    >>> y.op.name, report.nodes_before, report.nodes_after
    ('sin', 10, 2)
    """
    outputs = check_outputs("optimize", outputs)
    passes = DEFAULT_PASSES if passes is None else tuple(passes)
    report = OptimizeReport(count_nodes(outputs), count_nodes(outputs))
    while report.rounds < max_rounds:
        report.rounds += 1
        before = outputs
        for a_pass in passes:
            outputs, pass_report = a_pass(outputs)
            report.passes.append(pass_report)
        if all(new is old for new, old in zip(outputs, before, strict=True)):
            break
    report.nodes_after = count_nodes(outputs)
    return outputs, report
