"""Layer norm and batch norm (autodiff/ops/normalization.py), compositions of ops: values
against NumPy (and PyTorch where it is installed), gradients against finite differences, and
the hand derivation's result for batch norm."""

import importlib.util

import numpy as np
import pytest

import autodiff as ad

HAS_TORCH = importlib.util.find_spec("torch") is not None
NO_TORCH = "PyTorch is not installed here: the comparisons with torch need it (pip install torch)"


def np_normalize(x, axes, eps):
    mu = x.mean(axis=axes, keepdims=True)
    return (x - mu) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)


@pytest.mark.parametrize("axis", [-1, (1, 2)])
def test_layer_norm_matches_numpy_and_finite_differences(axis):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4))
    shape = x.shape[2:] if axis == -1 else x.shape[1:]
    gamma, beta = rng.standard_normal(shape), rng.standard_normal(shape)
    out = ad.layer_norm(ad.tensor(x), ad.tensor(gamma), ad.tensor(beta), axis=axis, eps=1e-5)
    expected = np_normalize(x, axis, 1e-5) * gamma + beta
    np.testing.assert_allclose(out.value, expected, rtol=1e-12, atol=1e-12)
    ad.check_grads(lambda a, g, b: ad.layer_norm(a, g, b, axis=axis), [x, gamma, beta], order=2)


@pytest.mark.parametrize("shape", [(5, 3), (4, 3, 2, 2)])
def test_batch_norm_matches_numpy_and_finite_differences(shape):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape)
    gamma, beta = rng.standard_normal(3), rng.standard_normal(3)
    axes = (0,) if len(shape) == 2 else (0, 2, 3)
    per_channel = (3,) + (1,) * (len(shape) - 2)
    out = ad.batch_norm(ad.tensor(x), ad.tensor(gamma), ad.tensor(beta))
    expected = np_normalize(x, axes, 1e-5) * gamma.reshape(per_channel) + beta.reshape(per_channel)
    np.testing.assert_allclose(out.value, expected, rtol=1e-12, atol=1e-12)
    ad.check_grads(lambda a, g, b: ad.batch_norm(a, g, b), [x, gamma, beta], order=2)


def test_batch_norm_gradient_through_the_batch_statistics_sums_to_zero():
    """The classic result of the hand derivation: with gamma = 1, the gradient reaching x
    has zero mean over the batch (the mean is subtracted out), whatever dY is."""
    x = ad.tensor(np.random.default_rng(3).standard_normal((6, 2)))
    dy = ad.constant(np.random.default_rng(4).standard_normal((6, 2)))
    (dx,) = ad.gradients(ad.batch_norm(x), [x], dy)
    np.testing.assert_allclose(dx.value.sum(axis=0), 0, atol=1e-12)


def test_batch_norm_needs_a_known_rank():
    with pytest.raises(ad.ShapeError, match="batch_norm"):
        ad.batch_norm(ad.Variable("x"))


@pytest.mark.skipif(not HAS_TORCH, reason=NO_TORCH)
def test_norms_match_pytorch():
    import torch

    rng = np.random.default_rng(5)
    x, gamma, beta = (
        rng.standard_normal((4, 3, 2, 2)),
        rng.standard_normal(3),
        rng.standard_normal(3),
    )
    t = torch.tensor(x)
    expected = torch.nn.functional.batch_norm(
        t, None, None, torch.tensor(gamma), torch.tensor(beta), training=True
    )
    got = ad.batch_norm(ad.tensor(x), ad.tensor(gamma), ad.tensor(beta)).value
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-10, atol=1e-12)
    expected = torch.nn.functional.layer_norm(t, (2,))
    np.testing.assert_allclose(ad.layer_norm(ad.tensor(x)).value, expected.numpy(), atol=1e-12)
