"""Finite differences, and check_grads catching wrong rules with a readable report."""

import numpy as np
import pytest

import autodiff as ad
from autodiff import numerical


@pytest.mark.parametrize("method", ["forward", "backward", "central"])
def test_derivative_of_a_cubic(method):
    tolerance = 1e-9 if method == "central" else 1e-6
    assert numerical.derivative(lambda x: x**3, 2.0, method=method) == pytest.approx(
        12.0, rel=tolerance
    )


def test_central_beats_forward_at_their_default_steps():
    exact = np.cos(1.0)
    central = abs(numerical.derivative(np.sin, 1.0) - exact)
    forward = abs(numerical.derivative(np.sin, 1.0, method="forward") - exact)
    assert central < forward / 10


def test_gradient_of_an_array_function():
    x = np.array([[1.0, -2.0], [0.5, 3.0]])
    np.testing.assert_allclose(numerical.gradient(lambda v: (v**3).sum(), x), 3 * x**2, rtol=1e-8)


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="central"):
        numerical.derivative(np.sin, 1.0, method="sideways")


class WrongSin(ad.Op, register=False):
    """Y = sin(X), with the sign of its gradient rule wrong:  dX = -dY cos(X)."""

    def compute(self, x):
        return np.sin(x)

    def gradient(self, node, output_grad):
        return [-output_grad * ad.cos(node.inputs[0])]

    def jvp(self, node, x_dot):
        return x_dot * ad.cos(node.inputs[0])


class WrongSquareTangent(ad.Op, register=False):
    """Y = X**2, right gradient (2 X dY), wrong tangent (X X')."""

    def compute(self, x):
        return x**2

    def gradient(self, node, output_grad):
        return [2 * output_grad * node.inputs[0]]

    def jvp(self, node, x_dot):
        return x_dot * node.inputs[0]


class WrongSecondDerivative(ad.Op, register=False):
    """Y = X**3 with dX = 3 dY X**2 written via a node that has no gradient (step)."""

    def compute(self, x):
        return x**3

    def gradient(self, node, output_grad):
        x = node.inputs[0]
        return [output_grad * 3 * ad.constant(x.value**2)]

    def jvp(self, node, x_dot):
        return x_dot * 3 * node.inputs[0] ** 2


def test_check_grads_catches_a_wrong_gradient_rule():
    with pytest.raises(AssertionError, match=r"reverse mode.*argument 0.*max error"):
        ad.check_grads(WrongSin.apply, [np.array([0.3, 1.2])], modes=("rev",))
    ad.check_grads(WrongSin.apply, [np.array([0.3, 1.2])], modes=("fwd",))


def test_check_grads_catches_a_wrong_tangent_rule():
    with pytest.raises(AssertionError, match=r"forward mode"):
        ad.check_grads(WrongSquareTangent.apply, [np.array([0.3, 1.2])])
    ad.check_grads(WrongSquareTangent.apply, [np.array([0.3, 1.2])], modes=("rev",))


def test_order_two_catches_a_rule_that_is_right_only_to_first_order():
    x = [np.array([0.3, 1.2])]
    ad.check_grads(WrongSecondDerivative.apply, x, order=1, modes=("rev",))
    with pytest.raises(AssertionError):
        ad.check_grads(WrongSecondDerivative.apply, x, order=2, modes=("rev",))


def test_check_grads_names_the_failing_argument():
    def f(a, b):
        return a * WrongSin.apply(b)

    with pytest.raises(AssertionError, match="argument 1"):
        ad.check_grads(f, [np.array([0.5]), np.array([0.7])], modes=("rev",))


def test_check_grads_in_float32_uses_the_looser_tolerance():
    x = np.array([0.3, 1.2, -0.7], dtype=np.float32)
    ad.check_grads(lambda a: ad.tanh(a) * a, [x], order=2)


def test_check_grads_refuses_integer_arguments():
    with pytest.raises(TypeError, match="floating"):
        ad.check_grads(ad.sin, [np.array([1, 2])])


def test_gradient_leaves_the_callers_array_alone_even_when_f_fails():
    x = np.array([1.0, 2.0])

    def failing(v):
        raise RuntimeError("f broke")

    with pytest.raises(RuntimeError):
        numerical.gradient(failing, x)
    np.testing.assert_array_equal(x, [1.0, 2.0])


# -- step sizes, convergence and the complex step ------------------------------------------


