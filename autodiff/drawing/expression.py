"""Reading an expression such as ``x*y + sin(x)`` into a graph, without running any code.

The command line (``python -m autodiff render``) draws figures from expressions that a
lecturer types. The text is parsed by Python's ``ast`` module and then *walked*, never
evaluated: only the syntax on a short whitelist becomes nodes (names, numbers, the
operators ``+ - * / ** @``, unary ``-`` and ``+``, and calls of the library's own
functions by name). Anything else (attributes, other calls, subscripts, lambdas,
imports, comprehensions, ...) is refused with an ``ExpressionError`` that names it.
"""

from __future__ import annotations

import ast
import difflib
import inspect
from collections.abc import Callable

from .. import ops
from ..core.graph import Node, Variable, constant

FUNCTIONS: dict[str, Callable[..., Node]] = {
    name: getattr(ops, name)
    for name in (
        "exp log sin cos tanh sigmoid relu sqrt power maximum matmul transpose sum mean "
        "softmax log_softmax logsumexp"
    ).split()
}
FUNCTIONS["ln"] = ops.log  # as written on the classic slides
BINARY: dict[type, Callable[..., Node]] = {
    ast.Add: ops.add,
    ast.Sub: ops.subtract,
    ast.Mult: ops.multiply,
    ast.Div: ops.divide,
    ast.Pow: ops.power,
    ast.MatMult: ops.matmul,
}
MAX_LENGTH = 2000  # a lecture figure; also keeps the parser far from its recursion limit
ALLOWED = (
    "an expression may use only names, numbers, + - * / ** @, unary - and +, parentheses, "
    "and calls of " + ", ".join(sorted(FUNCTIONS))
)

OPERATORS = {
    ast.Mod: "%",
    ast.FloorDiv: "//",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.BitAnd: "&",
    ast.Not: "not",
    ast.Invert: "~",
}
# What a refused piece of syntax is called in a message.
DESCRIPTIONS = {
    ast.Attribute: "attribute access (a.b)",
    ast.Subscript: "indexing (a[i])",
    ast.Lambda: "lambda",
    ast.Compare: "comparisons",
    ast.BoolOp: "and/or",
    ast.IfExp: "if-else expressions",
    ast.NamedExpr: "assignment (:=)",
    ast.JoinedStr: "f-strings",
    ast.Starred: "starred arguments (*a)",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
    ast.List: "lists",
    ast.Tuple: "tuples",
    ast.Dict: "dicts",
    ast.Set: "sets",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "generator expressions",
}


class ExpressionError(ValueError):
    """An expression that is not allowed or does not parse (the message says why)."""


def parse(text: str, variables: dict[str, Node] | None = None) -> tuple[Node, dict[str, Node]]:
    """The graph of ``text`` and its variables, by name, in order of first appearance.

    A name found in ``variables`` is that node (``ad.tensor`` leaves give a graph with
    values); any other name becomes a placeholder, ``ad.Variable(name)``. Numbers are
    constants; functions are the library's own (``sin``, ``matmul``, ...).

    >>> y, names = parse("x*y + sin(x)")
    >>> y.op.name, list(names)
    ('add', ['x', 'y'])
    >>> try:
    ...     parse("__import__('os')")
    ... except ExpressionError as error:
    ...     print(str(error)[:37])
    refused a call of '__import__': the f
    """
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"the expression has {len(text)} characters; at most {MAX_LENGTH}.")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"not a valid expression ({exc.msg}): {text!r}") from exc
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ExpressionError(f"cannot read this expression: {exc}") from exc
    builder = _Builder(dict(variables or {}))
    try:
        return builder.build(tree.body), builder.used
    except RecursionError as exc:
        raise ExpressionError("the expression is nested too deeply to draw.") from exc


