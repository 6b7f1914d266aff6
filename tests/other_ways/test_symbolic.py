"""Symbolic differentiation: the textbook rules, sound simplification, expression swell."""

import ast
import math
import tracemalloc
from fractions import Fraction
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import autodiff as ad
from autodiff import algebra, numerical, simplification, symbolic
from autodiff.symbolic import Symbol, cos, diff, evaluate, exp, log, simplify, sin, size, tanh
from strategies import expressions

x, y = Symbol("x"), Symbol("y")


def test_the_classic_example():
    f = x**2 * y + y + 2
    assert evaluate(f, {"x": 3, "y": 4}) == 42
    assert evaluate(diff(f, x), {"x": 3, "y": 4}) == 24
    assert evaluate(diff(f, y), {"x": 3, "y": 4}) == 10
    assert str(simplify(diff(f, x))) == "2*x*y"
    assert str(simplify(diff(f, y))) == "x**2 + 1"


@pytest.mark.parametrize(
    "expr, rule_result",
    [
        (x + y, "1 + 0"),  # sum rule
        (x * y, "1*y + x*0"),  # product rule
        (x / y, "(1*y - x*0)/y**2"),  # quotient rule
        (x**3, "3*x**2*1"),  # power rule
        (sin(x * x), "cos(x*x)*(1*x + x*1)"),  # chain rule
        (-x, "-1"),
    ],
)
def test_each_textbook_rule_reads_as_on_the_slide(expr, rule_result):
    assert str(diff(expr, x)) == rule_result


FUNCTIONS_AND_DERIVATIVES = [
    (sin(x), math.cos),
    (cos(x), lambda v: -math.sin(v)),
    (exp(x), math.exp),
    (log(x), lambda v: 1 / v),
    (tanh(x), lambda v: 1 - math.tanh(v) ** 2),
    (x**x, lambda v: v**v * (math.log(v) + 1)),  # u**v with both varying
    (2**x, lambda v: 2**v * math.log(2)),
]


@pytest.mark.parametrize("expr, derivative", FUNCTIONS_AND_DERIVATIVES)
def test_derivatives_of_the_functions(expr, derivative):
    for v in (0.3, 1.7):
        assert float(evaluate(diff(expr, x), {"x": v})) == pytest.approx(derivative(v), rel=1e-12)


@given(expressions(with_functions=True), st.floats(0.3, 2.0), st.floats(0.3, 2.0))
def test_diff_agrees_with_finite_differences(expr, a, b):
    def f(t):
        return float(evaluate(expr, {"x": t, "y": b}))

    with np.errstate(all="ignore"):
        values = [f(a - 1e-3), f(a), f(a + 1e-3)]
        derivative = float(evaluate(diff(expr, x), {"x": a, "y": b}))
    assume(all(math.isfinite(v) and abs(v) < 1e6 for v in values) and math.isfinite(derivative))
    assume(abs(derivative) < 1e4)
    numeric = numerical.derivative(f, a)
    assert derivative == pytest.approx(numeric, rel=1e-5, abs=1e-6)


def _exact_value(expr, env):
    try:
        return evaluate(expr, env)
    except ZeroDivisionError:
        return None


@given(
    expressions(), st.fractions(-3, 3, max_denominator=5), st.fractions(-3, 3, max_denominator=5)
)
def test_simplify_is_sound_in_exact_arithmetic(expr, a, b):
    env = {"x": a, "y": b}
    before = _exact_value(expr, env)
    assume(before is not None)
    simplified = simplify(expr)
    assert _exact_value(simplified, env) == before, f"{expr}  ->  {simplified}"


@given(expressions(with_functions=True, max_leaves=6), st.floats(0.3, 2), st.floats(0.3, 2))
def test_simplify_is_sound_with_functions(expr, a, b):
    env = {"x": a, "y": b}
    with np.errstate(all="ignore"):
        before = float(evaluate(expr, env))
        after = float(evaluate(simplify(expr), env))
    assume(math.isfinite(before) and abs(before) < 1e8)
    assert after == pytest.approx(before, rel=1e-9, abs=1e-9)