def _slope(method, hs):
    """The slope of log(error) against log(h) for d/dx exp at 1: the method's order."""
    errors = [abs(numerical.derivative(np.exp, 1.0, h, method) - np.e) for h in hs]
    return np.polyfit(np.log(hs), np.log(errors), 1)[0]


def test_forward_differences_converge_like_h_and_central_like_h_squared():
    hs = np.logspace(-4, -1, 7)
    assert _slope("forward", hs) == pytest.approx(1, abs=0.05)
    assert _slope("backward", hs) == pytest.approx(1, abs=0.05)
    assert _slope("central", hs) == pytest.approx(2, abs=0.05)


def test_rounding_makes_tiny_steps_worse():
    curve = numerical.error_curve(np.exp, np.exp, 1.0)
    for method in ("forward", "central"):
        best_h, best_error = curve.best(method)
        tiny = curve.errors[method][curve.steps.index(1e-14)]
        assert 1e-14 < best_h < 1e-2
        assert tiny > 100 * best_error
    assert curve.best("central")[1] < curve.best("forward")[1]


def test_default_steps_sit_near_the_best_steps():
    curve = numerical.error_curve(np.sin, np.cos, 1.0, hs=np.logspace(-12, -2, 41))
    for method in ("forward", "central"):
        best_h, best_error = curve.best(method)
        default_error = abs(numerical.derivative(np.sin, 1.0, method=method) - np.cos(1.0))
        assert default_error < 30 * best_error
        assert 0.01 < numerical.default_step(1.0, method) / best_h < 100


def test_default_step_scales_with_x():
    assert numerical.default_step(1e6) == pytest.approx(1e6 * numerical.default_step(1.0))
    # log has features the size of x: a step scaled to x keeps rounding error small
    scaled = numerical.derivative(np.log, 1e6)
    unscaled = numerical.derivative(np.log, 1e6, h=numerical.default_step(1.0))
    assert abs(scaled - 1e-6) < abs(unscaled - 1e-6) / 100
    assert scaled == pytest.approx(1e-6, rel=1e-8)


def test_complex_step_is_exact_to_rounding_at_tiny_steps():
    for f, df, x in [(np.sin, np.cos, 1.0), (np.exp, np.exp, -0.5), (np.tanh, None, 0.3)]:
        exact = df(x) if df else 1 - np.tanh(x) ** 2
        assert numerical.derivative(f, x, h=1e-20, method="complex") == pytest.approx(
            exact, rel=4e-16, abs=0
        )
    curve = numerical.error_curve(np.sin, np.cos, 1.0, hs=[1e-8, 1e-20, 1e-100])
    assert max(curve.errors["complex"]) <= 2.3e-16


def test_complex_step_refuses_functions_that_drop_the_imaginary_part():
    with pytest.raises(TypeError, match="came back real.*abs"):
        numerical.derivative(lambda x: abs(x) ** 2, 1.0, method="complex")
    import math

    with pytest.raises(TypeError, match="accept complex input"):
        numerical.derivative(math.sin, 1.0, method="complex")


def test_jacobian_of_a_vector_function():
    a = np.array([[1.0, 2.0, 0.5], [-1.0, 0.0, 3.0]])
    x = np.array([0.3, -0.2, 0.9])
    for method, rtol in [("central", 1e-8), ("forward", 1e-6), ("complex", 1e-14)]:
        jac = numerical.jacobian(lambda v: np.sin(a @ v), x, method=method)
        np.testing.assert_allclose(jac, np.cos(a @ x)[:, None] * a, rtol=rtol)


def test_jacobian_shape_is_output_shape_then_input_shape():
    x = np.ones((2, 3))
    assert numerical.jacobian(lambda v: v.sum(axis=0), x).shape == (3, 2, 3)
    assert numerical.jacobian(lambda v: (v**2).sum(), x).shape == (2, 3)


def test_gradient_refuses_a_vector_output():
    with pytest.raises(ValueError, match=r"returned shape \(3,\).*jacobian"):
        numerical.gradient(lambda v: v * 2, np.ones(3))


def test_jacobian_never_changes_the_callers_array():
    x = np.array([1.0, 2.0])
    numerical.jacobian(lambda v: v * v, x)
    np.testing.assert_array_equal(x, [1.0, 2.0])


# -- low precision, NaN errors, list outputs -------------------------------------------------


