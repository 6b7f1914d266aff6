"""Checkpointing, counted and drawn (autodiff/checkpoint.py, viz.draw_checkpointed,
viz.draw_memory).

A checkpointed gradient keeps its checkpoints and recomputes only the ops between them:
the counts below are calls of the op's ``compute``, in both styles (an Executor running
a symbolic graph, and ``gradients`` on an imperative one), next to a plain gradient's.
"""

import numpy as np
import pytest

import autodiff as ad
from autodiff import memory
from autodiff.checkpoint import choose_checkpoints
from autodiff.ops.elementwise import Tanh


@pytest.fixture
def tanh_calls(monkeypatch):
    """The number of times Tanh.compute has run (a one-item list, reset by the test)."""
    calls = [0]
    compute = Tanh.compute

    def counted(self, x):
        calls[0] += 1
        return compute(self, x)

    monkeypatch.setattr(Tanh, "compute", counted)
    return calls


def tanh_chain(x, layers):
    h = x
    for _ in range(layers):
        h = ad.tanh(h)
    return h.sum()


def recomputed(grads):
    return [n for n in ad.find_topo_sort(grads) if n.name.startswith("recomputed")]


# (layers, checkpoint, tanh kept): the chain of ops is the tanh and the final sum, so
# checkpoint=2 keeps tanh 2, 4, 6; "sqrt" of 17 ops keeps every 4th: 4 of 16 tanh.
CASES = [(6, 2, 3), (16, "sqrt", 4), (9, 3, 3), (5, 1, 5)]


@pytest.mark.parametrize(("layers", "checkpoint", "kept"), CASES)
def test_a_symbolic_run_recomputes_only_the_ops_between_checkpoints(
    tanh_calls, layers, checkpoint, kept
):
    x = ad.Variable("x")
    loss = tanh_chain(x, layers)
    feed = {x: np.linspace(-1.0, 1.0, 5)}
    checkpoints = choose_checkpoints(loss, checkpoint)
    assert len([n for n in checkpoints if n.op.name == "tanh"]) == kept
    (plain,) = ad.gradients(loss, [x])
    (dx,) = ad.gradients(loss, [x], checkpoint=checkpoint)
    tanh_calls[0] = 0
    want = ad.Executor([loss, plain]).run(feed)[1]
    assert tanh_calls[0] == layers  # the forward pass; the plain gradient reads its values
    tanh_calls[0] = 0
    got = ad.Executor([loss, dx]).run(feed)[1]
    assert tanh_calls[0] == layers + (layers - kept)  # the forward pass, then the rest again
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
    copies = recomputed([dx])
    assert len(copies) == layers - kept
    # No copy of a checkpoint, and no two copies of one forward node (same op, same inputs).
    assert len({(n.op, n.inputs) for n in copies}) == len(copies)
    forward = set(ad.find_topo_sort([loss]))
    for copy in copies:
        assert all(x in checkpoints or x.op.is_leaf or x in copies for x in copy.inputs)
        assert not set(copy.inputs) & (forward - checkpoints - {x})
    read = {x for n in ad.find_topo_sort([dx]) if n not in forward for x in n.inputs}
    assert {n for n in checkpoints if n.op.name == "tanh"} <= read  # read, not recomputed


@pytest.mark.parametrize(("layers", "checkpoint", "kept"), CASES)
def test_an_imperative_gradient_recomputes_only_the_ops_between_checkpoints(
    tanh_calls, layers, checkpoint, kept
):
    x = ad.tensor(np.linspace(-1.0, 1.0, 5), name="x")
    loss = tanh_chain(x, layers)
    tanh_calls[0] = 0
    (plain,) = ad.gradients(loss, [x])
    assert tanh_calls[0] == 0  # the forward values are there: nothing to compute again
    (dx,) = ad.gradients(loss, [x], checkpoint=checkpoint)
    assert tanh_calls[0] == layers - kept
    np.testing.assert_allclose(dx.value, plain.value, rtol=1e-14, atol=0)


def weighted_chain(layers):
    """h = tanh(h * w_k) and sin(h) + exp(-h * h) in turn: rules that read their output
    (tanh, exp) and rules that read their inputs (multiply, sin)."""
    x = ad.Variable("x", shape=(6,))
    weights = [ad.Variable(f"w{k}", shape=(6,)) for k in range(layers)]
    h = x
    for k, w in enumerate(weights):
        h = ad.tanh(h * w) if k % 2 else ad.sin(h) + ad.exp(-h * h) * w
    rng = np.random.default_rng(0)
    feed = {x: rng.normal(size=6)}
    feed.update({w: 1 + 0.3 * rng.normal(size=6) for w in weights})
    return [x, *weights], h.sum(), feed


@pytest.mark.parametrize("checkpoint", [1, 2, 3, 5, "sqrt", "a list"])
def test_checkpointed_gradients_and_their_gradients_equal_plain_ones(checkpoint):
    leaves, loss, feed = weighted_chain(8)
    if checkpoint == "a list":
        ops = [n for n in ad.find_topo_sort([loss]) if n.op.name in ("tanh", "add")]
        checkpoint = ops[1::3]
    plain = ad.gradients(loss, leaves)
    grads = ad.gradients(loss, leaves, checkpoint=checkpoint)
    # The gradient is a graph: differentiate d loss / dx again (a Hessian-vector product).
    (hvp_plain,) = ad.gradients(plain[0].sum(), [leaves[0]])
    (hvp,) = ad.gradients(grads[0].sum(), [leaves[0]], checkpoint=checkpoint)
    want = ad.Executor([*plain, hvp_plain]).run(feed)
    got = ad.Executor([*grads, hvp]).run(feed)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == np.float64
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_checkpointing_still_shrinks_the_planned_peak():
    x = ad.Variable("x", shape=(1000,))
    loss = tanh_chain(x * 1.01, 36)
    feed = {x: np.linspace(-1.0, 1.0, 1000)}
    peaks = {}
    for checkpoint in (None, "sqrt"):
        (dx,) = ad.gradients(loss, [x], checkpoint=checkpoint)
        peaks[checkpoint] = memory.plan([loss, dx], feed).peak_bytes
    assert peaks["sqrt"] * 2 < peaks[None]
