"""Forward mode with dual numbers: carry each derivative along with its value.

A dual number u + u' eps has eps**2 = 0, so Taylor's formula stops after one term:
f(u + u' eps) = f(u) + f'(u) u' eps. Computing f on ``Dual(x, 1)`` therefore gives f(x)
and f'(x) in one pass, with no graph, no step size and no rounding trouble. Each
operator and function below is one line of calculus (the product rule, the chain rule).

The price shows in ``jacobian``: one pass gives one *column* (J v for one direction v),
so a function of n inputs needs n passes, where reverse mode needs one pass per
*output*. ``count_passes`` counts them, for the lecture's plot.

The classic example, f(x, y) = x**2 y + y + 2 at (3, 4):

>>> f = lambda x, y: x**2 * y + y + 2
>>> f(Dual(3.0, 1.0), Dual(4.0, 0.0))    # seed x: df/dx
Dual(value=42.0, tangent=24.0)
>>> f(Dual(3.0, 0.0), Dual(4.0, 1.0))    # seed y: df/dy
Dual(value=42.0, tangent=10.0)

Value and tangent may be NumPy arrays of one shape (vector forward mode): then one
pass gives J v for the direction v held in the tangents.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..core import backend


class Dual:
    """A value and its tangent (directional derivative), u + u' eps with eps**2 = 0.

    ``tangent`` defaults to 0 (a constant). For array values the tangent is broadcast
    to the value's shape and takes the value's dtype (float32 stays float32).
    Derivatives are real numbers, so integers are promoted explicitly: Python ints
    become floats and integer arrays float64 (an integer tangent would truncate 0.5 to 0).
    Python-float Duals compute as NumPy float64 does: log and 1/x at 0 give inf or nan
    with a RuntimeWarning, as array Duals do, not ZeroDivisionError.

    >>> x = Dual(2.0, 1.0)
    >>> x * x + 3 * x
    Dual(value=10.0, tangent=7.0)
    """

    __slots__ = ("value", "tangent")
    value: Any  # a Python float, or a NumPy or CuPy array
    tangent: Any  # the same kind as value

    def __init__(self, value: Any, tangent: Any = 0):
        if isinstance(value, Dual) or isinstance(tangent, Dual):
            raise TypeError(
                "Dual: a dual number of dual numbers needs tagged perturbations to keep "
                "nested derivatives apart, which this module does not do. For higher "
                "derivatives use the engine: ad.gradients of ad.gradients."
            )
        if backend.is_weak_scalar(value) and backend.is_weak_scalar(tangent):
            self.value, self.tangent = float(value), float(tangent)
        else:
            self.value = _floating_array(value)
            self.tangent = _tangent_like(self.value, tangent)

    # -- the rules of calculus, one operator each ---------------------------------------

    def __add__(self, other: Any) -> Dual:  # (u + v)' = u' + v'
        other = lift(other)
        return Dual(self.value + other.value, self.tangent + other.tangent)

    def __sub__(self, other: Any) -> Dual:  # (u - v)' = u' - v'
        other = lift(other)
        return Dual(self.value - other.value, self.tangent - other.tangent)

    def __mul__(self, other: Any) -> Dual:  # (u v)' = u' v + u v'
        other = lift(other)
        return Dual(
            self.value * other.value, self.tangent * other.value + self.value * other.tangent
        )

    def __truediv__(self, other: Any) -> Dual:  # (u / v)' = (u' v - u v') / v**2
        other = lift(other)
        return Dual(
            _divide(self.value, other.value),
            _divide(
                self.tangent * other.value - self.value * other.tangent, _power(other.value, 2)
            ),
        )

    def __pow__(self, other: Any) -> Dual:
        other = lift(other)
        if _is_zero(other.tangent):  # a constant exponent n: (u**n)' = n u**(n-1) u'
            n = other.value  # (the rule below would take log u: nan for u < 0)
            derivative = n * _power(self.value, _exponent_of_derivative(n))
            return Dual(_power(self.value, n), derivative * self.tangent)
        # (u**v)' = u**v (v' log u + v u' / u)
        value = _power(self.value, other.value)
        return Dual(
            value,
            value
            * (other.tangent * log(self.value) + _divide(other.value * self.tangent, self.value)),
        )

    def __matmul__(self, other: Any) -> Dual:  # (U V)' = U' V + U V'
        other = lift(other)
        return Dual(
            self.value @ other.value, self.tangent @ other.value + self.value @ other.tangent
        )

    def __neg__(self) -> Dual:
        return Dual(-self.value, -self.tangent)

    def __pos__(self) -> Dual:
        return self

    # Reflected forms: 2 * x, 1 / x, 2 ** x, ... turn the number into a constant Dual.
    def __radd__(self, other: Any) -> Dual:
        return lift(other) + self

    def __rsub__(self, other: Any) -> Dual:
        return lift(other) - self

    def __rmul__(self, other: Any) -> Dual:
        return lift(other) * self

    def __rtruediv__(self, other: Any) -> Dual:
        return lift(other) / self

    def __rpow__(self, other: Any) -> Dual:
        return lift(other) ** self

    def __rmatmul__(self, other: Any) -> Dual:
        return lift(other) @ self

    # NumPy hands `array * x`, `np.float64(2) ** x`, ... to us: do them with our rules.
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        rule = _NUMPY_OPERATORS.get(ufunc.__name__)
        if method != "__call__" or kwargs or rule is None:
            raise TypeError(_numpy_function_message(ufunc.__name__))
        return rule(*[lift(x) for x in inputs])

    # Comparisons look at values only: a branch in f is taken the same way for x and
    # for x + eps, which is why dual numbers differentiate programs, not just formulas.
    def __lt__(self, other: Any) -> Any:
        return self.value < lift(other).value

    def __le__(self, other: Any) -> Any:
        return self.value <= lift(other).value

    def __gt__(self, other: Any) -> Any:
        return self.value > lift(other).value

    def __ge__(self, other: Any) -> Any:
        return self.value >= lift(other).value

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        return self.value == lift(other).value

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        return self.value != lift(other).value

    # Equal values may carry different tangents: a Dual is no dictionary key.
    __hash__ = None  # type: ignore[assignment]

    # -- arrays ---------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(getattr(self.value, "shape", ()))

    def __len__(self) -> int:
        if self.shape == ():
            raise TypeError("Dual: len() of a scalar Dual; only array Duals have a length.")
        return len(self.value)

    def __bool__(self) -> bool:  # as the value: `if x:` takes the same branch for x + eps
        if self.shape != ():
            raise ValueError(
                f"Dual: the truth value of a Dual with shape {self.shape} is ambiguous; "
                f"reduce a comparison first, e.g. (x > 0).all() or (x > 0).any()."
            )
        return bool(self.value)

    def __getitem__(self, index: Any) -> Dual:
        return Dual(self.value[index], self.tangent[index])

    def sum(self, axis: Any = None) -> Dual:
        """Sum of the entries: the tangent is summed the same way."""
        if backend.is_weak_scalar(self.value) and axis is None:
            return self  # a number is its own sum
        value, tangent = backend.asarray(self.value), backend.asarray(self.tangent)
        return Dual(value.sum(axis=axis), tangent.sum(axis=axis))

    def __repr__(self) -> str:
        return f"Dual(value={_short(self.value)}, tangent={_short(self.tangent)})"


_NUMPY_OPERATORS: dict[str, Callable[..., Any]] = {
    "add": operator.add,
    "subtract": operator.sub,
    "multiply": operator.mul,
    "divide": operator.truediv,
    "power": operator.pow,
    "matmul": operator.matmul,
    "negative": operator.neg,
    "positive": operator.pos,
    "less": operator.lt,
    "less_equal": operator.le,
    "greater": operator.gt,
    "greater_equal": operator.ge,
    "equal": operator.eq,
    "not_equal": operator.ne,
}
_FUNCTIONS = ("sin", "cos", "tan", "exp", "log", "sqrt", "tanh", "sigmoid")


def _numpy_function_message(name: str) -> str:
    """Why numpy.<name> refuses a Dual, and what to write instead."""
    if name in _NUMPY_OPERATORS:
        return (
            f"numpy.{name} with out= or where= (an in-place operator such as a += x) "
            f"cannot store a Dual in a NumPy array: write a = a + x instead."
        )
    instead = (
        f"use autodiff.forward.{name}(x), which applies the chain rule"
        if name in _FUNCTIONS
        else f"autodiff.forward has no {name}: write it with {', '.join(_FUNCTIONS)} and operators"
    )
    return (
        f"numpy.{name} cannot see the tangent inside a Dual: {instead}, or apply numpy "
        f"to the value alone: np.{name}(x.value)."
    )


def _floating_array(value: Any) -> Any:
    """value as a float (or complex) array; integers and bools become float64."""
    value = backend.asarray(value)
    if value.dtype.kind in "biu":
        return value.astype("float64")
    if value.dtype.kind not in "fc":
        raise TypeError(
            f"Dual: the value has dtype {value.dtype}, but a Dual holds numbers. To make a "
            f"list of Duals one Dual, stack them: Dual(np.stack(values), np.stack(tangents)) "
            f"(forward.jvp and forward.jacobian do this for a list that f returns)."
        )
    return value


def _tangent_like(value: Any, tangent: Any) -> Any:
    """tangent as an array of value's dtype, device and shape (broadcast to it)."""
    tangent = backend.asarray(tangent, dtype=value.dtype, device=backend.device_of(value))
    if tangent.shape == value.shape:
        return tangent
    try:
        return backend.namespace(value).broadcast_to(tangent, value.shape).copy()
    except ValueError:
        raise ValueError(
            f"Dual: tangent has shape {tuple(tangent.shape)} but value has shape "
            f"{tuple(value.shape)}; give one tangent per entry of the value (or a scalar, "
            f"used for every entry)."
        ) from None


