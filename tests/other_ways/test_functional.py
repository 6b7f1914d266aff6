"""Function transforms: grad, value_and_grad, vjp, and jvp (true forward mode)."""

import numpy as np
import pytest

import autodiff as ad


def f(x, y):
    return (x * x * y + y + 2).sum()


def test_grad_of_the_classic_example():
    # f(x, y) = x**2 y + y + 2 at (3, 4): 42, df/dx = 24, df/dy = 10
    assert ad.value_and_grad(f, argnums=(0, 1))(3.0, 4.0) == (42.0, (24.0, 10.0))
    assert ad.grad(f)(3.0, 4.0) == 24.0
    assert ad.grad(f, argnums=1)(3.0, 4.0) == 10.0


def test_grad_of_grad():
    def d_sin(x):
        (g,) = ad.gradients(ad.sin(x), [x])
        return g

    # d/dx cos(x) = -sin(x)
    assert ad.grad(d_sin)(0.5) == pytest.approx(-np.sin(0.5))


def test_grad_on_arrays_and_non_differentiated_arguments():
    def loss(w, x, labels):
        return ad.softmax_cross_entropy(x @ w, labels)

    rng = np.random.default_rng(0)
    w, x, labels = rng.normal(size=(3, 2)), rng.normal(size=(4, 3)), np.array([0, 1, 1, 0])
    g = ad.grad(loss)(w, x, labels)
    assert g.shape == (3, 2)
    z = x @ w
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    expected = x.T @ (p - np.eye(2)[labels]) / 4
    np.testing.assert_allclose(g, expected)


def test_vjp_pulls_back_a_cotangent():
    y, pullback = ad.vjp(lambda a, b: a * b, [1.0, 2.0], [3.0, 4.0])
    np.testing.assert_array_equal(y, [3.0, 8.0])
    da, db = pullback(np.array([1.0, 10.0]))
    np.testing.assert_array_equal(da, [3.0, 40.0])
    np.testing.assert_array_equal(db, [1.0, 20.0])


def test_jvp_pushes_forward_a_tangent():
    value, tangent = ad.jvp(f, (3.0, 4.0), (1.0, 0.0))
    assert (value, tangent) == (42.0, 24.0)
    value, tangent = ad.jvp(f, (3.0, 4.0), (0.0, 1.0))
    assert tangent == 10.0


def test_jvp_is_forward_mode_not_reverse_mode(monkeypatch):
    def no_gradient_rules(*args, **kwargs):
        raise AssertionError("jvp must not call gradient (reverse-mode) rules")

    for cls in ad.Op.registry.values():
        monkeypatch.setattr(cls, "gradient", no_gradient_rules)
    _, tangent = ad.jvp(lambda x: ad.tanh(x) @ x.T, (np.eye(2),), (np.ones((2, 2)),))
    assert tangent.shape == (2, 2)


def test_jvp_and_vjp_agree():
    rng = np.random.default_rng(2)
    x, v, u = rng.normal(size=3), rng.normal(size=3), rng.normal(size=3)

    def g(x):
        return ad.sin(x) * ad.exp(x).sum()

    _, jv = ad.jvp(g, (x,), (v,))
    _, pullback = ad.vjp(g, x)
    (uj,) = pullback(u)
    assert np.dot(u, jv) == pytest.approx(np.dot(uj, v))


def test_transform_errors_are_clear():
    with pytest.raises(ValueError, match="scalar output"):
        ad.grad(lambda x: x * 2)(np.ones(3))
    with pytest.raises(TypeError, match="must return a Node"):
        ad.grad(lambda x: 3.0)(1.0)
    with pytest.raises(ValueError, match="tangent of shape"):
        ad.jvp(lambda x: x, (np.ones(3),), (np.ones(2),))
    with pytest.raises(IndexError, match="argnums"):
        ad.grad(f, argnums=2)(1.0, 2.0)
