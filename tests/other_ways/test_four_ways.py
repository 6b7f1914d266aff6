"""The four ways to differentiate agree: symbolic, numerical, forward (dual), reverse.

Each test function is written once against a namespace ``m`` of sin/cos/exp/log/tanh,
then run with NumPy (numerical), autodiff.forward (dual numbers), autodiff.symbolic
(expressions) and autodiff itself (reverse mode).
"""

import pathlib
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import autodiff as ad
from autodiff import forward, numerical, symbolic

SUITE = {
    "classic": lambda m, x, y: x**2 * y + y + 2,
    "trigonometry": lambda m, x, y: m.sin(x * y) + m.cos(x) / y,
    "exp and log": lambda m, x, y: m.exp(x / y) * m.log(y),
    "tanh and power": lambda m, x, y: m.tanh(x) ** 3 - x**y,
    "quotient": lambda m, x, y: (x - y) / (1 + x * x),
}
POINTS = [(3.0, 4.0), (0.7, 1.3), (np.array([0.3, 0.9, 1.4]), np.array([1.1, 0.5, 2.0]))]


def by_symbolic(f, x, y):
    X, Y = symbolic.Symbol("x"), symbolic.Symbol("y")
    expr, env = f(symbolic, X, Y), {"x": x, "y": y}
    grads = [symbolic.evaluate(symbolic.diff(expr, v), env) for v in (X, Y)]
    return symbolic.evaluate(expr, env), grads


def by_numerical(f, x, y, method):
    dx = numerical.derivative(lambda t: f(np, t, y), x, method=method)
    dy = numerical.derivative(lambda t: f(np, x, t), y, method=method)
    return f(np, x, y), [dx, dy]


def by_forward(f, x, y):
    out_x = f(forward, forward.Dual(x, 1.0), forward.Dual(y, 0.0))
    out_y = f(forward, forward.Dual(x, 0.0), forward.Dual(y, 1.0))
    return out_x.value, [out_x.tangent, out_y.tangent]


def by_reverse(f, x, y):
    xs, ys = ad.tensor(x), ad.tensor(y)
    out = f(ad, xs, ys)
    return out.value, [g.value for g in ad.gradients(out, [xs, ys])]  # elementwise f


@pytest.mark.parametrize("point", POINTS, ids=["classic point", "scalars", "arrays"])
@pytest.mark.parametrize("name", SUITE)
def test_four_methods_agree(name, point):
    f, (x, y) = SUITE[name], point
    value, exact = by_reverse(f, x, y)
    for other_value, grads, tolerance in [
        (*by_symbolic(f, x, y), 1e-12),
        (*by_forward(f, x, y), 1e-12),
        (*by_numerical(f, x, y, "complex"), 1e-12),
        (*by_numerical(f, x, y, "central"), 1e-7),
    ]:
        np.testing.assert_allclose(np.asarray(other_value, float), value, rtol=1e-12)
        for g, e in zip(grads, exact, strict=True):
            np.testing.assert_allclose(np.asarray(g, float), e, rtol=tolerance, atol=tolerance)


def test_classic_values_are_the_textbook_numbers():
    value, (dx, dy) = by_reverse(SUITE["classic"], 3.0, 4.0)
    assert (float(value), float(dx), float(dy)) == (42.0, 24.0, 10.0)


# -- <J v, u> = <v, J^T u>: forward and reverse mode are transposes of each other ---------

UNARY = ["sin", "cos", "tanh", "exp", "sigmoid"]


@st.composite
def random_functions(draw):
    """f(x) = g_k(A_k ... g_1(A_1 x)): random layers, elementwise functions and sizes."""
    sizes = draw(st.lists(st.integers(1, 4), min_size=2, max_size=4))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    weights = [rng.standard_normal((b, a)) / np.sqrt(a) for a, b in pairwise(sizes)]
    names = [draw(st.sampled_from(UNARY)) for _ in weights]

    def f(m, x):
        for w, name in zip(weights, names, strict=True):
            x = getattr(m, name)(w @ x if m is forward else ad.matmul(ad.constant(w), x))
        return x

    x = rng.standard_normal((sizes[0], 1))
    v = rng.standard_normal((sizes[0], 1))
    u = rng.standard_normal((sizes[-1], 1))
    return f, x, v, u


@given(random_functions())
def test_jvp_and_vjp_are_transposes(case):
    f, x, v, u = case
    _, jv = ad.jvp(lambda t: f(ad, t), (x,), (v,))
    _, pullback = ad.vjp(lambda t: f(ad, t), x)
    (jtu,) = pullback(u)
    assert float((jv * u).sum()) == pytest.approx(float((v * jtu).sum()), rel=1e-10, abs=1e-12)
    _, dual_jv = forward.jvp(lambda t: f(forward, t), x, v)  # dual numbers, same J v
    np.testing.assert_allclose(dual_jv, jv, rtol=1e-12, atol=1e-14)


# -- the students' page says what the code does ---------------------------------------------

STUDENTS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "students.md"


def _four_ways_section():
    text = STUDENTS.read_text().split("## The four ways to differentiate", 1)[1]
    return text.split("\n## ", 1)[0]


def test_the_four_ways_blocks_run_and_show_real_results():
    section = _four_ways_section()
    blocks = [part.split("```")[0] for part in section.split("```python")[1:]]
    namespace = {}
    for block in blocks:
        if "plt." not in block:  # the plotting lines need matplotlib and a figure
            exec(compile(block, "docs/students.md (four ways)", "exec"), namespace)
    dual_line = next(line for line in section.splitlines() if line.startswith("dual = "))
    assert dual_line.split("# ", 1)[1].strip() == repr(namespace["dual"])
    assert [float(namespace["dx"].value), float(namespace["dy"].value)] == [24.0, 10.0]


def test_the_best_steps_central_near_1e_5_forward_near_1e_8():
    section = " ".join(_four_ways_section().split())
    assert "below about h = 1e-5" in section and "best near h = 1e-8" in section
    curve = numerical.error_curve(np.sin, np.cos, 1.0)
    assert 1e-6 <= curve.best("central")[0] <= 1e-4
    assert 1e-9 <= curve.best("forward")[0] <= 1e-7