class _Builder:
    """Walks a parsed expression and builds its nodes; refuses everything else."""

    def __init__(self, given: dict[str, Node]):
        self.given = given
        self.used: dict[str, Node] = {}

    def build(self, tree: ast.expr) -> Node:
        result = self.visit(tree)
        return result if isinstance(result, Node) else constant(result)

    def visit(self, tree: ast.expr) -> Node | float:
        if isinstance(tree, ast.Constant):
            return self.number(tree)
        if isinstance(tree, ast.Name):
            return self.name(tree.id)
        if isinstance(tree, ast.BinOp) and type(tree.op) in BINARY:
            left, right = _real(self.visit(tree.left)), _real(self.visit(tree.right))
            if not isinstance(left, Node) and not isinstance(right, Node):
                left = constant(left)  # two numbers: a node of the figure, like the others
            return BINARY[type(tree.op)](left, right)
        if isinstance(tree, ast.UnaryOp) and isinstance(tree.op, (ast.USub, ast.UAdd)):
            operand = self.visit(tree.operand)
            if isinstance(tree.op, ast.UAdd):
                return operand
            return -operand if isinstance(operand, Node) else ops.negative(constant(operand))
        if isinstance(tree, ast.Call):
            return self.call(tree)
        raise ExpressionError(f"refused {_describe(tree)}: {ALLOWED}.")

    def number(self, tree: ast.Constant) -> float:
        value = tree.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            kind = "complex numbers" if isinstance(value, complex) else f"{value!r}"
            raise ExpressionError(f"refused {kind}: {ALLOWED} (real numbers only).")
        return value  # an int stays an int: sum(x, 0) needs an integer axis

    def name(self, name: str) -> Node:
        if name in FUNCTIONS:
            raise ExpressionError(f"'{name}' is a function: call it, as in {name}(x).")
        if name not in self.used:
            self.used[name] = self.given[name] if name in self.given else Variable(name)
        return self.used[name]

    def call(self, tree: ast.Call) -> Node:
        if not isinstance(tree.func, ast.Name):
            what = "a method (a.b())" if isinstance(tree.func, ast.Attribute) else "this"
            raise ExpressionError(
                f"refused calling {what}: call the library's functions by name, e.g. sin(x); "
                f"{ALLOWED}."
            )
        name = tree.func.id
        if name not in FUNCTIONS:
            close = difflib.get_close_matches(name, FUNCTIONS, n=1)
            raise ExpressionError(
                f"refused a call of '{name}'{f' (did you mean {close[0]}?)' if close else ''}: "
                f"the functions you may call are {', '.join(sorted(FUNCTIONS))}."
            )
        if tree.keywords:
            raise ExpressionError(
                f"refused keyword arguments in {name}(): pass arguments by position."
            )
        args = [self.visit(arg) for arg in tree.args]  # a *arg is refused inside visit
        function = FUNCTIONS[name]
        signature = inspect.signature(function)
        try:
            signature.bind(*args)
        except TypeError as exc:
            positional = [
                p for p in signature.parameters.values() if p.kind != p.KEYWORD_ONLY
            ]  # (name= is not for expressions)
            params = signature.replace(
                parameters=positional, return_annotation=inspect.Signature.empty
            )
            raise ExpressionError(f"{name}{params}: {exc}.") from exc
        return function(*args)


def _real(value: Node | float) -> Node | float:
    """Numbers in arithmetic as floats, so that 9**9**9 overflows at once instead of
    computing a Python integer with hundreds of millions of digits."""
    if isinstance(value, Node):
        return value
    try:
        return float(value)
    except OverflowError as exc:
        raise ExpressionError(f"the number {value} is too large.") from exc


def _describe(tree: ast.AST) -> str:
    if isinstance(tree, (ast.BinOp, ast.UnaryOp)):
        return f"the operator {OPERATORS.get(type(tree.op), type(tree.op).__name__)}"
    if isinstance(tree, ast.Name):
        return f"'{tree.id}'"
    return DESCRIPTIONS.get(type(tree), type(tree).__name__)
