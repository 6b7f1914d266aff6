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