class _ExactNumbers(ast.NodeTransformer):
    """Read every number in Python source as a Fraction, so 1/3 stays exact."""

    def visit_Constant(self, node):  # noqa: N802  (the name ast asks for)
        return ast.Call(ast.Name("Fraction", ast.Load()), [node], [])


def _read_back(text, env):
    tree = ast.fix_missing_locations(_ExactNumbers().visit(ast.parse(text, mode="eval")))
    code = compile(tree, "<printed>", "eval")
    return eval(code, {"__builtins__": {}, "Fraction": Fraction}, dict(env))


@given(
    expressions(fractions=True),
    st.fractions(-3, 3, max_denominator=5),
    st.fractions(-3, 3, max_denominator=5),
)
def test_printing_puts_brackets_where_precedence_needs_them(expr, a, b):
    env = {"x": a, "y": b}
    try:  # Python reads our text with its own precedence rules
        printed = _read_back(str(expr), env)
    except ZeroDivisionError:
        printed = None
    assert printed == _exact_value(expr, env), str(expr)


def test_printing_examples():
    assert str((x + y) * (x - y)) == "(x + y)*(x - y)"
    assert str(x - (y - 1)) == "x - (y - 1)"
    assert str(x / (y * 2)) == "x/(y*2)"
    assert str((x**y) ** 2) == "(x**y)**2"
    assert str(x ** (y**2)) == "x**y**2"
    assert str((-x) ** 2) == "(-x)**2"
    assert str(-(x**2)) == "-x**2"
    assert str(sin(x + 1) * 3) == "sin(x + 1)*3"


def test_simplify_examples():
    assert str(simplify(x * 1 + 0 * sin(x) + x / x)) == "x + 1"
    assert str(simplify(2 * x + 3 * x - x * 5)) == "0"
    assert str(simplify(x * x**2 / x)) == "x**2"
    assert str(simplify((x**2) ** 3)) == "x**6"
    assert str(simplify(exp(0) + log(1) * x)) == "1"
    assert str(simplify(x / (y * 2))) == "x/(2*y)"
    assert str(simplify(1 - x)) == "1 - x"
    assert str(simplify(-(x * y))) == "-x*y"


def test_size_counts_the_tree_not_the_objects():
    u = x * y
    assert size(u + u) == 7  # u is one object, written twice
    assert size(5) == 1


def test_expression_swell_is_geometric_and_the_gradient_graph_linear():
    series = symbolic.swell_series(10)
    assert series["n"] == list(range(1, 11))
    swell, graph = series["derivative"], series["gradient_graph"]
    assert all(b > a for a, b in pairwise(swell))
    assert all(b / a > 2 for a, b in pairwise(swell[2:]))  # at least doubling
    steps = {b - a for a, b in pairwise(graph)}
    assert len(steps) == 1 and steps.pop() > 0  # the same number of nodes per step
    assert swell[-1] > 100 * graph[-1]
    assert all(s <= d for s, d in zip(series["simplified"], swell, strict=True))


def test_swelled_derivative_still_evaluates_correctly():
    l10 = symbolic.logistic_map(x, 10)
    derivative = float(evaluate(diff(l10, x), {"x": 0.3}))
    expected = ad.grad(lambda t: symbolic.logistic_map(t, 10))(0.3)
    assert derivative == pytest.approx(float(expected), rel=1e-10)


def test_to_graph_computes_the_same_function_and_gradient():
    expr = x**2 * y + sin(x) / y
    graph = symbolic.to_graph(expr, {"x": ad.tensor(1.3, name="x"), "y": ad.tensor(0.7)})
    leaves = {node.name: node for node in ad.find_topo_sort([graph]) if not node.inputs}
    assert float(graph.value) == pytest.approx(float(evaluate(expr, {"x": 1.3, "y": 0.7})))
    (dx,) = ad.gradients(graph, [leaves["x"]])
    assert float(dx.value) == pytest.approx(float(evaluate(diff(expr, x), {"x": 1.3, "y": 0.7})))


