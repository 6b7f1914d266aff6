"""dtype discipline: float32 stays float32, Python numbers never upcast, nothing silent."""

import numpy as np
import pytest

import autodiff as ad


def mlp_loss(x, w1, w2, labels):
    hidden = ad.relu(x @ w1 + 0.1)
    return ad.softmax_cross_entropy(hidden @ w2, labels) + 1e-3 * (w1 * w1).sum()


def test_a_float32_network_keeps_float32_values_and_gradients():
    rng = np.random.default_rng(0)
    x, w1, w2 = (ad.tensor(rng.normal(size=s), dtype="float32") for s in [(4, 3), (3, 5), (5, 2)])
    loss = mlp_loss(x, w1, w2, np.array([0, 1, 1, 0]))
    assert loss.dtype == np.float32
    for node in ad.find_topo_sort([loss]):
        if node.dtype is not None and node.op.name not in ("constant",):
            assert node.dtype == np.float32, f"{node} is {node.dtype}"
    grads = ad.gradients(loss, [x, w1, w2])
    assert [g.dtype for g in grads] == [np.float32] * 3
    (second,) = ad.gradients(grads[0].sum(), [w1])
    assert second.dtype == np.float32


@pytest.mark.parametrize("scalar", [2, 2.5, True, 1e-3])
def test_python_scalars_never_upcast(scalar):
    x = ad.tensor([1.0, 2.0], dtype="float32")
    for y in [x * scalar, scalar * x, x + scalar, x - scalar, scalar / (x + 3)]:
        assert y.dtype == np.float32


def test_power_and_mean_keep_float32():
    x = ad.tensor([1.0, 2.0], dtype="float32")
    assert (x**2).dtype == np.float32
    assert (x**0.5).dtype == np.float32
    assert x.mean().dtype == np.float32
    (dx,) = ad.gradients((x**3).mean(), [x])
    assert dx.dtype == np.float32


def test_symbolic_graph_with_undeclared_dtype_follows_the_feed():
    x = ad.Variable("x")
    y = ad.sigmoid(2 * x + 1).sum()
    (dx,) = ad.gradients(y, [x])
    out, grad = ad.evaluate([y, dx], {x: np.ones(3, dtype=np.float32)})
    assert out.dtype == np.float32 and grad.dtype == np.float32


def test_mixing_float32_with_float64_follows_numpy():
    a = ad.tensor([1.0], dtype="float32")
    b = ad.tensor([1.0], dtype="float64")
    assert (a * b).dtype == np.float64  # as NumPy: an explicit array is not a weak scalar


def test_integer_data_is_kept_not_silently_converted():
    x = ad.tensor([1, 2, 3])
    assert x.dtype == np.int64
    with pytest.raises(ad.DTypeError):
        x * 2.0
    assert (ad.tensor([1, 2, 3], dtype="float32") * 2).dtype == np.float32


NUMPY_SCALARS = [np.int64(3), np.int32(3), np.float64(2.5), np.float32(2.5), np.bool_(True)]


@pytest.mark.parametrize("scalar", NUMPY_SCALARS, ids=lambda s: type(s).__name__)
def test_numpy_scalars_are_weak_like_python_numbers(scalar):
    data = np.array([1.0, 2.0, 4.0], dtype=np.float32)
    x = ad.tensor(data)
    number = scalar.item()
    cases = [
        (lambda x: x * scalar, lambda d: d * number, number),
        (lambda x: scalar * x, lambda d: number * d, number),  # NumPy defers to __rmul__
        (lambda x: x + scalar, lambda d: d + number, 1.0),
        (lambda x: scalar - x, lambda d: number - d, -1.0),
        (lambda x: scalar / x, lambda d: number / d, -number / data**2),
    ]
    for f, expected, slope in cases:
        y = f(x)
        assert isinstance(y, ad.Node)
        assert y.dtype == np.float32, f"{y} is {y.dtype}"
        np.testing.assert_allclose(y.value, expected(data), rtol=1e-6)
        (dx,) = ad.gradients(y, [x])
        assert dx.dtype == np.float32
        np.testing.assert_allclose(dx.value, np.broadcast_to(slope, data.shape), rtol=1e-6)


@pytest.mark.parametrize("exponent", [np.int64(2), np.int32(3), np.float64(0.5)])
def test_a_numpy_scalar_exponent_takes_the_python_numbers_rule(exponent):
    x = ad.tensor([1.0, 4.0], dtype="float32")
    y = x**exponent
    assert y.op.name == "power_scalar" and y.attrs["exponent"] == exponent.item()
    assert type(y.attrs["exponent"]) in (int, float)
    assert y.dtype == np.float32
    (dx,) = ad.gradients(y, [x])
    assert dx.dtype == np.float32
    p = exponent.item()
    np.testing.assert_allclose(dx.value, p * np.array([1.0, 4.0]) ** (p - 1), rtol=1e-6)


def test_a_zero_dimensional_array_is_an_array_not_a_weak_number():
    x = ad.tensor([1.0, 2.0], dtype="float32")
    assert (x * np.array(2.0)).dtype == np.float64  # as NumPy: a 0-d float64 array upcasts
    assert (x * np.array(2.0, dtype=np.float32)).dtype == np.float32
