"""Numerically stable forms: no overflow, no nan, where the naive formula would fail."""

import subprocess
import sys
import warnings

import numpy as np
import pytest

import autodiff as ad


@pytest.fixture(autouse=True)
def numpy_warnings_are_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
            yield


def test_cross_entropy_with_huge_logits():
    logits = ad.tensor([[1e4, 0.0, -1e4], [0.0, 1e4, 0.0]])
    loss = ad.softmax_cross_entropy(logits, [0, 2])
    assert loss.value == pytest.approx((0.0 + 1e4) / 2)
    (grad,) = ad.gradients(loss, [logits])
    np.testing.assert_allclose(grad.value, [[0.0, 0.0, 0.0], [0.0, 0.5, -0.5]], atol=1e-12)


def test_logsumexp_and_softmax_of_large_values():
    x = ad.tensor([1000.0, 1000.0])
    assert ad.logsumexp(x).value == pytest.approx(1000 + np.log(2))
    np.testing.assert_allclose(ad.softmax(x).value, [0.5, 0.5])
    np.testing.assert_allclose(ad.log_softmax(x).value, [-np.log(2)] * 2)


def test_logsumexp_of_an_all_minus_infinity_row_is_minus_infinity():
    with np.errstate(divide="ignore"):
        x = ad.tensor([[-np.inf, -np.inf], [0.0, 0.0]])
        out = ad.logsumexp(x, axis=1).value
    assert out[0] == -np.inf and out[1] == pytest.approx(np.log(2))


def test_sigmoid_saturates_without_overflow():
    out = ad.sigmoid(ad.tensor([-1000.0, 0.0, 1000.0]))
    np.testing.assert_array_equal(out.value, [0.0, 0.5, 1.0])


def test_float32_cross_entropy_with_large_logits():
    logits = ad.tensor(np.array([[80.0, -80.0]], dtype=np.float32))  # exp(80) overflows
    loss = ad.softmax_cross_entropy(logits, [1])
    assert loss.dtype == np.float32 and loss.value == pytest.approx(160.0)


def test_importing_autodiff_never_imports_cupy():
    code = "import sys, autodiff; print('cupy' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


@pytest.mark.parametrize("op", [ad.softmax, ad.log_softmax])
@pytest.mark.parametrize("shape", [(2, 0), (0, 3), (0,)])
def test_softmax_over_an_empty_axis_is_empty_with_an_empty_gradient(op, shape):
    x = ad.tensor(np.zeros(shape))
    y = op(x)
    assert y.value.shape == shape
    (dx,) = ad.gradients(ad.sum(y * y), [x])
    assert dx.value.shape == shape
    assert ad.jvp_graph(y, [x], [np.ones(shape)]).value.shape == shape


@pytest.mark.parametrize(
    "shape, axis, keepdims, expected",
    [
        ((2, 0), -1, False, [-np.inf, -np.inf]),  # the log of an empty sum, per row
        ((2, 0), -1, True, [[-np.inf], [-np.inf]]),
        ((2, 0), None, False, -np.inf),
        ((2, 0), 0, False, np.zeros(0)),  # a non-empty axis of an empty array: empty
        ((0, 3), -1, False, np.zeros(0)),
    ],
)
def test_logsumexp_over_an_empty_axis_is_minus_infinity(shape, axis, keepdims, expected):
    x = ad.tensor(np.zeros(shape))
    y = ad.logsumexp(x, axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(y.value, expected)
    (dx,) = ad.gradients(y, [x])  # seeded with ones: the gradient of sum(y)
    assert dx.value.shape == shape
    np.testing.assert_array_equal(
        ad.jvp_graph(y, [x], [np.ones(shape)]).value, np.zeros_like(expected)
    )


@pytest.mark.parametrize("labels", ["indices", "probabilities"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_entropy_rows_far_below_the_batch_max_get_their_own_shift(labels, dtype):
    # The coarse op shifts every row by the batch's max (one fast reduction) only when no
    # value lies so far below it that its exp loses bits (exp(-800 - 10) is 0 even in
    # float64); here every row must get its own max. Expected: float64, each row by its
    # own max.
    logits = np.array(
        [[[0.0, 1.0, 10.0], [-800.0, -801.0, -799.0]], [[-60.0, -59.0, -61.0], [3.0, 2.0, 1.0]]],
        dtype=dtype,
    )
    indices = np.array([[2, 0], [1, 1]])
    probs = np.eye(3)[indices] * 0.8 + 0.05  # rows sum to 0.95
    z64 = logits.astype(np.float64)
    log_softmax = z64 - z64.max(-1, keepdims=True)
    log_softmax -= np.log(np.exp(log_softmax).sum(-1, keepdims=True))
    targets, p = (indices, np.eye(3)[indices]) if labels == "indices" else (probs, probs)
    expected_loss = -(p * log_softmax).sum() / 4
    expected_grad = (np.exp(log_softmax) * p.sum(-1, keepdims=True) - p) / 4
    z = ad.tensor(logits)
    loss = ad.softmax_cross_entropy(z, targets.astype(dtype) if labels != "indices" else targets)
    (grad,) = ad.gradients(loss, [z])
    assert loss.dtype == grad.dtype == dtype
    eps = float(np.finfo(dtype).eps)  # logits near -800 carry 800 * eps of rounding
    assert float(loss.value) == pytest.approx(expected_loss, abs=2000 * eps)
    np.testing.assert_allclose(grad.value, expected_grad, rtol=10 * eps, atol=eps)


def test_cross_entropy_of_one_hot_probabilities_is_as_accurate_as_of_indices():
    # A small loss next to large logits: row by row, both label kinds keep it to about
    # 4e-4 of the exact value (9e-9 in all: float32's rounding); summing P * (lse - z) as
    # two batch totals (BLAS's dot) would lose three times as much.
    rng = np.random.default_rng(0)
    logits = (rng.normal(size=(1024, 10)) * 2).astype(np.float32)
    indices = rng.integers(0, 10, 1024)
    logits[np.arange(1024), indices] += 17
    one_hot = np.eye(10, dtype=np.float32)[indices]
    by_index = float(ad.softmax_cross_entropy(ad.tensor(logits), indices).value)
    by_probability = float(ad.softmax_cross_entropy(ad.tensor(logits), one_hot).value)
    z = logits.astype(np.float64)
    expected = float(np.mean(np.log(np.exp(z - z[np.arange(1024), indices, None]).sum(-1))))
    assert by_index == pytest.approx(expected, rel=1e-3, abs=0)
    assert by_probability == pytest.approx(expected, rel=1e-3, abs=0)


def test_a_tiny_float64_loss_of_probabilities_keeps_its_digits():
    """The same in float64, against the exact value (long double): row by row the loss
    keeps ten digits (1e-10 off); two batch totals (BLAS's dot) would keep eight (7e-9)."""
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(4096, 100)) * 2
    indices = rng.integers(0, 100, 4096)
    logits[np.arange(4096), indices] += 23  # each row's loss near 5e-7
    one_hot = np.eye(100)[indices]
    got = float(ad.softmax_cross_entropy(ad.tensor(logits), one_hot).value)
    z = logits.astype(np.longdouble)
    exact = float(np.mean(np.log(np.exp(z - z[np.arange(4096), indices, None]).sum(-1))))
    assert got == pytest.approx(exact, rel=1e-9, abs=0), f"got {got!r}, exact {exact!r}"
