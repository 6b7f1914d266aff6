"""Ops defined by cases: relu, maximum and minimum, abs, where, clip, and comparisons.

Their derivative is a choice: 1 on one side of a kink, 0 on the other, written with
``step`` (the Heaviside function, flat: no gradient of its own). At a tie, where the
kink is, a rule says what it gives (relu: 0, as PyTorch; max and min: half each).
Comparisons give booleans, which have no derivative at all.
"""

from __future__ import annotations

from ..core.backend import namespace
from ..core.backend import result_dtype as numpy_result_dtype
from ..core.errors import DomainError
from ..core.graph import Node, Spec
from .elementwise import Elementwise
from .static_shapes import broadcast_shapes, result_dtype


class Relu(Elementwise):
    """Y = max(X, 0);   dX = dY * step(X);   Y' = step(X) * X'  (step(0) = 0, as in PyTorch)."""

    def compute(self, x):
        return namespace(x).maximum(x, 0)

    def gradient(self, node, output_grad):
        return [output_grad * step(node.inputs[0])]

    def jvp(self, node, x_dot):
        return x_dot * step(node.inputs[0])


def relu(x, *, name: str | None = None) -> Node:
    """max(x, 0), elementwise."""
    return Relu.apply(x, name=name)


class Maximum(Elementwise):
    """Y = max(A, B);   dA = dY * step(A - B),  dB = dY * step(B - A)  (ties split the gradient)."""

    broadcasts = True

    def compute(self, a, b):
        return namespace(a, b).maximum(a, b)

    def gradient(self, node, output_grad):
        a, b = node.inputs
        return [output_grad * step(a - b, 0.5), output_grad * step(b - a, 0.5)]

    def jvp(self, node, a_dot, b_dot):
        a, b = node.inputs
        return a_dot * step(a - b, 0.5) + b_dot * step(b - a, 0.5)


def maximum(a, b, *, name: str | None = None) -> Node:
    """Elementwise maximum of a and b, broadcasting."""
    return Maximum.apply(a, b, name=name)


class Step(Elementwise):
    """Y = 1 where X > 0, 0 where X < 0, ``at_zero`` where X = 0;  flat: no gradient."""

    takes_numbers = False  # (its compute calls astype: a number comes as a 0-d array)

    def compute(self, x, at_zero):
        # A comparison is ~40x faster than heaviside on large arrays (ReLU's backward).
        y = (x > 0).astype(x.dtype)
        return y if at_zero == 0 else y + (x == 0).astype(x.dtype) * at_zero

    def gradient(self, node, output_grad):
        return [None]

    def jvp(self, node, x_dot):
        return None


def step(x, at_zero: float = 0.0, *, name: str | None = None) -> Node:
    """The Heaviside step function: 1 for x > 0, 0 for x < 0, ``at_zero`` at 0."""
    return Step.apply(x, at_zero=at_zero, name=name)


def _sign(x) -> Node:
    """-1, 0 or 1 by the sign of x, built from steps (0 at 0, as NumPy's sign); flat."""
    return step(x) - step(-x)


class Abs(Elementwise):
    """Y = |X|;   dX = dY * sign(X);   Y' = sign(X) * X'.

    At X = 0, where |X| has a kink, sign(0) = 0 (as NumPy's sign): the gradient there is 0.
    """

    def compute(self, x):
        return namespace(x).abs(x)

    def gradient(self, node, output_grad):
        return [output_grad * _sign(node.inputs[0])]

    def jvp(self, node, x_dot):
        return x_dot * _sign(node.inputs[0])


def abs(x, *, name: str | None = None) -> Node:  # noqa: A001 (NumPy's name; ad.abs, as np.abs)
    """|x|, elementwise (``abs(node)`` calls it too).

    >>> import autodiff as ad
    >>> ad.abs(ad.tensor([-2.0, 3.0])).value
    array([2., 3.])
    """
    return Abs.apply(x, name=name)


class Minimum(Elementwise):
    """Y = min(A, B);   dA = dY * step(B - A),  dB = dY * step(A - B)  (ties split the gradient).

    Where A = B each input gets half of dY, as in ``maximum``.
    """

    broadcasts = True

    def compute(self, a, b):
        return namespace(a, b).minimum(a, b)

    def gradient(self, node, output_grad):
        a, b = node.inputs
        return [output_grad * step(b - a, 0.5), output_grad * step(a - b, 0.5)]

    def jvp(self, node, a_dot, b_dot):
        a, b = node.inputs
        return a_dot * step(b - a, 0.5) + b_dot * step(a - b, 0.5)


def minimum(a, b, *, name: str | None = None) -> Node:
    """Elementwise minimum of a and b, broadcasting."""
    return Minimum.apply(a, b, name=name)


class Where(Elementwise):
    """Y = A where C is true, B elsewhere;   dA = where(C, dY, 0),  dB = where(C, 0, dY);
    Y' = where(C, A', B').

    C (a boolean array or Node, often a comparison such as ``x > 0``) only chooses: it
    is never differentiated. All three broadcast; the engine sums dA and dB back to the
    shapes of A and B.
    """

    broadcasts = True
    integer_inputs = (0,)  # the condition: booleans (any dtype; nonzero means true)

    def compute(self, condition, a, b):
        return namespace(condition, a, b).where(condition, a, b)

    def infer(self, condition, a, b):
        shape = broadcast_shapes(condition.shape, a.shape, b.shape)
        return Spec(shape, result_dtype(a.dtype, b.dtype))

    def gradient(self, node, output_grad):
        condition = node.inputs[0]
        return [None, where(condition, output_grad, 0.0), where(condition, 0.0, output_grad)]

    def jvp(self, node, condition_dot, a_dot, b_dot):
        return where(node.inputs[0], a_dot, b_dot)