def _short(x: Any) -> str:
    if backend.is_weak_scalar(x):
        return repr(x)
    x = backend.to_numpy(x)
    return repr(x.item()) if x.ndim == 0 else repr(x)


def lift(x: Any) -> Dual:
    """``x`` as a Dual: a constant (tangent 0) unless it already is one."""
    return x if isinstance(x, Dual) else Dual(x, 0)


# Python floats would raise ZeroDivisionError at 1/0.0 and OverflowError at 10.0**400, and
# give a complex number for (-8.0)**(1/3). A Python-number Dual computes as NumPy float64
# scalars do, like an array Dual: inf or nan, with NumPy's RuntimeWarning.


def _divide(a: Any, b: Any) -> Any:
    if backend.is_weak_scalar(a) and backend.is_weak_scalar(b):
        return float(backend.asarray(a, dtype="float64") / b)
    return a / b


def _power(a: Any, b: Any) -> Any:
    if backend.is_weak_scalar(a) and backend.is_weak_scalar(b):
        return float(backend.asarray(a, dtype="float64") ** b)
    return a**b


def _is_zero(tangent: Any) -> bool:
    """True when every entry of tangent is 0: the number it belongs to is a constant."""
    if backend.is_weak_scalar(tangent):
        return tangent == 0
    return not bool(backend.namespace(tangent).any(tangent))


