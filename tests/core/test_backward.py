"""``loss.backward()`` and ``.grad``, as PyTorch users expect them: sugar over
``ad.gradients``, with the optimisers' ``zero_grad()`` and ``step()`` reading ``.grad``."""

import numpy as np
import pytest

import autodiff as ad
from autodiff import nn, optim


def test_backward_fills_grad_of_each_tensor_leaf_and_not_of_constants():
    w, b = ad.tensor([1.0, 2.0], name="w"), ad.tensor(0.5, name="b")
    c = ad.constant([3.0, 4.0])
    loss = ad.sum(w * c) + b * b
    loss.backward()
    np.testing.assert_array_equal(w.grad, [3.0, 4.0])
    assert float(b.grad) == 1.0
    assert c.grad is None and loss.grad is None  # only tensor leaves get one


def test_backward_adds_up_until_zero_grad_and_step_reads_grad():
    w = ad.tensor([1.0, -1.0])
    opt = optim.SGD([w], lr=0.5)
    ad.sum(w * w).backward()
    ad.sum(w * w).backward()  # a second call adds, as in PyTorch
    np.testing.assert_array_equal(w.grad, [4.0, -4.0])
    opt.step()
    np.testing.assert_array_equal(w.value, [-1.0, 1.0])
    opt.zero_grad()
    assert w.grad is None
    with pytest.raises(ValueError, match=r"has no \.grad\. Call loss\.backward\(\) first"):
        opt.step()


def test_a_training_loop_with_backward_matches_one_with_gradients():
    x, y = ad.data.digits()
    x, y = x[:64], y[:64]
    losses = {}
    for style in ("backward", "gradients"):
        model = nn.MLP([64, 16, 10], seed=0)
        opt = optim.Adam(model.parameters(), lr=0.01)
        for _ in range(3):
            loss = ad.softmax_cross_entropy(model(ad.tensor(x)), y)
            if style == "backward":
                opt.zero_grad()
                loss.backward()
                opt.step()
            else:
                opt.step(ad.gradients(loss, model.parameters()))
        losses[style] = float(loss.value)
    assert losses["backward"] == losses["gradients"]


def test_backward_refuses_a_symbolic_or_non_scalar_output_saying_what_to_do():
    with pytest.raises(ValueError, match="symbolic.*ad.gradients"):
        (ad.Variable("x") * 2).backward()
    with pytest.raises(ValueError, match=r"has shape \(2,\).*ad.sum\(y\).backward\(\)"):
        (ad.tensor([1.0, 2.0]) * 2).backward()
