"""The elementwise ops (abs, clip, where, the comparisons, ...) where the registry-wide
checks (test_every_op.py) cannot look: at the kinks (abs at 0, clip at its bounds, minimum's
ties), where's broadcast gradients, the comparisons' booleans and their error, and
Node's operators."""

import numpy as np
import pytest

import autodiff as ad


def grad_of(f, x):
    """d sum(f(x)) / dx as a NumPy array, and the gradient node (to differentiate again)."""
    leaf = ad.tensor(x)
    (dx,) = ad.gradients(f(leaf).sum(), [leaf])
    return dx.value, dx, leaf


# -- the kinks ------------------------------------------------------------------------------


def test_abs_gradient_is_the_sign_and_zero_at_zero():
    value, dx, x = grad_of(ad.abs, [-2.0, 0.0, 3.0])
    np.testing.assert_array_equal(value, [-1.0, 0.0, 1.0])
    (ddx,) = ad.gradients(dx.sum(), [x])  # flat pieces: the second derivative is 0
    np.testing.assert_array_equal(ddx.value, [0.0, 0.0, 0.0])
    tangent = ad.jvp_graph(ad.abs(x), [x], [np.ones(3)])
    np.testing.assert_array_equal(tangent.value, [-1.0, 0.0, 1.0])


def test_abs_of_a_node_is_the_op():
    x = ad.tensor([-1.5, 2.0], dtype="float32")
    y = abs(x)
    assert y.op.name == "abs" and y.dtype == np.float32
    np.testing.assert_array_equal(y.value, [1.5, 2.0])


def test_minimum_splits_the_gradient_at_ties_as_maximum_does():
    a, b = ad.tensor([1.0, 2.0, 3.0]), ad.tensor([2.0, 2.0, 1.0])
    da, db = ad.gradients(ad.minimum(a, b).sum(), [a, b])
    np.testing.assert_array_equal(da.value, [1.0, 0.5, 0.0])
    np.testing.assert_array_equal(db.value, [0.0, 0.5, 1.0])
    da_max, db_max = ad.gradients(ad.maximum(a, b).sum(), [a, b])
    np.testing.assert_array_equal(da.value + da_max.value, [1.0, 1.0, 1.0])


def test_clip_passes_the_gradient_inside_and_at_the_bounds_only():
    value, _, _ = grad_of(lambda x: ad.clip(x, -1.0, 1.0), [-2.0, -1.0, 0.0, 1.0, 2.0])
    np.testing.assert_array_equal(value, [0.0, 1.0, 1.0, 1.0, 0.0])
    x = ad.tensor([-2.0, 0.5, 3.0])
    np.testing.assert_array_equal(ad.clip(x, None, 1.0).value, [-2.0, 0.5, 1.0])
    np.testing.assert_array_equal(
        ad.gradients(ad.clip(x, 0.0, None).sum(), [x])[0].value, [0, 1, 1]
    )


def test_clip_keeps_float32_and_refuses_crossed_bounds():
    x = ad.tensor([-3.0, 0.25, 3.0], dtype="float32")
    y = ad.clip(x, -1, 2)
    assert y.dtype == np.float32 and ad.gradients(y.sum(), [x])[0].dtype == np.float32
    with pytest.raises(ad.DomainError, match=r"clip: the lower bound 2 is above the upper bound 1"):
        ad.clip(x, 2, 1)


# -- where ----------------------------------------------------------------------------------


def test_where_routes_the_gradient_and_sums_it_to_each_broadcast_shape():
    cond = np.array([[True], [False], [True]])  # (3, 1)
    a = ad.tensor([1.0, 2.0, 3.0, 4.0])  # (4,): picked in rows 0 and 2
    b = ad.tensor(5.0)  # (): picked in row 1, four times
    y = ad.where(cond, a, b)
    assert y.shape == (3, 4)
    np.testing.assert_array_equal(y.value[1], [5.0] * 4)
    weights = np.arange(12.0).reshape(3, 4)
    da, db = ad.gradients((y * weights).sum(), [a, b])
    np.testing.assert_array_equal(da.value, weights[0] + weights[2])
    assert da.shape == (4,) and db.shape == ()
    assert float(db.value) == weights[1].sum()


def test_where_with_a_comparison_is_leaky_relu_in_both_modes():
    x = ad.tensor([-2.0, 0.5, 3.0])
    y = ad.where(x > 0, x, 0.1 * x)
    np.testing.assert_allclose(y.value, [-0.2, 0.5, 3.0])
    np.testing.assert_allclose(ad.gradients(y.sum(), [x])[0].value, [0.1, 1.0, 1.0])
    tangent = ad.jvp_graph(y, [x], [np.ones(3)])  # forward mode passes the comparison by
    np.testing.assert_allclose(tangent.value, [0.1, 1.0, 1.0])
    ad.check_grads(lambda v: ad.where(v > 0, v * v, ad.sin(v)), [[-1.0, 0.5]], order=2)