def _exponent_of_derivative(n: Any) -> Any:
    """n - 1, except 0 where n = 0: u**0 = 1 has derivative 0, even at u = 0, where
    n u**(n-1) would be 0 * inf = nan."""
    if backend.is_weak_scalar(n):
        return 0.0 if n == 0 else n - 1
    return backend.namespace(n).where(n == 0, 0, n - 1)


def _numeric(name: str, x: Any) -> Any:
    """The plain function on a number or an array, a Python float for a Python number."""
    result = getattr(backend.namespace(x), name)(x)
    return float(result) if backend.is_weak_scalar(x) else result


# -- functions: value and chain rule, f(u + u' eps) = f(u) + f'(u) u' eps ------------------


def sin(x: Any) -> Any:
    """sin(u)' = cos(u) u'"""
    if isinstance(x, Dual):
        return Dual(sin(x.value), cos(x.value) * x.tangent)
    return _numeric("sin", x)


def cos(x: Any) -> Any:
    """cos(u)' = -sin(u) u'"""
    if isinstance(x, Dual):
        return Dual(cos(x.value), -sin(x.value) * x.tangent)
    return _numeric("cos", x)


def tan(x: Any) -> Any:
    """tan(u)' = (1 + tan(u)**2) u'"""
    if isinstance(x, Dual):
        t = tan(x.value)
        return Dual(t, (1 + t * t) * x.tangent)
    return _numeric("tan", x)


def exp(x: Any) -> Any:
    """exp(u)' = exp(u) u'"""
    if isinstance(x, Dual):
        e = exp(x.value)
        return Dual(e, e * x.tangent)
    return _numeric("exp", x)


def log(x: Any) -> Any:
    """log(u)' = u' / u"""
    if isinstance(x, Dual):
        return Dual(log(x.value), _divide(x.tangent, x.value))
    return _numeric("log", x)


def sqrt(x: Any) -> Any:
    """sqrt(u)' = u' / (2 sqrt(u))"""
    if isinstance(x, Dual):
        s = sqrt(x.value)
        return Dual(s, _divide(x.tangent, 2 * s))
    return _numeric("sqrt", x)


def tanh(x: Any) -> Any:
    """tanh(u)' = (1 - tanh(u)**2) u'"""
    if isinstance(x, Dual):
        t = tanh(x.value)
        return Dual(t, (1 - t * t) * x.tangent)
    return _numeric("tanh", x)