@pytest.mark.parametrize("dtype, eps", [("float16", 9.765625e-4), ("float32", 1.1920929e-7)])
def test_default_step_follows_the_dtype_of_x(dtype, eps):
    x = np.array([1.0, 3.0], dtype=dtype)
    assert numerical.default_step(1.0, "central", dtype) == pytest.approx(eps ** (1 / 3))
    assert numerical.default_step(1.0, "forward", dtype) == pytest.approx(eps ** (1 / 2))
    # with a float64 step, x + h == x in float16: the difference would be 0
    derivative = numerical.derivative(lambda v: v**2, x)
    assert derivative.dtype == np.dtype(dtype)
    np.testing.assert_allclose(derivative, 2 * x, rtol=2 * eps ** (2 / 3))  # the balance


def test_float32_derivative_is_accurate_to_the_float32_balance():
    derivative = numerical.derivative(np.exp, np.float32(1.0))
    assert derivative.dtype == np.float32
    assert abs(derivative - np.e) < 1e-3  # a float64 step gives about 1e-2


def test_best_step_ignores_nan_errors():
    curve = numerical.ErrorCurve([1e-1, 1e-2, 1e-3], {"central": [np.nan, 1e-4, 1e-6]}, 0.0)
    assert curve.best("central") == (1e-3, 1e-6)
    # sqrt near 0: big steps leave the domain (nan), the smallest step is still usable
    with np.errstate(invalid="ignore"):
        curve = numerical.error_curve(np.sqrt, lambda v: 0.5 / np.sqrt(v), 1e-3, hs=[1e-2, 1e-6])
    assert np.isnan(curve.errors["central"][0])
    assert curve.best("central")[0] == 1e-6


def test_best_step_of_an_all_nan_curve_says_why():
    curve = numerical.ErrorCurve([1e-1, 1e-2], {"forward": [np.nan, np.nan]}, np.nan)
    with pytest.raises(ValueError, match=r"ErrorCurve.best: every error of 'forward' is NaN"):
        curve.best("forward")
    with pytest.raises(KeyError, match=r"no errors for method 'central'.*\['forward'\]"):
        curve.best("central")


def test_error_curve_takes_a_single_method_name():
    curve = numerical.error_curve(np.sin, np.cos, 1.0, hs=[1e-3, 1e-5], methods="central")
    assert list(curve.errors) == ["central"]
    assert curve.best("central")[1] < 1e-9


@pytest.mark.parametrize("method", ["forward", "backward", "central", "complex"])
def test_derivative_of_a_function_returning_a_list(method):
    derivative = numerical.derivative(lambda t: [t * t, np.sin(t)], 0.5, method=method)
    np.testing.assert_allclose(derivative, [1.0, np.cos(0.5)], rtol=1e-6)


class SlightlyWrongSquare(ad.Op, register=False):
    """Y = X**2, with a gradient rule 50% too big (3 X dY) and a right tangent."""

    def compute(self, x):
        return x**2

    def gradient(self, node, output_grad):
        return [3 * output_grad * node.inputs[0]]

    def jvp(self, node, x_dot):
        return 2 * x_dot * node.inputs[0]


FLOAT16_FUNCTIONS = [
    (lambda x: ad.sin(x) * x, [(5,)]),
    (lambda x, w: ad.tanh(x @ w), [(4, 3), (3, 2)]),
    (lambda z: ad.softmax_cross_entropy(z, np.array([0, 2, 1, 1])), [(4, 3)]),
    (lambda x: ad.mean(x**3), [(10, 10)]),
]


@pytest.mark.parametrize("f, shapes", FLOAT16_FUNCTIONS)
@pytest.mark.parametrize("seed", range(4))
def test_check_grads_passes_right_float16_rules(f, shapes, seed):
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(shape).astype(np.float16) for shape in shapes]
    ad.check_grads(f, args, order=2, seed=seed)


def test_check_grads_still_catches_wrong_float16_rules():
    x = np.array([0.3, 1.2, -0.7], dtype=np.float16)
    with pytest.raises(AssertionError, match=r"reverse mode.*float16"):
        ad.check_grads(SlightlyWrongSquare.apply, [x], modes=("rev",))
    ad.check_grads(SlightlyWrongSquare.apply, [x], modes=("fwd",))
    with pytest.raises(AssertionError, match=r"reverse mode.*float16"):
        ad.check_grads(WrongSin.apply, [x], modes=("rev",))
    with pytest.raises(AssertionError, match=r"forward mode.*float16"):
        ad.check_grads(WrongSquareTangent.apply, [x], modes=("fwd",))
