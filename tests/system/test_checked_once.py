"""Compiled code checks the coarse loss's labels once per run: where the loss has read
the same logits and labels earlier in the run, its gradient trusts that check
(``compiled.CHECKED_BY``): the Executor's straight-line code, the gradient programs of
define-by-run steps, ``nn.train`` compiled. A gradient op with no loss before it still
checks, and bad labels still meet a readable error."""

import numpy as np
import pytest

import autodiff as ad
from autodiff.core.errors import DomainError
from autodiff.ops import losses
from autodiff.system import gradient_cache

rng = np.random.default_rng(3)
LOGITS = [rng.normal(scale=2, size=(6, 5)) for _ in range(4)]
LABELS = [rng.integers(0, 5, 6) for _ in range(4)]
BAD = np.array([0, 1, 5, 2, 3, 4])  # class 5 of 5


@pytest.fixture
def checks(monkeypatch):
    """The labels ``check_labels`` was handed, call by call."""
    seen = []
    check = losses.check_labels

    def counted(labels, logits):
        seen.append(labels)
        return check(labels, logits)

    monkeypatch.setattr(losses, "check_labels", counted)
    return seen


def expected(z, labels):
    """Loss and gradient of the composed loss (fine ops: no coarse kernel anywhere)."""
    logits = ad.tensor(z)
    loss = ad.softmax_cross_entropy_composed(logits, labels)
    return float(loss.value), ad.gradients(loss, [logits])[0].value


def test_the_executor_checks_the_labels_once_per_run(checks):
    z, y = ad.Variable("z"), ad.Variable("y")
    loss = ad.softmax_cross_entropy(z, y)
    executor = ad.Executor([loss, *ad.gradients(loss, [z])])
    for run, (logits, labels) in enumerate(zip(LOGITS, LABELS, strict=True)):
        checks.clear()
        value, grad = executor.run({z: logits, y: labels})
        # The checked first run checks in both ops; compiled runs, in the loss only.
        assert len(checks) == (2 if run == 0 else 1), f"run {run}: {len(checks)} checks"
        want_loss, want_grad = expected(logits, labels)
        assert float(value) == pytest.approx(want_loss, rel=1e-12)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-11, atol=1e-15)
    with pytest.raises(DomainError, match=r"class indices must lie in \[0, 5\)"):
        executor.run({z: LOGITS[0], y: BAD})


@pytest.mark.parametrize("retain_graph", [True, False])
def test_a_define_by_run_step_checks_the_labels_once(checks, retain_graph):
    gradient_cache.clear()
    for step, (logits, labels) in enumerate(zip(LOGITS * 2, LABELS * 2, strict=True)):
        checks.clear()
        z = ad.tensor(logits)
        loss = ad.softmax_cross_entropy(z, labels)
        (grad,) = ad.gradients(loss, [z], retain_graph=retain_graph)
        # Built (twice, as the cache does) then compiled: its program trusts the loss.
        assert len(checks) == (2 if step < 2 else 1), f"step {step}: {len(checks)} checks"
        np.testing.assert_allclose(grad.value, expected(logits, labels)[1], rtol=1e-11)
    with pytest.raises(DomainError, match=r"class indices must lie in \[0, 5\)"):
        ad.softmax_cross_entropy(ad.tensor(LOGITS[0]), BAD)


def test_nn_train_compiled_checks_the_labels_once_per_step(checks):
    x = rng.normal(size=(12, 3))
    y = rng.integers(0, 4, 12)
    model = ad.nn.MLP([3, 5, 4], seed=0)
    optimizer = ad.optim.SGD(model.parameters(), lr=0.1)
    train = dict(epochs=3, batch_size=12, progress=False, compiled=True)
    history = ad.nn.train(model, ad.softmax_cross_entropy, optimizer, x, y, **train)
    # Its first step is a checked run (both ops check); the next two, compiled, once each.
    assert len(checks) == 4, f"{len(checks)} checks in 3 steps"
    assert history.loss[-1] < history.loss[0]


def test_a_gradient_op_with_no_loss_before_it_checks_its_labels():
    z, y, d_loss = ad.Variable("z"), ad.Variable("y"), ad.Variable("d_loss")
    grad = losses.softmax_cross_entropy_gradient(z, y, d_loss, ad.softmax(z))
    executor = ad.Executor([grad])
    one = np.float64(1.0)
    for logits, labels in zip(LOGITS, LABELS, strict=True):  # checked, then compiled
        got = executor.run({z: logits, y: labels, d_loss: one})[0]
        np.testing.assert_allclose(got, expected(logits, labels)[1], rtol=1e-11, atol=1e-15)
    assert "trusting" not in str(executor.source)
    with pytest.raises(DomainError, match=r"class indices must lie in \[0, 5\)"):
        executor.run({z: LOGITS[0], y: BAD, d_loss: one})


def test_a_loss_on_other_logits_vouches_for_nothing():
    """The loss checked the labels against its own logits (5 classes): a gradient op on
    other logits (3 classes) that reads the same labels checks them itself."""
    wide, narrow, y = ad.Variable("wide"), ad.Variable("narrow"), ad.Variable("y")
    loss = ad.softmax_cross_entropy(wide, y)
    grad = losses.softmax_cross_entropy_gradient(narrow, y, ad.ones_like(loss), ad.softmax(narrow))
    executor = ad.Executor([loss, grad])
    fits_both = np.array([0, 1, 2, 2, 1, 0])
    for logits in LOGITS:  # checked, then compiled
        _, got = executor.run({wide: logits, narrow: logits[:, :3], y: fits_both})
        np.testing.assert_allclose(got, expected(logits[:, :3], fits_both)[1], rtol=1e-11)
    # (Row 0's class 4 would land, unchecked, on row 1's class 1: no error, a wrong gradient.)
    too_wide = np.array([4, 0, 0, 0, 0, 0])
    with pytest.raises(DomainError, match=r"class indices must lie in \[0, 3\)"):
        executor.run({wide: LOGITS[0], narrow: LOGITS[0][:, :3], y: too_wide})
