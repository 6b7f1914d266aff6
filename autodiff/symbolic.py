"""Symbolic differentiation: the textbook rules applied to expression trees.

This is what a computer-algebra system does, and what the lecture contrasts with
automatic differentiation. ``diff`` applies the sum, product, quotient, power and chain
rules and returns a new *expression*. An expression is a tree: where a subexpression
is used twice it is written twice, so the product rule (u v)' = u' v + u v' copies u
and v into the result. Repeated, that copying makes derivatives grow geometrically:
*expression swell*. ``swell_series`` measures it on the logistic map, next to the
reverse-mode gradient graph of the same function, which shares what it reuses and
grows linearly.

>>> x, y = Symbol("x"), Symbol("y")
>>> f = x**2 * y + y + 2
>>> diff(f, x)
2*x**1*1*y + x**2*0 + 0 + 0
>>> simplify(diff(f, x))
2*x*y
>>> evaluate(diff(f, x), {"x": 3, "y": 4}), evaluate(diff(f, y), {"x": 3, "y": 4})
(24, 10)

Python may hold one subexpression object in two places of a tree; ``size``, ``str``
and ``diff`` still treat it as two copies (a tree), while the algorithms below visit
each distinct object once, so even swollen trees are cheap to measure.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

from . import backend, ops
from .gradients import gradients
from .graph import Node, Variable, constant, find_topo_sort, tensor

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
    >>> diff(sin(Symbol("x")), Symbol("x"))
    cos(x)*1
    """
    return function("sin", x)


def cos(x: Any) -> Expr:
    """cos(x) as an expression; x is an Expr or a number.

    ``diff`` uses the chain rule cos(u)' = -sin(u) u'.

    Examples
    --------
    >>> diff(cos(Symbol("x")), Symbol("x"))
    -sin(x)*1
    """
    return function("cos", x)


def exp(x: Any) -> Expr:
    """exp(x) as an expression; x is an Expr or a number.

    ``diff`` uses the chain rule exp(u)' = exp(u) u'.

    Examples
    --------
    >>> diff(exp(Symbol("x")), Symbol("x"))
    exp(x)*1
    """
    return function("exp", x)


def log(x: Any) -> Expr:
    """log(x) as an expression; x is an Expr or a number.

    ``diff`` uses the chain rule log(u)' = u' / u.

    Examples
    --------
    >>> diff(log(Symbol("x")), Symbol("x"))
    1/x*1
    """
    return function("log", x)


def tanh(x: Any) -> Expr:
    """tanh(x) as an expression; x is an Expr or a number.

    ``diff`` uses the chain rule tanh(u)' = (1 - tanh(u)**2) u'.

    Examples
    --------
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


def _bottom_up(expr: Any, rule: Callable[[Expr, list], Any]) -> Any:
    """Apply ``rule(node, results_of_its_args)`` from the leaves up; the root's result."""
    expr = as_expr(expr)
    results: dict[int, Any] = {}
    for node in postorder(expr):
        results[id(node)] = rule(node, [results[id(arg)] for arg in node.args])
    return results[id(expr)]


# -- differentiation: the textbook rules ---------------------------------------------------


def _derivative_of_function(name: str, u: Expr) -> Expr:
    """f'(u) for the chain rule f(u)' = f'(u) u'."""
    if name == "sin":
        return cos(u)
    if name == "cos":
        return -sin(u)
    if name == "exp":
        return exp(u)
    if name == "log":
        return 1 / u
    return 1 - tanh(u) ** 2  # tanh


def _is_number(e: Expr, value: Any = None) -> bool:
    return e.kind == "number" and (value is None or e.payload == value)


def _power_rule(u: Expr, n: Expr, du: Expr) -> Expr:
    """(u**n)' = n u**(n-1) u', where n does not depend on the variable. It needs no
    log u, so it holds for u < 0 too; u**0 = 1 is a constant, with derivative 0."""
    if _is_number(n, 0):
        return Number(0)
    n_minus_1 = Number(n.payload - 1) if n.kind == "number" else n - 1
    return n * u**n_minus_1 * du