def test_to_graph_makes_placeholders_and_shares_repeated_objects():
    u = sin(x)
    graph = symbolic.to_graph(u * u + y)
    nodes = ad.find_topo_sort([graph])
    assert sorted(n.name for n in nodes if not n.inputs) == ["x", "y"]
    assert sum(1 for n in nodes if n.op.name == "sin") == 1
    leaves = {n.name: n for n in nodes if not n.inputs}
    value = ad.evaluate(graph, {leaves["x"]: 0.5, leaves["y"]: 1.0})
    assert float(value) == pytest.approx(math.sin(0.5) ** 2 + 1)


def test_evaluate_on_arrays():
    values = np.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(evaluate(diff(x * log(x), x), {"x": values}), np.log(values) + 1)


def test_deep_expressions_need_no_recursion():
    expr = x
    for _ in range(5000):
        expr = expr + x
    assert evaluate(diff(expr, x), {"x": 2}) == 5001
    assert str(simplify(expr)) == "5001*x"


def test_clear_errors():
    with pytest.raises(TypeError, match="with respect to a Symbol"):
        diff(x * y, x * y)
    with pytest.raises(TypeError, match="with respect to a Symbol"):
        diff(x, "x")
    with pytest.raises(ValueError, match="unknown function 'sinh'.*sin, cos, exp, log, tanh"):
        symbolic.function("sinh", x)
    with pytest.raises(KeyError, match="no value for symbol 'y'"):
        evaluate(x + y, {"x": 1.0})
    with pytest.raises(TypeError, match="cannot use a str"):
        x + "y"
    with pytest.raises(ValueError, match="identifier"):
        Symbol("2x")


# -- printing fractions, non-finite numbers, free exponents ---------------------------------


def test_negative_fractions_print_like_a_division_in_brackets():
    third = symbolic.Number(Fraction(-1, 3))
    assert str(x / third) == "x/(-1/3)"
    assert str(third**x) == "(-1/3)**x"
    assert str(x**third) == "x**(-1/3)"
    assert str(x * symbolic.Number(Fraction(1, 3))) == "x*1/3"


def test_simplify_keeps_what_would_not_fold_to_a_finite_number():
    two, inf = symbolic.Number(2.0), symbolic.Number(math.inf)
    assert str(simplify(two**10000)) == "2.0**10000"  # 2.0**10000 overflows
    assert str(simplify(exp(symbolic.Number(1000)))) == "exp(1000)"
    assert str(simplify(log(symbolic.Number(0)) + sin(inf))) == "log(0) + sin(inf)"
    assert str(simplify(inf * x * 2)) == "2*inf*x"
    assert str(simplify(x**inf)) == "x**inf"
    big = symbolic.Number(1e308)
    assert str(simplify(big * 10 * x)) == "1e+308*10*x"
    assert str(simplify(big + big - x)) == "1e+308 - x + 1e+308"  # no inf constant
    assert str(simplify(exp(symbolic.Number(0)) + x / inf)) == "1"  # finite folds still fold


SPECIALS = (math.inf, -math.inf, math.nan)


@given(
    expressions(with_functions=True, max_leaves=6, specials=SPECIALS),
    st.floats(0.3, 2),
    st.floats(0.3, 2),
)
def test_simplify_is_sound_with_inf_and_nan_in_the_expression(expr, a, b):
    env = {"x": a, "y": b}
    simplified = simplify(expr)
    with np.errstate(all="ignore"):
        before = float(evaluate(expr, env))
        after = float(evaluate(simplified, env))
    assume(math.isfinite(before) and abs(before) < 1e8)
    assert after == pytest.approx(before, rel=1e-9, abs=1e-9), f"{expr}  ->  {simplified}"


@given(expressions(with_functions=True, specials=(1e308, -1e308, 5e-324, 10.0**200)))
def test_simplify_of_huge_and_tiny_numbers_gives_an_expression(expr):
    assert isinstance(simplify(expr), symbolic.Expr)


def test_power_rule_whenever_the_exponent_is_free_of_the_variable():
    assert str(diff(x**y, x)) == "y*x**(y - 1)*1"
    assert str(diff(x**y, Symbol("x"))) == "y*x**(y - 1)*1"  # symbols match by name
    # the rule for u**v takes log u: nan for u < 0, where the power rule is fine
    assert float(evaluate(diff(x**y, x), {"x": -2.0, "y": 3.0})) == 12.0
    two = symbolic.Number(1) + symbolic.Number(1)
    assert float(evaluate(diff(x**two, x), {"x": -3.0})) == -6.0
    assert float(evaluate(diff(x**y, y), {"x": 2.0, "y": 3.0})) == pytest.approx(8 * math.log(2))


