"""Simplification of symbolic expressions: what turns diff's raw output into 2*x*y.

``diff`` (symbolic.py) applies the rules mechanically and leaves ``x**1*1`` and
``+ 0`` behind. ``simplify`` cleans up with sound rules only: wherever the original
expression has a finite value, the simplified one has the same value (exactly with
ints and Fractions, up to rounding with floats). It may have a value where the
original has none: x/x -> 1 at x = 0, and, with IEEE special values, x - x -> 0 and
0*x -> 0 at x = inf, where the original is nan.

Sums become coefficient * term lists, products coefficient * base**exponent lists, so
like terms and like factors meet and combine; numbers fold exactly (ints, Fractions),
and only to finite results: inf, nan and overflow (2.0**10000) stay written out.
Simplifying cannot undo expression swell: the derivative of a deep composition has no
short form to find.

>>> from autodiff.symbolic import Symbol
>>> x, y = Symbol("x"), Symbol("y")
>>> simplify(x * y * 2 + y * x - 3 * x * y)
0
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from .algebra import FUNCTIONS, Expr, Number, bottom_up, function, is_number, postorder


class _Keys:
    """Structural keys: two trees with the same shape and leaves get the same int."""

    def __init__(self) -> None:
        self.by_id: dict[int, int] = {}
        self.table: dict[tuple, int] = {}
        self.alive: list[Expr] = []  # keeps keyed nodes alive, so their ids stay theirs

    def __call__(self, expr: Expr) -> int:
        # A keyed node's subtree is keyed too: walking it again would make simplify cubic.
        for node in postorder(expr, skip=lambda node: id(node) in self.by_id):
            shape = (node.kind, node.payload, *[self.by_id[id(a)] for a in node.args])
            self.by_id[id(node)] = self.table.setdefault(shape, len(self.table))
            self.alive.append(node)
        return self.by_id[id(expr)]


def _is_finite(value: Any) -> bool:
    """True for ints, Fractions and floats other than inf and nan."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int | Fraction)


def _is_integer(value: Any) -> bool:
    return _is_finite(value) and value == int(value)


def _fold(operation: Callable[..., Any], *numbers: Any) -> Any:
    """operation(*numbers) when that is a finite number, else None: 1/0, inf, nan and
    overflow (2.0**10000) are not folded, and the expression keeps its numbers."""
    try:
        value = operation(*numbers)
    except (ArithmeticError, ValueError):  # ZeroDivisionError, OverflowError, math domain
        return None
    return value if _is_finite(value) else None


def _exact(value: Any) -> Any:
    return Fraction(value) if isinstance(value, int) else value


def _factors(e: Expr, keys: _Keys) -> tuple[Any, dict[int, list]]:
    """e as coefficient * product of base**exponent: (coefficient, {key: [base, exp]})."""
    coefficient: Any = 1
    factors: dict[int, list] = {}
    stack = [(e, 1)]
    while stack:
        node, sign = stack.pop(0)
        if node.kind == "*":
            stack[:0] = [(node.args[0], sign), (node.args[1], sign)]
        elif node.kind == "/":
            stack[:0] = [(node.args[0], sign), (node.args[1], -sign)]
        elif node.kind == "neg":
            coefficient, stack[:0] = -coefficient, [(node.args[0], sign)]
        elif node.kind == "number" and (folded := _times(coefficient, node, sign)) is not None:
            coefficient = folded
        else:
            base, exponent = node, _exact(sign)
            if node.kind == "**" and is_number(node.args[1]) and _is_finite(node.args[1].payload):
                base, exponent = node.args[0], sign * _exact(node.args[1].payload)
            entry = factors.setdefault(keys(base), [base, 0])
            entry[1] += exponent
    return coefficient, factors


def _times(coefficient: Any, number: Expr, sign: int) -> Any:
    """coefficient * number (or / number for sign -1) when finite, else None."""
    operation = operator.mul if sign > 0 else operator.truediv
    return _fold(operation, coefficient, _exact(number.payload))


def _number(value: Any) -> Expr:
    if isinstance(value, Fraction) and value.denominator == 1:
        return Number(int(value))
    return Number(value)


def _power(base: Expr, exponent: Any) -> Expr:
    return base if exponent == 1 else base ** _number(exponent)


def _product(coefficient: Any, factors: list[list]) -> Expr:
    """Rebuild coefficient * factors, with negative powers as a denominator."""
    if coefficient == 0:
        return Number(0)
    top = [_power(b, p) for b, p in factors if p > 0]
    bottom = [_power(b, -p) for b, p in factors if p < 0]
    if isinstance(coefficient, Fraction) and coefficient.denominator != 1:
        bottom.insert(0, Number(coefficient.denominator))  # x/(2*y), not 1/2*x/y
        coefficient = coefficient.numerator
    if coefficient == -1 and top:
        top[0] = -top[0]  # -x*y reads better than -1*x*y
    elif coefficient != 1 or not top:
        top.insert(0, _number(coefficient))
    numerator = top[0]
    for factor in top[1:]:
        numerator = numerator * factor
    if not bottom:
        return numerator
    denominator = bottom[0]
    for factor in bottom[1:]:
        denominator = denominator * factor
    return numerator / denominator


