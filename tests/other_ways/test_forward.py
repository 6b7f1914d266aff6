"""Dual numbers: each rule against the engine and finite differences, arrays, pass counts."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import autodiff as ad
from autodiff import forward, numerical
from autodiff.forward import Dual


def test_the_classic_example():
    def f(x, y):
        return x**2 * y + y + 2

    assert f(Dual(3, 1), Dual(4, 0)).value == 42
    assert f(Dual(3, 1), Dual(4, 0)).tangent == 24
    assert f(Dual(3, 0), Dual(4, 1)).tangent == 10
    np.testing.assert_allclose(forward.jacobian(lambda v: f(v[0], v[1]), [3.0, 4.0]), [24, 10])


UNARY = {
    "sin": (math.sin, 0.4),
    "cos": (math.cos, 0.4),
    "tan": (math.tan, 0.4),
    "exp": (math.exp, 0.4),
    "log": (math.log, 1.7),
    "sqrt": (math.sqrt, 1.7),
    "tanh": (math.tanh, 0.4),
    "sigmoid": (lambda v: 1 / (1 + math.exp(-v)), -0.8),
}


@pytest.mark.parametrize("name", UNARY)
def test_each_function_against_finite_differences(name):
    reference, x = UNARY[name]
    out = getattr(forward, name)(Dual(x, 1.0))
    assert out.value == pytest.approx(reference(x), rel=1e-14)
    assert out.tangent == pytest.approx(numerical.derivative(reference, x), rel=1e-8)
    assert getattr(forward, name)(x) == pytest.approx(reference(x), rel=1e-14)  # plain numbers


OPERATORS = [
    lambda x: x + 2.5,
    lambda x: 2.5 + x,
    lambda x: x - 2.5,
    lambda x: 2.5 - x,
    lambda x: 3 * x * x,
    lambda x: x / 1.5,
    lambda x: 1.5 / x,
    lambda x: x**3,
    lambda x: x**0.5,
    lambda x: 2**x,
    lambda x: x**x,
    lambda x: -x,
    lambda x: +x,
]


@pytest.mark.parametrize("op", OPERATORS)
@given(x=st.floats(0.2, 3.0))
def test_each_operator_against_finite_differences(op, x):
    out = op(Dual(x, 1.0))
    assert out.value == pytest.approx(op(x), rel=1e-14)
    assert out.tangent == pytest.approx(numerical.derivative(op, x), rel=1e-7, abs=1e-9)


def test_power_zero_has_zero_derivative_even_at_zero():
    out = Dual(0.0, 1.0) ** 0
    assert (out.value, out.tangent) == (1.0, 0.0)


def test_comparisons_look_at_the_value_so_branches_work():
    def relu_like(x):
        return x * x if x > 0 else -x

    assert forward.derivative(relu_like, 3.0) == 6.0
    assert forward.derivative(relu_like, -3.0) == -1.0
    assert Dual(2.0, 5.0) == 2.0 and Dual(1.0, 0.0) <= Dual(1.0, 9.0)


def test_numpy_numbers_and_arrays_defer_to_dual():
    assert isinstance(np.float64(2.0) * Dual(1.0, 1.0), Dual)
    out = np.array([1.0, 2.0]) * Dual(np.array([3.0, 4.0]), 1.0)
    assert isinstance(out, Dual)
    np.testing.assert_array_equal(out.tangent, [1.0, 2.0])


def test_vector_forward_mode_gives_a_directional_derivative():
    a = np.random.default_rng(0).standard_normal((3, 4))

    def f_engine(v):
        return ad.tanh(ad.matmul(ad.constant(a), v)) * 2

    def f_dual(v):
        return forward.tanh(a @ v) * 2

    x = np.linspace(-1, 1, 4).reshape(4, 1)  # columns: the engine's matmul wants matrices
    v = np.array([[0.5], [-1.0], [2.0], [0.1]])
    value, tangent = forward.jvp(f_dual, x, v)
    engine_value, engine_tangent = ad.jvp(f_engine, (x,), (v,))
    np.testing.assert_allclose(value, engine_value, rtol=1e-14)
    np.testing.assert_allclose(tangent, engine_tangent, rtol=1e-12)


def test_jacobian_matches_numerical_and_counts_one_pass_per_input():
    def f(v):
        return forward.sin(v) * v.sum() + forward.exp(v[0])

    x = np.array([0.3, -1.2, 2.0, 0.7])
    with forward.count_passes() as counter:
        jac = forward.jacobian(f, x)
    assert counter.passes == 4
    assert jac.shape == (4, 4)
    np.testing.assert_allclose(
        jac, numerical.jacobian(lambda v: np.sin(v) * v.sum() + np.exp(v[0]), x), rtol=1e-7
    )


def test_pass_count_grows_with_inputs():
    counts = []
    for n in (1, 5, 20):
        with forward.count_passes() as counter:
            forward.jacobian(lambda v: (v * v).sum(), np.ones(n))
        counts.append(counter.passes)
    assert counts == [1, 5, 20]


def test_derivative_of_an_elementwise_array_function():
    x = np.array([0.1, 1.0, 2.0])
    np.testing.assert_allclose(forward.derivative(lambda v: v * forward.log(v), x), np.log(x) + 1)


def test_float32_stays_float32():
    x = np.array([1.0, 2.0], dtype=np.float32)
    out = forward.sin(Dual(x, 1.0)) * 2.0 + 1
    assert out.value.dtype == np.float32 and out.tangent.dtype == np.float32


def test_constant_function_has_zero_derivative():
    assert forward.derivative(lambda x: 7.0, 3.0) == 0


def test_clear_errors():
    with pytest.raises(TypeError, match="tagged perturbations"):
        Dual(Dual(1.0, 1.0), 0.0)
    with pytest.raises(ValueError, match=r"shape \(2,\) but x has shape \(3,\)"):
        forward.jvp(lambda v: v, np.ones(3), np.ones(2))


# -- dtypes, special values, list outputs --------------------------------------------------


def test_integer_values_and_tangents_become_float64_never_truncated():
    d = Dual(np.array([1, 2]), 0.5)
    assert d.value.dtype == np.float64 and d.tangent.dtype == np.float64
    np.testing.assert_array_equal(d.tangent, [0.5, 0.5])
    np.testing.assert_array_equal((Dual(np.arange(3), 1) * 0.5).tangent, [0.5, 0.5, 0.5])
    d = Dual(np.array([1.0, 2.0], dtype=np.float32), np.array([1, 3]))
    assert d.tangent.dtype == np.float32 and d.tangent.tolist() == [1.0, 3.0]
    d = Dual(np.int64(3), 1)
    assert d.value.dtype == np.float64 and (d / 2).tangent == 0.5
    assert Dual(3, 1).value == 3.0 and type(Dual(3, 1).value) is float


def test_a_dual_refuses_values_that_are_not_numbers():
    with pytest.raises(TypeError, match=r"Dual: the value has dtype object.*list of Duals"):
        Dual([Dual(1.0, 1.0), Dual(2.0, 0.0)])


def test_tangent_shape_mismatch_names_both_shapes():
    with pytest.raises(
        ValueError, match=r"Dual: tangent has shape \(2,\) but value has shape \(3,\)"
    ):
        Dual(np.ones(3), np.ones(2))


@pytest.mark.parametrize(
    "f, expected",
    [
        (lambda x: forward.sqrt(x), (0.0, np.inf)),
        (lambda x: forward.log(x), (-np.inf, np.inf)),
        (lambda x: x**0.5, (0.0, np.inf)),
        (lambda x: x**-1, (np.inf, -np.inf)),
        (lambda x: 1.0 / x, (np.inf, -np.inf)),
        (lambda x: 0 ** (x + 1), (0.0, np.nan)),  # d/dy 0**y: log 0 is -inf
    ],
)
def test_python_float_duals_at_zero_behave_like_numpy_floats(f, expected):
    with pytest.warns(RuntimeWarning):
        out = f(Dual(0.0, 1.0))
    with pytest.warns(RuntimeWarning):
        numpy_out = f(Dual(np.float64(0.0), 1.0))
    assert type(out.value) is float and type(out.tangent) is float
    np.testing.assert_equal((out.value, out.tangent), expected)
    np.testing.assert_equal((out.value, out.tangent), (numpy_out.value, numpy_out.tangent))


def test_python_float_overflow_and_negative_roots_are_numpy_like():
    with pytest.warns(RuntimeWarning):
        assert (Dual(10.0, 1.0) ** 400).value == np.inf
    with pytest.warns(RuntimeWarning):
        assert np.isnan((Dual(-8.0, 1.0) ** (1 / 3)).value)  # nan, not a complex number


@pytest.mark.parametrize(
    "exponent",
    [Dual(2.0, 0.0), np.float64(2.0), Dual(np.float64(2.0), np.float64(0.0)), 2],
    ids=["Dual with zero tangent", "numpy float", "numpy Dual", "int"],
)
def test_constant_exponent_uses_the_power_rule_for_a_negative_base(exponent):
    out = Dual(-2.0, 1.0) ** exponent
    assert (float(out.value), float(out.tangent)) == (4.0, -4.0)


def test_constant_array_exponent_with_zeros_and_negative_bases():
    x = Dual(np.array([-2.0, 0.0, 3.0]), 1.0)
    for exponent in (np.array([3.0, 0.0, 2.0]), Dual(np.array([3.0, 0.0, 2.0]), 0.0)):
        out = x**exponent
        np.testing.assert_array_equal(out.value, [-8.0, 1.0, 9.0])
        np.testing.assert_array_equal(out.tangent, [12.0, 0.0, 6.0])
    out = Dual(0.0, 1.0) ** np.float64(0.0)
    assert (float(out.value), float(out.tangent)) == (1.0, 0.0)


def test_varying_exponent_still_uses_the_general_rule():
    out = Dual(2.0, 0.0) ** Dual(3.0, 1.0)  # d/dy 2**y = 2**y log 2
    assert out.tangent == pytest.approx(8 * math.log(2), rel=1e-15)


@pytest.mark.parametrize("container", [list, tuple, np.array])
def test_jvp_and_jacobian_stack_a_list_of_outputs(container):
    def f(v):
        return container([v[0] * v[1], forward.sin(v[0]), 7.0])

    value, tangent = forward.jvp(f, [1.0, 2.0], [1.0, 0.0])
    np.testing.assert_allclose(value, [2.0, np.sin(1.0), 7.0])
    np.testing.assert_allclose(tangent, [2.0, np.cos(1.0), 0.0])
    jac = forward.jacobian(f, [1.0, 2.0])
    np.testing.assert_allclose(jac, [[2.0, 1.0], [np.cos(1.0), 0.0], [0.0, 0.0]])


def test_jvp_refuses_a_list_of_outputs_of_different_shapes():
    with pytest.raises(
        ValueError, match=r"forward.jvp: f returned a list.*shapes \[\(\), \(2,\)\]"
    ):
        forward.jvp(lambda v: [v[0], v], np.ones(2), np.ones(2))


def test_truth_value_of_a_dual():
    assert not Dual(0.0, 1.0) and Dual(np.float64(2.0), 0.0)
    with pytest.raises(ValueError, match=r"Dual: the truth value of a Dual with shape \(2,\)"):
        bool(Dual(np.ones(2), 0.0))


def test_sum_of_a_scalar_dual_is_itself():
    out = Dual(2.0, 1.0).sum()
    assert (out.value, out.tangent) == (2.0, 1.0)
    out = Dual(np.ones((2, 3)), 1.0).sum(axis=0)
    np.testing.assert_array_equal(out.tangent, [2.0, 2.0, 2.0])


def test_numpy_functions_on_a_dual_point_to_autodiff_forward():
    with pytest.raises(TypeError, match=r"numpy.sin.*autodiff.forward.sin"):
        np.sin(Dual(1.0, 1.0))
    with pytest.raises(TypeError, match=r"numpy.arctan.*has no arctan.*np.arctan\(x.value\)"):
        np.arctan(Dual(1.0, 1.0))
    a = np.ones(2)
    with pytest.raises(TypeError, match=r"in-place.*a = a \+ x"):
        a += Dual(np.ones(2), 0.0)
    # NumPy's operators still hand over to Dual's own rules
    out = np.float64(2.0) ** Dual(3.0, 1.0)
    assert out.tangent == pytest.approx(8 * math.log(2))
    assert (np.array([1.0, 5.0]) < Dual(np.array([2.0, 2.0]), 0.0)).tolist() == [True, False]