def where(condition, a, b, *, name: str | None = None) -> Node:
    """a where ``condition`` holds, b elsewhere, broadcasting (as ``np.where``).

    >>> import autodiff as ad
    >>> x = ad.tensor([-2.0, 3.0])
    >>> ad.where(x > 0, x, 0.1 * x).value
    array([-0.2,  3. ])
    """
    return Where.apply(condition, a, b, name=name)


class Clip(Elementwise):
    """Y = min(max(X, lo), hi);   dX = dY * inside;   Y' = inside * X',
    inside = 1 where lo <= X <= hi, else 0.

    At a bound (X = lo or X = hi) the gradient is 1, as in PyTorch's clamp. ``lo`` and
    ``hi`` are Python numbers (or None: no bound on that side), not differentiated.
    """

    def compute(self, x, lo, hi):
        return namespace(x).clip(x, lo, hi)

    def gradient(self, node, output_grad):
        return [output_grad * _inside(node)]

    def jvp(self, node, x_dot):
        return x_dot * _inside(node)


def _inside(node: Node) -> Node | float:
    """1 where clip's input lies within [lo, hi] (bounds included), else 0."""
    x, lo, hi = node.inputs[0], node.attrs["lo"], node.attrs["hi"]
    inside: Node | float = 1.0
    if lo is not None:
        inside = step(x - lo, 1.0) * inside
    if hi is not None:
        inside = step(hi - x, 1.0) * inside
    return inside


def clip(x, lo: float | None, hi: float | None, *, name: str | None = None) -> Node:
    """x limited to [lo, hi] elementwise (None: no bound on that side), as ``np.clip``.

    >>> import autodiff as ad
    >>> ad.clip(ad.tensor([-2.0, 0.5, 3.0]), -1, 1).value
    array([-1. ,  0.5,  1. ])
    """
    if lo is not None and hi is not None and lo > hi:
        raise DomainError(f"clip: the lower bound {lo} is above the upper bound {hi}.")
    return Clip.apply(x, lo=lo, hi=hi, name=name)


class Comparison(Elementwise, register=False):
    """Y = (A op B), booleans;  not differentiable: piecewise constant, its derivative is 0
    wherever it has one, and booleans carry no gradient. The gradient rule raises an
    error saying so; the tangent is zero (None), so forward mode passes through a
    comparison used as ``where``'s condition. Inputs may be of any dtype.
    """

    broadcasts = True
    differentiable = False

    def compute(self, a, b):
        return getattr(namespace(a, b), self.ufunc)(a, b)

    def infer(self, a, b):
        return Spec(broadcast_shapes(a.shape, b.shape), BOOL)

    def gradient(self, node, output_grad):
        raise self.not_differentiable(node)

    def jvp(self, node, a_dot, b_dot):
        return None


BOOL = numpy_result_dtype("bool")  # NumPy's bool dtype, which CuPy shares


class Equal(Comparison):
    """Y = (A == B), booleans;  not differentiable (see Comparison)."""

    ufunc = "equal"


def equal(a, b, *, name: str | None = None) -> Node:
    """a == b elementwise, broadcasting: booleans. (``==`` on Nodes stays identity.)"""
    return Equal.apply(a, b, name=name)


class NotEqual(Comparison):
    """Y = (A != B), booleans;  not differentiable (see Comparison)."""

    name = "not_equal"
    ufunc = "not_equal"


def not_equal(a, b, *, name: str | None = None) -> Node:
    """a != b elementwise, broadcasting: booleans. (``!=`` on Nodes stays identity.)"""
    return NotEqual.apply(a, b, name=name)


class Less(Comparison):
    """Y = (A < B), booleans;  not differentiable (see Comparison)."""

    ufunc = "less"


def less(a, b, *, name: str | None = None) -> Node:
    """a < b elementwise, broadcasting: booleans (``a < b`` on Nodes calls it)."""
    return Less.apply(a, b, name=name)


class LessEqual(Comparison):
    """Y = (A <= B), booleans;  not differentiable (see Comparison)."""

    name = "less_equal"
    ufunc = "less_equal"


def less_equal(a, b, *, name: str | None = None) -> Node:
    """a <= b elementwise, broadcasting: booleans (``a <= b`` on Nodes calls it)."""
    return LessEqual.apply(a, b, name=name)


class Greater(Comparison):
    """Y = (A > B), booleans;  not differentiable (see Comparison)."""

    ufunc = "greater"


def greater(a, b, *, name: str | None = None) -> Node:
    """a > b elementwise, broadcasting: booleans (``a > b`` on Nodes calls it)."""
    return Greater.apply(a, b, name=name)


class GreaterEqual(Comparison):
    """Y = (A >= B), booleans;  not differentiable (see Comparison)."""

    name = "greater_equal"
    ufunc = "greater_equal"


def greater_equal(a, b, *, name: str | None = None) -> Node:
    """a >= b elementwise, broadcasting: booleans (``a >= b`` on Nodes calls it)."""
    return GreaterEqual.apply(a, b, name=name)