def _simplify_product(node: Expr, keys: _Keys) -> Expr:
    coefficient, factors = _factors(node, keys)
    return _product(coefficient, [f for f in factors.values() if f[1] != 0])


def _plus(constant: Any, number: Expr, sign: int) -> Any:
    """constant + number (or - number for sign -1) when finite, else None."""
    return _fold(operator.add, constant, sign * _exact(number.payload))


def _simplify_sum(node: Expr, keys: _Keys) -> Expr:
    """Collect like terms: 2*x + 3*x -> 5*x; constants add up."""
    constant: Any = 0
    terms: dict[tuple, list] = {}  # sorted factor keys -> [coefficient, factors]
    stack = [(node, 1)]
    while stack:
        e, sign = stack.pop(0)
        if e.kind in ("+", "-"):
            second = sign if e.kind == "+" else -sign
            stack[:0] = [(e.args[0], sign), (e.args[1], second)]
        elif e.kind == "neg":
            stack.insert(0, (e.args[0], -sign))
        elif e.kind == "number" and (total := _plus(constant, e, sign)) is not None:
            constant = total
        else:
            coefficient, factors = _factors(e, keys)
            kept = [f for f in factors.values() if f[1] != 0]
            term_key: tuple = tuple(sorted((keys(b), p) for b, p in kept))
            entry = terms.setdefault(term_key, [0, kept])
            total = _fold(operator.add, entry[0], sign * coefficient)
            if total is None:  # like terms whose sum overflows stay apart
                terms[("apart", len(terms))] = [sign * coefficient, kept]
            else:
                entry[0] = total
    signed = [(c, f) for c, f in terms.values() if c != 0]
    if constant != 0:  # constants go last, unless that makes the sum start with a minus
        where = 0 if constant > 0 and signed and signed[0][0] < 0 else len(signed)
        signed.insert(where, (constant, []))
    if not signed:
        return Number(0)
    result = _product(*signed[0])
    for coefficient, factors in signed[1:]:
        if coefficient < 0:
            result = result - _product(-coefficient, factors)
        else:
            result = result + _product(coefficient, factors)
    return result


def _simplify_power(base: Expr, exponent: Expr) -> Expr:
    if is_number(exponent):
        p = exponent.payload
        if p == 0:
            return Number(1)  # u**0 = 1 wherever u**0 is defined (0**0 = 1 in Python)
        if p == 1:
            return base
        if is_number(base) and (base.payload > 0 or (_is_integer(p) and base.payload != 0)):
            value = _fold(operator.pow, _exact(base.payload), _exact(p))
            if value is not None:
                return _number(value)
        if base.kind == "**" and is_number(base.args[1]) and _is_integer(p):
            exponent = _fold(operator.mul, _exact(base.args[1].payload), int(p))
            if exponent is not None:
                return _power(base.args[0], exponent)
    if is_number(base, 1):
        return Number(1)
    return base**exponent


def _simplify_function(name: str, arg: Expr) -> Expr:
    """Fold a function of a number when the result is an integer: exp(0) = 1.
    (``math`` raises where NumPy would warn: log(0) and exp(1000) are not folded.)"""
    if is_number(arg):
        value = _fold(lambda a: getattr(math, name)(float(a)), arg.payload)
        if value is not None and _is_integer(value):
            return Number(int(value))
    return function(name, arg)


def simplify(expr: Any) -> Expr:
    """A smaller expression with the same value: numbers folded, 0 and 1 dropped, like
    terms (2*x + x) and like factors (x * x**2) combined. It never expands products.
    Where the original has a finite value the result has the same one; it may have a
    value where the original is undefined or nan (x/x -> 1, and x - x -> 0 at x = inf).

    >>> from autodiff.symbolic import Symbol, sin
    >>> x = Symbol("x")
    >>> simplify(x * 1 + 0 * sin(x) + x / x + 2 * x * x**2)
    x + 2*x**3 + 1
    """
    keys = _Keys()

    def rule(node: Expr, a: list[Expr]) -> Expr:
        if not node.args:
            return node
        if node.kind in FUNCTIONS:
            return _simplify_function(node.kind, a[0])
        if node.kind == "**":
            return _simplify_power(a[0], a[1])
        rebuilt = Expr(node.kind, tuple(a))
        if node.kind in ("*", "/"):
            return _simplify_product(rebuilt, keys)
        return _simplify_sum(rebuilt, keys)  # +, -, neg

    return bottom_up(expr, rule)
