"""max / min (with ties), prod, var / std, argmax / argmin: values against NumPy, gradients
against finite differences and hand-computed results. max, min, prod, argmax and argmin are
also in the registry-wide tests (tests/shared/strategies.py, tests/ops/test_every_op.py);
var and std are compositions of ops, checked here."""

import numpy as np
import pytest

import autodiff as ad

# -- max and min -------------------------------------------------------------------------------


def test_tied_maxima_share_the_gradient_equally():
    x = ad.tensor([[3.0, 1.0, 3.0], [2.0, 2.0, 2.0]])
    (dx,) = ad.gradients(ad.max(x, axis=1), [x])
    np.testing.assert_allclose(dx.value, [[0.5, 0, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    (dx,) = ad.gradients(ad.min(x), [x])  # one minimum over everything
    np.testing.assert_array_equal(dx.value, [[0, 1, 0], [0, 0, 0]])


def test_max_of_a_constant_vector_has_the_gradient_of_its_mean():
    """With the equal split, max and mean agree on a constant vector, value and gradient:
    the sum of the gradient is 1, as the derivative of max along (1, 1, ..., 1) is."""
    x = ad.tensor(np.full(4, 2.0))
    (d_max,) = ad.gradients(ad.max(x), [x])
    (d_mean,) = ad.gradients(ad.mean(x), [x])
    np.testing.assert_allclose(d_max.value, d_mean.value)


def test_max_tangent_uses_the_same_weights():
    value, tangent = ad.jvp(lambda a: ad.max(a, axis=0), (np.array([1.0, 4.0, 4.0]),),
                            (np.array([10.0, 2.0, 6.0]),))  # fmt: skip
    assert float(value) == 4.0 and float(tangent) == 4.0  # the mean of the tied tangents


def test_second_derivative_of_max_is_zero():
    x = ad.tensor([1.0, 5.0, 2.0])
    (dx,) = ad.gradients(ad.max(x) ** 2, [x])
    np.testing.assert_array_equal(dx.value, [0, 10, 0])
    (ddx,) = ad.gradients(dx.sum(), [x])
    np.testing.assert_array_equal(ddx.value, [0, 2, 0])  # d/dx5 of 2 * max = 2


# -- prod, var, std ---------------------------------------------------------------------------


def test_prod_gradient_is_the_product_of_the_others():
    x = ad.tensor([2.0, 3.0, 4.0])
    (dx,) = ad.gradients(ad.prod(x), [x])
    np.testing.assert_allclose(dx.value, [12.0, 8.0, 6.0])


def test_prod_gradient_at_zeros_is_the_product_of_the_others_too():
    x = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 5.0], [1.0, 2.0, 4.0]])
    t = ad.tensor(x)
    with np.errstate(divide="raise", invalid="raise"):  # no 0 / 0 on the way
        (dx,) = ad.gradients(ad.sum(ad.prod(t, axis=1) * np.array([1.0, 2.0, 3.0])), [t])
    np.testing.assert_array_equal(dx.value, [[0.0, 6.0, 0.0], [0.0, 0.0, 0.0], [24.0, 12.0, 6.0]])
    (tangent,) = [ad.jvp_graph(ad.prod(t, axis=1), [t], [ad.constant(np.ones_like(x))])]
    np.testing.assert_array_equal(tangent.value, [6.0, 0.0, 14.0])
    ad.check_grads(lambda a: ad.prod(a, axis=1), [x], order=1)


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2), -1])
@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_var_and_std_match_numpy_and_finite_differences(axis, ddof, keepdims):
    x = np.random.default_rng(0).standard_normal((3, 4, 2))
    for ours, theirs in [(ad.var, np.var), (ad.std, np.std)]:
        got = ours(ad.tensor(x), axis=axis, keepdims=keepdims, ddof=ddof).value
        expected = theirs(x, axis=axis, keepdims=keepdims, ddof=ddof)
        np.testing.assert_allclose(got, expected, rtol=1e-12)
        assert np.shape(got) == np.shape(expected)
        ad.check_grads(lambda a, f=ours: f(a, axis, keepdims, ddof), [x], order=2)


def test_var_gradient_is_two_deviations_over_n():
    x_value = np.array([1.0, 2.0, 6.0])
    x = ad.tensor(x_value)
    (dx,) = ad.gradients(ad.var(x), [x])
    np.testing.assert_allclose(dx.value, 2 * (x_value - 3.0) / 3)


# -- argmax, argmin ---------------------------------------------------------------------------


def test_argmax_and_argmin_match_numpy_and_pick_the_first_tie():
    x = np.array([[1.0, 7.0, 7.0], [4.0, 0.0, 0.0]])
    for axis in (None, 0, 1, -1):
        np.testing.assert_array_equal(ad.argmax(ad.tensor(x), axis).value, np.argmax(x, axis))
        np.testing.assert_array_equal(ad.argmin(ad.tensor(x), axis).value, np.argmin(x, axis))
    assert ad.argmax(ad.tensor(x), 1).dtype == np.int64
    assert ad.argmax(ad.tensor(np.array([3, 9, 2])), 0).value == 1  # integers are fine too


def test_differentiating_through_argmax_is_a_clear_error():
    x = ad.tensor([1.0, 3.0, 2.0])
    with pytest.raises(
        ad.DTypeError, match=r"argmax is not differentiable.*integer indices.*ad\.max"
    ):
        ad.gradients(ad.argmax(x), [x])
    with pytest.raises(ad.DTypeError, match="argmin"):
        ad.gradients(ad.argmin(x), [x])
    assert not ad.Op.registry["argmax"].differentiable


def test_argmax_as_labels_passes_no_gradient():
    """argmax feeding an integer input (class labels) is fine: no gradient flows there."""
    logits = ad.tensor([[2.0, 0.5], [0.1, 1.0]])
    targets = ad.argmax(ad.constant(np.array([[0.0, 1.0], [1.0, 0.0]])), axis=1)
    loss = ad.softmax_cross_entropy(logits, targets)
    (d_logits,) = ad.gradients(loss, [logits])
    assert d_logits.value.shape == (2, 2)
    value, tangent = ad.jvp(lambda z: ad.softmax_cross_entropy(z, ad.argmax(z, 1)),
                            (logits.value,), (np.ones((2, 2)),))  # fmt: skip
    assert float(tangent) == pytest.approx(0.0, abs=1e-12)  # adding 1 to a row changes nothing
