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

from collections.abc import Callable
from fractions import Fraction
from typing import Any

from .. import ops
from ..core import backend
from ..core.graph import Node, Variable, constant, find_topo_sort, tensor
from ..system.gradients import gradients
from .algebra import (
    FUNCTIONS,
    Expr,
    Number,
    Symbol,
    as_expr,
    bottom_up,
    cos,
    exp,
    function,
    is_number,
    log,
    postorder,
    sin,
    size,
    tanh,
    to_string,
)
from .simplification import simplify

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


def _power_rule(u: Expr, n: Expr, du: Expr) -> Expr:
    """(u**n)' = n u**(n-1) u', where n does not depend on the variable. It needs no
    log u, so it holds for u < 0 too; u**0 = 1 is a constant, with derivative 0."""
    if is_number(n, 0):
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

    return bottom_up(expr, rule)


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

    value = bottom_up(expr, rule)
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

    result = bottom_up(expr, rule)
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


__all__ = [
    "Expr",
    "FUNCTIONS",
    "MissingSymbolError",
    "Number",
    "Symbol",
    "as_expr",
    "cos",
    "diff",
    "evaluate",
    "exp",
    "function",
    "log",
    "logistic_map",
    "postorder",
    "simplify",
    "sin",
    "size",
    "swell_series",
    "tanh",
    "to_graph",
    "to_string",
]
