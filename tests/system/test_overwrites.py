"""Compiled code lets the coarse loss's gradient take the place of the softmax it reads,
where that softmax dies at the gradient's step (``memory.OVERWRITES``): the Executor's
straight-line code, and the gradient programs of ``gradients(..., retain_graph=False)``.
Never where anyone could still see that array: an output, a view of it, a node the
caller holds. The values are those of a run that writes a new array."""

import numpy as np
import pytest

import autodiff as ad
from autodiff import memory
from autodiff.system import gradient_cache

rng = np.random.default_rng(0)
LOGITS = [rng.normal(scale=2, size=(6, 5)) for _ in range(4)]
INDICES = rng.integers(0, 5, 6)


def labels_for(kind):
    return INDICES if kind == "indices" else np.eye(5)[INDICES] * 0.75 + 0.05


def reference(z, labels):
    """Loss and gradient by the composed loss (fine ops: no overwriting anywhere)."""
    logits = ad.tensor(z)
    loss = ad.softmax_cross_entropy_composed(logits, labels)
    return float(loss.value), ad.gradients(loss, [logits])[0].value


@pytest.mark.parametrize("kind", ["indices", "probabilities"])
def test_the_executors_gradient_takes_the_softmaxs_place(kind):
    z, y = ad.Variable("z"), ad.Variable("y")
    loss = ad.softmax_cross_entropy(z, y)
    executor = ad.Executor([loss, *ad.gradients(loss, [z])])
    labels = labels_for(kind)
    for logits in LOGITS:  # the checked run, then compiled ones
        value, grad = executor.run({z: logits, y: labels})
        expected_loss, expected_grad = reference(logits, labels)
        assert float(value) == pytest.approx(expected_loss, rel=1e-12)
        np.testing.assert_allclose(grad, expected_grad, rtol=1e-11, atol=1e-15)
    assert "softmax_cross_entropy_gradient, over it" in executor.source


@pytest.mark.parametrize("held", ["an output", "read by a view"])
def test_no_overwriting_where_the_softmax_is_still_seen(held):
    z, y = ad.Variable("z"), ad.Variable("y")
    loss = ad.softmax_cross_entropy(z, y)
    probs = loss.inputs[2]
    (grad,) = ad.gradients(loss, [z])
    outputs = [loss, grad, probs] if held == "an output" else [loss, grad, ad.reshape(probs, (-1,))]
    executor = ad.Executor(outputs)
    for logits in LOGITS:
        _, got_grad, got_probs = executor.run({z: logits, y: INDICES})
        exps = np.exp(logits - logits.max(axis=1, keepdims=True))
        softmax = exps / exps.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(got_probs.reshape(softmax.shape), softmax, rtol=1e-13)
        np.testing.assert_allclose(got_grad, reference(logits, INDICES)[1], rtol=1e-11)
    assert "over it" not in executor.source


def test_without_the_rule_the_same_values(monkeypatch):
    """The rule off (no OVERWRITES), the compiled code writes a new array: same values."""
    z, y = ad.Variable("z"), ad.Variable("y")
    loss = ad.softmax_cross_entropy(z, y)
    nodes = [loss, *ad.gradients(loss, [z])]
    runs = {}
    for rule in ("on", "off"):
        if rule == "off":
            monkeypatch.setattr(memory, "OVERWRITES", {})
        executor = ad.Executor(nodes)
        runs[rule] = [executor.run({z: logits, y: INDICES}) for logits in LOGITS]
        assert ("over it" in executor.source) == (rule == "on")
    for on, off in zip(runs["on"], runs["off"], strict=True):
        np.testing.assert_array_equal(on[0], off[0])
        np.testing.assert_array_equal(on[1], off[1])


def define_by_run_step(logits, labels, keep_softmax=False):
    z = ad.tensor(logits)
    loss = ad.softmax_cross_entropy(z, labels)
    softmax = loss.inputs[2] if keep_softmax else None
    array = loss.inputs[2].value
    (grad,) = ad.gradients(loss, [z], retain_graph=False)
    return float(loss.value), grad.value, array, softmax


@pytest.mark.parametrize("kind", ["indices", "probabilities"])
def test_a_released_softmax_takes_the_gradient_in_a_define_by_run_step(kind):
    """``retain_graph=False`` lets go of the softmax at the gradient's step; a cached
    program (from the third step) writes the gradient over it there."""
    gradient_cache.clear()
    labels = labels_for(kind)
    for step, logits in enumerate(LOGITS):
        value, grad, softmax_array, _ = define_by_run_step(logits, labels)
        expected_loss, expected_grad = reference(logits, labels)
        assert value == pytest.approx(expected_loss, rel=1e-12)
        np.testing.assert_allclose(grad, expected_grad, rtol=1e-11, atol=1e-15)
        assert np.shares_memory(grad, softmax_array) == (step >= 2)  # built twice, then run


def test_a_softmax_node_the_caller_holds_is_left_as_it_was():
    gradient_cache.clear()
    for logits in LOGITS:
        _, grad, array, softmax = define_by_run_step(logits, INDICES, keep_softmax=True)
        assert softmax.value is array and not np.shares_memory(grad, array)
        exps = np.exp(logits - logits.max(axis=1, keepdims=True))
        np.testing.assert_allclose(array, exps / exps.sum(axis=1, keepdims=True), rtol=1e-13)
