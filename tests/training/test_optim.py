"""Optimisers: each update rule against a hand computation, and errors."""

import numpy as np
import pytest

import autodiff as ad
from autodiff import optim


def test_sgd_without_momentum_is_gradient_descent():
    w = ad.tensor([1.0, -2.0])
    opt = optim.SGD([w], lr=0.5)
    opt.step([np.array([2.0, 2.0])])
    opt.step([np.array([1.0, 0.0])])
    np.testing.assert_allclose(w.value, [1.0 - 1.0 - 0.5, -2.0 - 1.0])


def test_sgd_momentum_accumulates_velocity():
    w = ad.tensor([0.0])
    opt = optim.SGD([w], lr=0.1, momentum=0.9)
    for _ in range(3):
        opt.step([np.array([1.0])])
    # velocities 1, 1.9, 2.71: w = -0.1 * (1 + 1.9 + 2.71)
    np.testing.assert_allclose(w.value, [-0.561])


def test_adam_matches_the_paper_step_by_step():
    grads = [np.array([0.5, -3.0]), np.array([0.1, 1.0]), np.array([-2.0, 0.0])]
    w = ad.tensor([1.0, 1.0])
    opt = optim.Adam([w], lr=0.01, betas=(0.9, 0.99), eps=1e-8)
    expected = np.array([1.0, 1.0])
    m = s = np.zeros(2)
    for t, g in enumerate(grads, start=1):
        opt.step([g])
        m = 0.9 * m + 0.1 * g
        s = 0.99 * s + 0.01 * g * g
        expected = expected - 0.01 * (m / (1 - 0.9**t)) / (np.sqrt(s / (1 - 0.99**t)) + 1e-8)
        np.testing.assert_allclose(w.value, expected, rtol=1e-12)


def test_first_adam_step_moves_each_weight_by_about_lr():
    w = ad.tensor([0.0, 0.0, 0.0])
    optim.Adam([w], lr=0.1).step([np.array([1e-3, -5.0, 100.0])])
    np.testing.assert_allclose(w.value, [-0.1, 0.1, -0.1], rtol=1e-4)


@pytest.mark.parametrize("make", [lambda p: optim.SGD(p, 0.1, 0.9), lambda p: optim.Adam(p)])
def test_updates_are_in_place_and_keep_float32(make):
    w = ad.tensor(np.ones(3), dtype="float32")
    before = w.value
    y = (w * w).sum()
    make([w]).step(ad.gradients(y, [w]))  # gradient Nodes work as well as arrays
    assert w.value is before and w.value.dtype == np.float32
    assert (w.value < 1).all()


def test_optimisers_minimise_a_quadratic():
    for opt_class, kwargs in [(optim.SGD, {"lr": 0.1, "momentum": 0.5}), (optim.Adam, {"lr": 0.1})]:
        w = ad.tensor([3.0, -4.0])
        opt = opt_class([w], **kwargs)
        for _ in range(300):
            opt.step(ad.gradients(((w - 1.0) ** 2).sum(), [w]))
        np.testing.assert_allclose(w.value, [1.0, 1.0], atol=1e-3)


def test_clear_errors():
    w = ad.tensor([1.0, 2.0])
    with pytest.raises(TypeError, match="parameter 0 .*ad.tensor leaves"):
        optim.SGD([w * 2], lr=0.1)
    with pytest.raises(ValueError, match="learning rate must be > 0"):
        optim.Adam([w], lr=0.0)
    with pytest.raises(ValueError, match="1 gradients for 2 parameters"):
        optim.SGD([w, ad.tensor(1.0)], lr=0.1).step([np.zeros(2)])
    with pytest.raises(ValueError, match=r"gradient 0 has shape \(3,\).*shape \(2,\)"):
        optim.SGD([w], lr=0.1).step([np.zeros(3)])