def diff(expr: Any, var: Expr) -> Expr:
    """d expr / d var by the textbook rules, with no simplification (see ``simplify``).

    u**v takes the power rule n u**(n-1) u' whenever v does not contain var, and
    u**v (v' log u + v u' / u) only when it does (log u is nan for u < 0).

    >>> x = Symbol("x")
    >>> diff(sin(x) * x, x)
    cos(x)*1*x + sin(x)*1
    """
    if not (isinstance(var, Expr) and var.kind == "symbol"):
        raise TypeError(
            f"diff: differentiate with respect to a Symbol, got {var!r}. "
            f"Write x = Symbol('x') and diff(expr, x)."
        )

    depends: set[int] = set()  # ids of the nodes that contain var

    def rule(node: Expr, d: list[Expr]) -> Expr:  # d: the derivatives of node.args
        is_var = node.kind == "symbol" and node.payload == var.payload
        if is_var or any(id(arg) in depends for arg in node.args):
            depends.add(id(node))
        if node.kind == "number":
            return Number(0)
        if node.kind == "symbol":
            return Number(1 if node.payload == var.payload else 0)
        u, du = node.args[0], d[0]
        if node.kind == "neg":
            return -du
        if node.kind in FUNCTIONS:  # chain rule
            return _derivative_of_function(node.kind, u) * du
        v, dv = node.args[1], d[1]
        if node.kind == "+":  # sum rule
            return du + dv
        if node.kind == "-":
            return du - dv
        if node.kind == "*":  # product rule
            return du * v + u * dv
        if node.kind == "/":  # quotient rule
            return (du * v - u * dv) / v**2
        if id(v) not in depends:  # power rule, u**n for an exponent free of var
            return _power_rule(u, v, du)
        return u**v * (dv * log(u) + v * du / u)  # u**v = exp(v log u)

    return _bottom_up(expr, rule)


# -- evaluation, printing, and the engine's graph ------------------------------------------


class MissingSymbolError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def evaluate(expr: Any, env: dict[str, Any]) -> Any:
    """The value of ``expr`` with symbols taken from ``env`` (numbers or arrays).

    With ints and Fractions only in ``env``, arithmetic is exact (Fractions, and 1/0
    raises ZeroDivisionError); otherwise it is NumPy's in float64 (1/0 is inf with a
    warning). In exact mode a float written in the expression becomes the Fraction of
    its binary value: 0.1 is 3602879701896397/36028797018963968, not 1/10 (write
    Number(Fraction(1, 10)) for that). Functions (sin, ...) return floats.

    >>> evaluate(Symbol("x") / 3, {"x": 1})
    Fraction(1, 3)
    >>> evaluate(Symbol("x") * 0.1, {"x": 1}) == Fraction(1, 10)   # 0.1 is binary
    False
    """
    exact = all(isinstance(v, int | Fraction) and not isinstance(v, bool) for v in env.values())

    def rule(node: Expr, a: list) -> Any:
        if node.kind == "number":
            value = node.payload
            return Fraction(value) if exact else backend.asarray(float(value))
        if node.kind == "symbol":
            if node.payload not in env:
                raise MissingSymbolError(
                    f"evaluate: no value for symbol {node.payload!r}; "
                    f"add it to env, e.g. {{{node.payload!r}: 1.0}}."
                )
            value = env[node.payload]
            return Fraction(value) if exact else backend.asarray(value, dtype="float64")
        return _apply(node.kind, a)

    value = _bottom_up(expr, rule)
    if isinstance(value, Fraction) and value.denominator == 1:
        return int(value)
    return value[()] if getattr(value, "ndim", None) == 0 else value


_ARITHMETIC: dict[str, Callable[..., Any]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "**": lambda a, b: a**b,
    "neg": lambda a: -a,
}


def _apply(kind: str, args: list) -> Any:
    """The operator or function ``kind`` on numbers or arrays (a Fraction goes into a
    function as a float)."""
    if kind in FUNCTIONS:
        arg = float(args[0]) if isinstance(args[0], Fraction) else args[0]
        return getattr(backend.namespace(arg), kind)(arg)
    return _ARITHMETIC[kind](*args)


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


