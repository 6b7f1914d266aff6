"""Expression trees for the symbolic differentiator (``symbolic.py``): building them,
walking them and printing them.

An ``Expr`` is a node of a tree: a number, a symbol, an operator (``+ - * / **``,
unary ``-``) or one of the ``FUNCTIONS`` applied to child expressions. Python's
operators build trees (``x**2 * y``), ``size`` counts their nodes (a subexpression
used twice counts twice), ``postorder`` and ``bottom_up`` walk each distinct node
once, and ``to_string`` prints one with only the brackets it needs. ``diff`` and
``evaluate`` (symbolic.py) and ``simplify`` (simplification.py) are built on these.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

FUNCTIONS = ("sin", "cos", "exp", "log", "tanh")


class Expr:
    """A node of an expression tree: ``kind``, ``args`` (child expressions) and
    ``payload`` (a number, a symbol's name, or a function's name)."""

    __slots__ = ("kind", "args", "payload", "size")
    __array_ufunc__ = None  # NumPy numbers defer to our reflected operators

    def __init__(self, kind: str, args: tuple[Expr, ...] = (), payload: Any = None):
        self.kind, self.args, self.payload = kind, args, payload
        self.size: int = 1 + sum(arg.size for arg in args)  # nodes of the tree, copies counted

    def __add__(self, other: Any) -> Expr:
        return Expr("+", (self, as_expr(other)))

    def __radd__(self, other: Any) -> Expr:
        return Expr("+", (as_expr(other), self))

    def __sub__(self, other: Any) -> Expr:
        return Expr("-", (self, as_expr(other)))

    def __rsub__(self, other: Any) -> Expr:
        return Expr("-", (as_expr(other), self))

    def __mul__(self, other: Any) -> Expr:
        return Expr("*", (self, as_expr(other)))

    def __rmul__(self, other: Any) -> Expr:
        return Expr("*", (as_expr(other), self))

    def __truediv__(self, other: Any) -> Expr:
        return Expr("/", (self, as_expr(other)))

    def __rtruediv__(self, other: Any) -> Expr:
        return Expr("/", (as_expr(other), self))

    def __pow__(self, other: Any) -> Expr:
        return Expr("**", (self, as_expr(other)))

    def __rpow__(self, other: Any) -> Expr:
        return Expr("**", (as_expr(other), self))

    def __neg__(self) -> Expr:
        return Expr("neg", (self,))

    def __repr__(self) -> str:
        return to_string(self)

    __str__ = __repr__


def Symbol(name: str) -> Expr:  # noqa: N802  (reads like the class it stands for)
    """A variable, named like a Python identifier."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"Symbol: the name must be an identifier such as 'x', got {name!r}.")
    return Expr("symbol", (), name)


def Number(value: Any) -> Expr:  # noqa: N802
    """A constant: an int, a Fraction (kept exact) or a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"Number: expected a real number, got {type(value).__name__}.")
    if isinstance(value, Fraction) and value.denominator == 1:
        value = int(value)
    return Expr("number", (), value)


def as_expr(x: Any) -> Expr:
    """An Expr for an Expr or a Python number; anything else is refused."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        return Number(x if isinstance(x, int | Fraction) else float(x))
    raise TypeError(
        f"symbolic: cannot use a {type(x).__name__} in an expression; use Symbol('x'), "
        f"numbers, and the functions {', '.join(FUNCTIONS)} from autodiff.symbolic."
    )


def function(name: str, arg: Any) -> Expr:
    """``name(arg)`` for one of ``FUNCTIONS``; other names are refused."""
    if name not in FUNCTIONS:
        raise ValueError(
            f"symbolic: unknown function {name!r}; the known ones are {', '.join(FUNCTIONS)}."
        )
    return Expr(name, (as_expr(arg),))


def sin(x: Any) -> Expr:
    """sin(x) as an expression; x is an Expr or a number.

    ``diff`` uses the chain rule sin(u)' = cos(u) u'.

    Examples
    --------
    >>> from autodiff.symbolic import diff
    >>> diff(sin(Symbol("x")), Symbol("x"))
    cos(x)*1
    """
    return function("sin", x)


def cos(x: Any) -> Expr:
    """cos(x) as an expression; x is an Expr or a number.

    ``diff`` uses the chain rule cos(u)' = -sin(u) u'.

    Examples
    --------
    >>> from autodiff.symbolic import diff
    >>> diff(cos(Symbol("x")), Symbol("x"))
    -sin(x)*1
    """
    return function("cos", x)