def sigmoid(x: Any) -> Any:
    """sigmoid(u)' = sigmoid(u) (1 - sigmoid(u)) u'"""
    if isinstance(x, Dual):
        s = sigmoid(x.value)
        return Dual(s, s * (1 - s) * x.tangent)
    return 0.5 * (1 + tanh(0.5 * x))  # = 1 / (1 + exp(-x)), without overflow in exp


# -- derivatives of Python functions ------------------------------------------------------


class PassCounter:
    """Counts forward passes: calls of f on dual numbers made by this module."""

    def __init__(self) -> None:
        self.passes = 0

    def __repr__(self) -> str:
        return f"PassCounter(passes={self.passes})"


_active_counters: list[PassCounter] = []


@contextmanager
def count_passes() -> Iterator[PassCounter]:
    """Count the forward passes made inside the ``with`` block.

    >>> import numpy as np
    >>> with count_passes() as counter:
    ...     _ = jacobian(lambda v: v.sum() * v[0], np.ones(5))
    >>> counter.passes        # one pass per input: forward mode's cost
    5
    """
    counter = PassCounter()
    _active_counters.append(counter)
    try:
        yield counter
    finally:
        _active_counters.remove(counter)


def _forward_pass(f: Callable, x: Any, v: Any) -> Dual:
    for counter in _active_counters:
        counter.passes += 1
    return _one_dual(f(Dual(x, v)))


def _one_dual(out: Any) -> Dual:
    """f's result as one Dual. A list or tuple (or NumPy object array) of Duals and
    numbers of one shape is stacked along a new first axis, as np.stack would."""
    if getattr(getattr(out, "dtype", None), "kind", "") == "O":  # np.array of Duals
        out = out.tolist()
    if not isinstance(out, list | tuple):
        return lift(out)
    parts = [_one_dual(item) for item in out]
    shapes = sorted({part.shape for part in parts})
    if len(shapes) != 1:
        raise ValueError(
            f"forward.jvp: f returned a list of {len(parts)} results with shapes {shapes}; "
            f"to stack them into one output they need one shape. Return a single Dual, "
            f"or a list of Duals of equal shape."
        )
    values = [backend.asarray(part.value) for part in parts]
    tangents = [backend.asarray(part.tangent) for part in parts]
    xp = backend.namespace(*values)
    return Dual(xp.stack(values), xp.stack(tangents))


def jvp(f: Callable, x: Any, v: Any) -> tuple[Any, Any]:
    """``(f(x), J v)``: the value and the derivative of f at x in the direction v.

    f returns a Dual, or a list or tuple of Duals of one shape, which are stacked.

    >>> jvp(lambda v: v * v, [1.0, 2.0], [1.0, 0.0])
    (array([1., 4.]), array([2., 0.]))
    """
    if backend.is_weak_scalar(x) and backend.is_weak_scalar(v):
        out = _forward_pass(f, x, v)
    else:
        x = backend.asarray(x)
        x = x if x.dtype.kind in "fc" else x.astype("float64")
        v = backend.asarray(v, dtype=x.dtype)
        if v.shape != x.shape:
            raise ValueError(
                f"forward.jvp: direction v has shape {v.shape} but x has shape {x.shape}; "
                f"give one tangent per entry of x."
            )
        out = _forward_pass(f, x, v)
    return out.value, out.tangent


def derivative(f: Callable, x: Any) -> Any:
    """f'(x) in one forward pass, seeding the tangent with 1.

    For an array x and an elementwise f, every entry's derivative at once.

    >>> derivative(lambda x: x**3 + sin(x), 0.0)
    1.0
    """
    one = 1.0 if backend.is_weak_scalar(x) else backend.namespace(x).ones_like(x)
    return jvp(f, x, one)[1]


def jacobian(f: Callable, x: Any) -> Any:
    """The Jacobian of f at an array x, one forward pass (one column) per entry of x.

    The result has shape ``f(x).shape + x.shape``. With ``count_passes`` you can watch
    the cost grow with the number of inputs.

    >>> jacobian(lambda v: v[0] ** 2 * v[1] + v[1] + 2, [3.0, 4.0])
    array([24., 10.])
    """
    x = backend.asarray(x)
    x = x if x.dtype.kind in "fc" else x.astype("float64")
    xp = backend.namespace(x)
    columns = []
    for j in range(x.size):
        e_j = xp.zeros(x.size, dtype=x.dtype)
        e_j[j] = 1
        columns.append(backend.asarray(jvp(f, x, e_j.reshape(x.shape))[1]))
    if not columns:
        return xp.zeros(x.shape, dtype=x.dtype)
    return xp.stack(columns, axis=-1).reshape(columns[0].shape + x.shape)