def to_graph(expr: Any, variables: dict[str, Any] | None = None) -> Node:
    """The engine's graph computing ``expr``: one op node per distinct subexpression.

    Symbols become ``ad.Variable`` placeholders unless ``variables`` maps their names
    to Nodes (or float values, turned into tensors). Pass the leaves you want to
    differentiate with respect to here, so you hold them for ``ad.gradients``. A part
    made of numbers only becomes one constant, computed as ``evaluate`` computes with
    floats (NumPy float64: 1/0 is inf with a warning), and kept a Python float, so
    float32 variables stay float32.

    >>> import autodiff as ad
    >>> x, x_leaf = Symbol("x"), ad.tensor(2.0, name="x")
    >>> graph = to_graph(x * sin(x), {"x": x_leaf})
    >>> round(float(graph.value), 4)
    1.8186
    >>> round(float(ad.gradients(graph, [x_leaf])[0].value), 4)   # sin(x) + x cos(x)
    0.077
    """
    expr = as_expr(expr)
    nodes = _graph_leaves(expr, variables or {})

    def rule(node: Expr, a: list) -> Any:
        if node.kind == "number":
            return backend.asarray(float(node.payload))  # 0-d float64: NumPy's rules
        if node.kind == "symbol":
            if node.payload not in nodes:
                nodes[node.payload] = Variable(node.payload)
            return nodes[node.payload]
        if not any(isinstance(value, Node) for value in a):  # numbers only: compute now
            return _apply(node.kind, a)
        operands = [v if isinstance(v, Node) else constant(float(v)) for v in a]
        if node.kind in FUNCTIONS:
            return getattr(ops, node.kind)(*operands)
        return _ARITHMETIC[node.kind](*operands)

    result = _bottom_up(expr, rule)
    return result if isinstance(result, Node) else constant(float(result))


def _graph_leaves(expr: Expr, variables: dict[str, Any]) -> dict[str, Node]:
    """The Nodes for ``to_graph``'s variables, checked against the symbols of expr."""
    symbols = sorted({node.payload for node in postorder(expr) if node.kind == "symbol"})
    nodes: dict[str, Node] = {}
    for name, value in variables.items():
        if name not in symbols:
            raise ValueError(
                f"to_graph: variables has {name!r}, but the expression has no such "
                f"symbol; its symbols are {symbols}."
            )
        if not isinstance(value, Node):
            dtype = backend.asarray(value).dtype
            if dtype.kind in "biu":
                raise TypeError(
                    f"to_graph: variable {name!r} is {value!r}, of integer dtype {dtype}; "
                    f"derivatives need floats. Pass e.g. 2.0 for 2, or "
                    f"ad.tensor(value, dtype='float64')."
                )
            value = tensor(value, name=name)
        nodes[name] = value
    return nodes


# -- expression swell -----------------------------------------------------------------------


def logistic_map(x: Any, n: int) -> Any:
    """l(n), where l(1) = x and l(k+1) = 4 l(k) (1 - l(k)), for Exprs or engine Nodes."""
    l = x
    for _ in range(n - 1):
        l = 4 * l * (1 - l)
    return l


def swell_series(n_max: int = 10) -> dict[str, list[int]]:
    """Sizes for the expression-swell plot of the logistic map, for n = 1 .. n_max.

    ``derivative``: tree nodes of diff(l(n), x); ``simplified``: the same after
    ``simplify``; ``gradient_graph``: nodes of the reverse-mode gradient graph of l(n)
    (with the forward nodes it reads), built by ``ad.gradients``.

    >>> series = swell_series(4)
    >>> series["derivative"], series["gradient_graph"]
    ([1, 19, 73, 217], [2, 16, 30, 44])
    """
    x = Symbol("x")
    series: dict[str, list[int]] = {"n": [], "derivative": [], "simplified": []}
    series["gradient_graph"] = []
    for n in range(1, n_max + 1):
        derivative = diff(logistic_map(x, n), x)
        series["n"].append(n)
        series["derivative"].append(size(derivative))
        series["simplified"].append(size(simplify(derivative)))
        x_node = Variable("x")
        (gradient,) = gradients(logistic_map(x_node, n), [x_node])
        series["gradient_graph"].append(len(find_topo_sort([gradient])))
    return series


# The simplifier builds on the expressions above, so it is imported last.
from .simplification import simplify  # noqa: E402