def exp(x: Any) -> Expr:
    """exp(x) as an expression; x is an Expr or a number.

    ``diff`` uses the chain rule exp(u)' = exp(u) u'.

    Examples
    --------
    >>> from autodiff.symbolic import diff
    >>> diff(exp(Symbol("x")), Symbol("x"))
    exp(x)*1
    """
    return function("exp", x)


def log(x: Any) -> Expr:
    """log(x) as an expression; x is an Expr or a number.

    ``diff`` uses the chain rule log(u)' = u' / u.

    Examples
    --------
    >>> from autodiff.symbolic import diff
    >>> diff(log(Symbol("x")), Symbol("x"))
    1/x*1
    """
    return function("log", x)


def tanh(x: Any) -> Expr:
    """tanh(x) as an expression; x is an Expr or a number.

    ``diff`` uses the chain rule tanh(u)' = (1 - tanh(u)**2) u'.

    Examples
    --------
    >>> from autodiff.symbolic import diff
    >>> diff(tanh(Symbol("x")), Symbol("x"))
    (1 - tanh(x)**2)*1
    """
    return function("tanh", x)


def size(expr: Any) -> int:
    """The number of nodes of the expression tree (a subexpression used twice counts twice).

    >>> size(Symbol("x") * 2 + 1)
    5
    """
    return as_expr(expr).size


def postorder(expr: Expr, skip: Callable[[Expr], bool] | None = None) -> Iterator[Expr]:
    """Each distinct node once, children before parents, without recursion. Nodes for
    which ``skip(node)`` is true are left out, with everything below them."""
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            yield node
        elif id(node) not in seen and not (skip and skip(node)):
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((arg, False) for arg in reversed(node.args))


def bottom_up(expr: Any, rule: Callable[[Expr, list], Any]) -> Any:
    """Apply ``rule(node, results_of_its_args)`` from the leaves up; the root's result."""
    expr = as_expr(expr)
    results: dict[int, Any] = {}
    for node in postorder(expr):
        results[id(node)] = rule(node, [results[id(arg)] for arg in node.args])
    return results[id(expr)]


def is_number(e: Expr, value: Any = None) -> bool:
    """Whether ``e`` is a number (equal to ``value``, if given)."""
    return e.kind == "number" and (value is None or e.payload == value)


# Binding strength for printing: higher binds tighter.
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "neg": 3, "**": 4}


def _precedence(node: Expr) -> int:
    if node.kind == "number":
        value = node.payload
        if isinstance(value, Fraction):
            return 2  # 1/3 and -1/3 print like a division
        return 3 if value < 0 else 5  # -2 prints like a negation
    return _PRECEDENCE.get(node.kind, 5)  # symbols and function calls never need brackets


def to_string(expr: Any) -> str:
    """Readable text, with only the brackets the operator precedence needs.

    The text is written left to right from a stack of pieces, not built bottom-up, so a
    deep chain takes memory in proportion to its text, not to the square of it.

    >>> x = Symbol("x")
    >>> to_string((x + 1) * x ** (x - 1))
    '(x + 1)*x**(x - 1)'
    """
    pieces: list[str] = []
    stack: list[str | Expr] = [as_expr(expr)]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            pieces.append(item)
        else:
            stack.extend(reversed(_layout(item)))
    return "".join(pieces)


def _layout(node: Expr) -> list[str | Expr]:
    """node as text pieces around its children, brackets included."""
    if node.kind in ("number", "symbol"):
        return [str(node.payload)]
    if node.kind in FUNCTIONS:
        return [f"{node.kind}(", node.args[0], ")"]
    operands = [
        ["(", arg, ")"] if _needs_brackets(node, i, arg) else [arg]
        for i, arg in enumerate(node.args)
    ]
    if node.kind == "neg":
        return ["-", *operands[0]]
    spaced = f" {node.kind} " if node.kind in "+-" else node.kind
    return [*operands[0], spaced, *operands[1]]


def _needs_brackets(node: Expr, i: int, arg: Expr) -> bool:
    """Does operand i of node need brackets? Where it binds less tightly, or as tightly:
    a - (b - c), a / (b * c) on the right of - and /; (a**b)**c on the left of **,
    because ** groups to the right."""
    mine, theirs = _PRECEDENCE[node.kind], _precedence(arg)
    tie_needs = (i == 1 and node.kind in "-/") or (i == 0 and node.kind == "**")
    return theirs < mine or (theirs == mine and tie_needs)