def test_derivative_of_x_to_the_zero_is_zero_even_at_zero():
    assert str(diff(x**0, x)) == "0"
    assert evaluate(diff(x**0, x), {"x": 0}) == 0  # exact: not 0 * 0**-1, ZeroDivisionError
    assert float(evaluate(diff(x**0, x), {"x": 0.0})) == 0.0  # floats: not 0 * inf = nan


def _sum_of_big_terms(n):
    """x + sin(big + 1)*x + sin(big + 2)*x + ...: n terms sharing a subtree of size ~3n."""
    big = x
    for _ in range(n):
        big = sin(big * y)
    expr = x
    for i in range(n):
        expr = expr + sin(big + i) * x
    return expr


def test_simplify_walks_each_subtree_once_not_once_per_use(monkeypatch):
    walk = algebra.postorder  # the walk under bottom_up, which simplify uses
    visits = []

    def counting_postorder(expr, skip=None):
        for node in walk(expr, skip) if skip else walk(expr):
            visits.append(node)
            yield node

    monkeypatch.setattr(algebra, "postorder", counting_postorder)
    counts = []
    for n in (40, 80):
        visits.clear()
        simplify(_sum_of_big_terms(n))
        counts.append(len(visits))
    assert counts[1] < 3 * counts[0]  # linear; it was cubic (keys re-walked every use)
    keys = simplification._Keys()
    expr = _sum_of_big_terms(10)
    first = keys(expr)
    visits.clear()
    assert keys(expr) == first and visits == []  # keyed before: no walk at all


def test_printing_a_deep_chain_takes_memory_in_proportion_to_the_text():
    expr = x
    for _ in range(3000):
        expr = expr - x
    tracemalloc.start()
    try:
        text = str(expr)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert text == "x" + " - x" * 3000
    assert peak < 50 * len(text)  # each prefix kept as its own string was ~1000x the text


def test_to_graph_computes_number_only_parts_as_numpy_does():
    one, zero, two = symbolic.Number(1), symbolic.Number(0), symbolic.Number(2.0)
    with pytest.warns(RuntimeWarning):  # 1/0: inf with a warning, not ZeroDivisionError
        graph = symbolic.to_graph(one / zero + x, {"x": ad.tensor(2.0)})
    assert float(graph.value) == math.inf
    with pytest.warns(RuntimeWarning):  # 2.0**10000 overflows to inf, not OverflowError
        assert float(symbolic.to_graph(two**10000).value) == math.inf
    x32 = ad.tensor([3.0, 6.0], name="x", dtype="float32")
    graph = symbolic.to_graph(x * (one / symbolic.Number(3)), {"x": x32})
    assert graph.value.dtype == np.float32  # the folded 1/3 stays a weak Python float
    np.testing.assert_allclose(graph.value, [1.0, 2.0], rtol=1e-7)
    (dx,) = ad.gradients(graph, [x32])
    np.testing.assert_allclose(dx.value, [1 / 3, 1 / 3], rtol=1e-7)


def test_to_graph_refuses_unknown_names_and_integer_values():
    with pytest.raises(ValueError, match=r"to_graph: variables has 'X'.*symbols are \['x', 'y'\]"):
        symbolic.to_graph(x * y, {"X": 1.0})
    with pytest.raises(TypeError, match=r"to_graph: variable 'x' is 2, of integer dtype.*2.0"):
        symbolic.to_graph(x * x, {"x": 2})


def test_exact_mode_reads_a_float_as_its_binary_fraction():
    assert evaluate(x * 0.1, {"x": 1}) == Fraction(0.1) == Fraction(3602879701896397, 2**55)
    assert evaluate(x * symbolic.Number(Fraction(1, 10)), {"x": 1}) == Fraction(1, 10)
    assert float(evaluate(x * 0.1, {"x": 1.0})) == 0.1  # float mode, for comparison