def test_where_runs_symbolically_with_the_condition_fed():
    x, mask = ad.Variable("x"), ad.Variable("mask")
    y = ad.where(mask, x, -x)
    feed = {x: np.array([1.0, 2.0]), mask: np.array([True, False])}
    np.testing.assert_array_equal(ad.evaluate(y, feed), [1.0, -2.0])
    (dx,) = ad.gradients(y.sum(), [x])
    np.testing.assert_array_equal(ad.evaluate(dx, feed), [1.0, -1.0])
    fused = ad.Executor([y, dx], fuse=True).run(feed)  # a boolean mask stays out of kernels
    np.testing.assert_array_equal(fused[1], [1.0, -1.0])


def test_where_does_not_differentiate_its_condition():
    x = ad.tensor([1.0, -1.0])
    cond = ad.tensor([1.0, 0.0])  # a float condition: nonzero is true, as in NumPy
    dx, dcond = ad.gradients(ad.where(cond, x, 0.0).sum(), [x, cond])
    np.testing.assert_array_equal(dx.value, [1.0, 0.0])
    np.testing.assert_array_equal(dcond.value, [0.0, 0.0])


# -- smooth ones ----------------------------------------------------------------------------


def test_log1p_and_expm1_are_accurate_for_tiny_inputs():
    tiny = ad.tensor([1e-20, -1e-18])
    np.testing.assert_array_equal(ad.log1p(tiny).value, [1e-20, -1e-18])
    np.testing.assert_array_equal(ad.expm1(tiny).value, [1e-20, -1e-18])
    np.testing.assert_allclose(ad.expm1(ad.log1p(ad.tensor([0.5, 3.0]))).value, [0.5, 3.0])


def test_gelu_is_the_tanh_approximation():
    x = np.array([-3.0, -1.0, 0.0, 1.0, 2.0])
    y = ad.gelu(ad.tensor(x))
    # 0.841192 at 1 (exact GELU: 0.841345): the approximation GPT-2 uses
    np.testing.assert_allclose(y.value[3], 0.8411919906, rtol=1e-9)
    assert y.value[2] == 0.0
    torch = pytest.importorskip("torch")
    t = torch.tensor(x, requires_grad=True)
    expected = torch.nn.functional.gelu(t, approximate="tanh")
    expected.sum().backward()
    np.testing.assert_allclose(y.value, expected.detach().numpy(), rtol=1e-12)
    (dx,) = ad.gradients(ad.gelu(leaf := ad.tensor(x)).sum(), [leaf])
    np.testing.assert_allclose(dx.value, t.grad.numpy(), rtol=1e-12)


# -- comparisons ----------------------------------------------------------------------------


def test_node_comparisons_give_booleans_with_numbers_on_either_side():
    x = ad.tensor([-1.0, 0.0, 2.0], dtype="float32")
    assert (x < 0).op.name == "less" and (x < 0).dtype == np.bool_
    np.testing.assert_array_equal((x < 0).value, [True, False, False])
    np.testing.assert_array_equal((x <= 0).value, [True, True, False])
    np.testing.assert_array_equal((x > 0).value, [False, False, True])
    np.testing.assert_array_equal((x >= 0).value, [False, True, True])
    np.testing.assert_array_equal((0 < x).value, [False, False, True])  # Python: x > 0
    np.testing.assert_array_equal((np.zeros(3) >= x).value, [True, True, False])
    np.testing.assert_array_equal(ad.equal(x, 0).value, [False, True, False])
    np.testing.assert_array_equal(ad.not_equal(x, [0, 0, 2]).value, [True, False, False])


def test_equality_on_nodes_stays_identity():
    """Nodes are dict keys (feed_dict) and set members: == must not become elementwise."""
    x, y = ad.tensor([1.0]), ad.tensor([1.0])
    assert x == x and (x == y) is False and x != y
    assert {x: 1, y: 2}[y] == 2


def test_comparisons_take_integers_such_as_class_indices():
    predicted, labels = ad.constant(np.array([2, 0, 1])), np.array([2, 1, 1])
    hits = ad.equal(predicted, labels)
    np.testing.assert_array_equal(hits.value, [True, False, True])
    assert ad.where(hits, 1.0, 0.0).sum().value == 2.0


@pytest.mark.parametrize("compare", [ad.less, ad.greater_equal, ad.equal])
def test_differentiating_a_comparison_says_it_is_not_differentiable(compare):
    x = ad.tensor([1.0, 2.0])
    y = compare(x, 1.5)
    with pytest.raises(ad.DTypeError) as info:
        ad.gradients(y, [x])
    message = str(info.value)
    assert message.startswith(f"{y.op.name} is not differentiable")
    assert "bool" in message and "ad.where(cond, a, b)" in message
    with pytest.raises(ad.DTypeError, match="multiply: input 0 has dtype bool"):
        y * x  # booleans do not slip into arithmetic either
    assert not type(y.op).differentiable and ad.Op.registry["where"].differentiable
