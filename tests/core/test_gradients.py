"""Reverse mode on small graphs whose gradients are known by hand: readable examples."""

import numpy as np
import pytest

import autodiff as ad


def values(nodes):
    return [n.value for n in nodes]


def test_identity():
    x = ad.tensor([1.0, 2.0], name="x")
    (dx,) = ad.gradients(x, [x])
    np.testing.assert_array_equal(dx.value, [1.0, 1.0])


def test_constants_have_no_gradient_and_do_not_block_others():
    x = ad.tensor(3.0, name="x")
    c = ad.constant(5.0)
    dx, dc = ad.gradients(x * c + c, [x, c])
    assert dx.value == 5.0
    assert dc.value == 0.0


def test_fan_out_sums_the_adjoints():
    # b = a + a, c = b + b: c = 4a, so dc/da = 4 (a node reused twice, twice).
    a = ad.tensor(2.0, name="a")
    b = a + a
    c = b + b
    (da,) = ad.gradients(c, [a])
    assert da.value == 4.0


def test_reuse_in_a_product():
    x = ad.tensor(3.0, name="x")
    y = x * x * x  # 3 x**2 = 27
    (dx,) = ad.gradients(y, [x])
    assert dx.value == 27.0


def test_the_lecture_example():
    # f(x1, x2) = ln(x1) + x1 * x2 - sin(x2) at (2, 5)
    x1, x2 = ad.tensor(2.0), ad.tensor(5.0)
    y = ad.log(x1) + x1 * x2 - ad.sin(x2)
    d1, d2 = ad.gradients(y, [x1, x2])
    assert d1.value == pytest.approx(1 / 2 + 5)
    assert d2.value == pytest.approx(2 - np.cos(5))


def test_unreachable_input_gets_zeros_of_its_shape():
    x = ad.tensor(np.ones((2, 3)))
    unused = ad.tensor(np.ones((4,)), name="unused")
    _, du = ad.gradients((x * 2).sum(), [x, unused])
    np.testing.assert_array_equal(du.value, np.zeros(4))


def test_non_scalar_output_is_seeded_with_ones():
    x = ad.tensor([1.0, 2.0, 3.0])
    (dx,) = ad.gradients(x * x, [x])
    np.testing.assert_array_equal(dx.value, [2.0, 4.0, 6.0])


def test_output_grad_weights_the_outputs():
    x = ad.tensor([1.0, 2.0, 3.0])
    (dx,) = ad.gradients(x * x, [x], output_grad=np.array([1.0, 0.0, -1.0]))
    np.testing.assert_array_equal(dx.value, [2.0, 0.0, -6.0])


def test_gradient_of_gradient_is_the_second_derivative():
    x = ad.tensor(0.7)
    y = ad.sin(x) * x
    (dy,) = ad.gradients(y, [x])
    (ddy,) = ad.gradients(dy, [x])
    (dddy,) = ad.gradients(ddy, [x])
    assert dy.value == pytest.approx(np.cos(0.7) * 0.7 + np.sin(0.7))
    assert ddy.value == pytest.approx(2 * np.cos(0.7) - 0.7 * np.sin(0.7))
    assert dddy.value == pytest.approx(-3 * np.sin(0.7) - 0.7 * np.cos(0.7))


def test_hessian_vector_product():
    # f(x) = sum(x**3): Hessian = diag(6 x); H v = 6 x v.
    x = ad.tensor([1.0, -2.0, 3.0])
    v = np.array([1.0, 1.0, 2.0])
    (g,) = ad.gradients((x**3).sum(), [x])
    (hv,) = ad.gradients((g * v).sum(), [x])
    np.testing.assert_allclose(hv.value, 6 * np.array([1.0, -2.0, 3.0]) * v)


@pytest.mark.parametrize("trans_A", [False, True])
@pytest.mark.parametrize("trans_B", [False, True])
def test_matmul_gradients_with_both_transpose_flags(trans_A, trans_B):
    rng = np.random.default_rng(0)
    a_plain, b_plain = rng.normal(size=(2, 3)), rng.normal(size=(3, 4))
    a = ad.tensor(a_plain.T if trans_A else a_plain)
    b = ad.tensor(b_plain.T if trans_B else b_plain)
    y = ad.matmul(a, b, trans_A, trans_B)
    np.testing.assert_allclose(y.value, a_plain @ b_plain)
    dy = rng.normal(size=(2, 4))
    da, db = ad.gradients(y, [a, b], output_grad=dy)
    expected_da, expected_db = dy @ b_plain.T, a_plain.T @ dy  # the plain rule
    np.testing.assert_allclose(da.value, expected_da.T if trans_A else expected_da)
    np.testing.assert_allclose(db.value, expected_db.T if trans_B else expected_db)


def test_broadcast_gradients_are_summed_to_each_input_shape():
    x = ad.tensor(np.ones((4, 3)))
    bias = ad.tensor(np.zeros((1, 3)))
    scale = ad.tensor(2.0)
    dx, dbias, dscale = ad.gradients(((x + bias) * scale).sum(), [x, bias, scale])
    assert dx.value.shape == (4, 3) and np.all(dx.value == 2.0)
    np.testing.assert_array_equal(dbias.value, [[8.0, 8.0, 8.0]])
    assert dscale.value.shape == () and dscale.value == 12.0


def test_gradient_with_respect_to_an_intermediate_node():
    x = ad.tensor(2.0)
    h = x * x
    y = h * 3 + x
    dh, dx = ad.gradients(y, [h, x])
    assert dh.value == 3.0
    assert dx.value == 3.0 * 4.0 + 1.0


def test_symbolic_and_imperative_give_identical_results():
    rng = np.random.default_rng(1)
    w_val, x_val = rng.normal(size=(3, 2)), rng.normal(size=(4, 3))
    labels = np.array([0, 1, 1, 0])

    def loss(x, w):
        return ad.softmax_cross_entropy(ad.tanh(x @ w), labels)

    w, x = ad.tensor(w_val), ad.tensor(x_val)
    eager = loss(x, w)
    eager_grads = values(ad.gradients(eager, [x, w]))

    ws, xs = ad.Variable("w"), ad.Variable("x")
    symbolic = loss(xs, ws)
    grads = ad.gradients(symbolic, [xs, ws])
    assert symbolic.value is None and all(g.value is None for g in grads)
    out = ad.Executor([symbolic, *grads]).run({ws: w_val, xs: x_val})
    np.testing.assert_array_equal(out[0], eager.value)
    for got, expected in zip(out[1:], eager_grads, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_symbolic_broadcasting_without_declared_shapes():
    x, b = ad.Variable("x"), ad.Variable("b")
    gx, gb = ad.gradients((x * b).sum(), [x, b])
    got_gx, got_gb = ad.evaluate([gx, gb], {x: np.ones((2, 3)), b: np.arange(3.0)})
    np.testing.assert_array_equal(got_gx, np.tile(np.arange(3.0), (2, 1)))
    np.testing.assert_array_equal(got_gb, [2.0, 2.0, 2.0])


def test_a_deep_chain_does_not_hit_the_recursion_limit():
    x = ad.tensor(0.5)
    y = x
    for _ in range(20_000):
        y = ad.sin(y)
    (dx,) = ad.gradients(y, [x])
    # d sin^n(x)/dx = prod cos(sin^k(x)); recompute it in plain NumPy.
    value, expected = 0.5, 1.0
    for _ in range(20_000):
        expected *= np.cos(value)
        value = np.sin(value)
    assert y.value == pytest.approx(value)
    assert dx.value == pytest.approx(expected)


def test_gradient_graph_reads_forward_values_and_is_made_of_ops():
    x = ad.tensor(1.5, name="x")
    y = ad.exp(x)
    (dx,) = ad.gradients(y, [x])
    graph = ad.find_topo_sort([dx])
    assert y in graph  # d exp(x) = dY * Y: the rule reuses the forward output
    assert all(isinstance(n.op, ad.Op) for n in graph)


def test_only_needed_gradient_nodes_are_computed(monkeypatch):
    # The matmul rule builds both dX and dW; asking for dW alone must compute one matmul.
    calls = []
    original = ad.ops.linalg.MatMul.compute

    def counting_compute(self, *args, **kwargs):
        calls.append(args[0].shape)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ad.ops.linalg.MatMul, "compute", counting_compute)
    x, w = ad.tensor(np.ones((2, 3))), ad.tensor(np.ones((3, 1)))
    y = (x @ w).sum()
    assert len(calls) == 1
    (dw,) = ad.gradients(y, [w])
    assert len(calls) == 2, f"matmuls computed for inputs of shapes {calls}"
    np.testing.assert_array_equal(dw.value, [[2.0], [2.0], [2.0]])


def test_imperative_gradients_keep_only_the_requested_values():
    # Intermediate adjoints are freed once used (memory), the results keep their values.
    x = ad.tensor(np.linspace(0.1, 1.0, 5))
    y = ad.exp(ad.sin(x) * x).sum()
    (dx,) = ad.gradients(y, [x])
    forward = set(ad.find_topo_sort([y]))
    intermediates = [n for n in ad.find_topo_sort([dx]) if n not in forward and n is not dx]
    assert intermediates and all(n.value is None for n in intermediates)
    np.testing.assert_allclose(dx.value, ad.evaluate(dx))


def test_gradients_leave_the_garbage_collector_as_they_found_it():
    import gc

    x = ad.tensor(2.0)
    assert gc.isenabled()
    ad.gradients(x * x, [x])
    assert gc.isenabled()
    with pytest.raises(TypeError):
        ad.gradients(x * x, x)  # fails before any work

    class Broken(ad.Op, register=False):
        """Y = X, with a gradient rule that fails."""

        def compute(self, x):
            return x

        def gradient(self, node, output_grad):
            raise RuntimeError("rule failed")

    with pytest.raises(RuntimeError, match="rule failed"):
        ad.gradients(Broken.apply(x), [x])  # fails inside the reverse pass
    assert gc.isenabled()
    gc.disable()
    try:
        ad.gradients(x * x, [x])
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_imperative_gradient_wrt_an_unused_placeholder_is_symbolic_zeros():
    x, p = ad.tensor(2.0, name="x"), ad.Variable("p")
    dx, dp = ad.gradients(x * x, [x, p])
    assert float(dx.value) == 4.0
    assert dp.value is None  # p has no value yet: its zeros come when it is fed
    np.testing.assert_array_equal(ad.evaluate(dp, {p: np.ones((2, 3))}), np.zeros((2, 3)))


def soft_labels_with_a_masked_and_an_unnormalised_row():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((3, 4))
    labels = rng.uniform(0.1, 1.0, (3, 4))
    labels[0] /= labels[0].sum()  # a proper distribution
    labels[1] = 0.0  # a masked row: no loss, no gradient
    labels[2] *= 2.5 / labels[2].sum()  # unnormalised: sums to 2.5
    return logits, labels


@pytest.mark.parametrize("mode", ["rev", "fwd"])
def test_cross_entropy_derivatives_with_labels_that_do_not_sum_to_one(mode):
    logits, labels = soft_labels_with_a_masked_and_an_unnormalised_row()
    ad.check_grads(ad.softmax_cross_entropy, [logits, labels], order=2, modes=[mode])
    z, p = ad.tensor(logits), ad.tensor(labels)
    coarse, composed = ad.softmax_cross_entropy(z, p), ad.softmax_cross_entropy_composed(z, p)
    for a, b in zip(ad.gradients(coarse, [z, p]), ad.gradients(composed, [z, p]), strict=True):
        np.testing.assert_allclose(a.value, b.value, rtol=1e-12, atol=1e-15)
    z_dot, p_dot = np.ones_like(logits), np.arange(12.0).reshape(3, 4)
    np.testing.assert_allclose(
        ad.jvp_graph(coarse, [z, p], [z_dot, p_dot]).value,
        ad.jvp_graph(composed, [z, p], [z_dot, p_dot]).value,
        rtol=1e-12,
    )


def test_cross_entropy_gradient_by_hand_for_unnormalised_and_masked_rows():
    # L = -(1/2) sum_rows sum_j P_j log softmax(Z)_j; dZ = (softmax(Z) * sum(P) - P) / 2.
    z = ad.tensor([[0.0, 0.0], [1.0, 2.0]])
    p = ad.tensor([[1.0, 1.0], [0.0, 0.0]])
    loss = ad.softmax_cross_entropy(z, p)
    assert float(loss.value) == pytest.approx(np.log(2.0))  # row 0: 2 log 2, over 2 rows
    (dz,) = ad.gradients(loss, [z])
    np.testing.assert_allclose(dz.value, [[0.0, 0.0], [0.0, 0.0]], atol=1e-15)


def test_cross_entropy_with_soft_labels_matches_pytorch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here")
    logits, labels = soft_labels_with_a_masked_and_an_unnormalised_row()
    z_t = torch.tensor(logits, requires_grad=True)
    expected = torch.nn.functional.cross_entropy(z_t, torch.tensor(labels))
    expected.backward()
    z = ad.tensor(logits)
    loss = ad.softmax_cross_entropy(z, labels)
    (dz,) = ad.gradients(loss, [z])
    assert float(loss.value) == pytest.approx(expected.item(), rel=1e-12)
    np.testing.assert_allclose(dz.value, z_t.grad.numpy(), rtol=1e-10)


def imperative_gradient_of_a_product():
    x, b = ad.tensor(np.ones(3), name="x"), ad.tensor(np.ones(3), name="b")
    y = ad.sum(x * b)
    return x, b, y, ad.gradients(y, [x, b])


@pytest.mark.parametrize("fed", ["x", "b"])
def test_imperative_gradients_fed_at_a_new_shape_refuse_with_the_reason(fed):
    x, b, y, (dx, db) = imperative_gradient_of_a_product()
    executor = ad.Executor([dx, db])
    with pytest.raises(ad.ShapeError) as info:
        executor.run({fed: np.ones((2, 3))})  # was: dx of shape (2, 3) for x of shape (3,)
    message = str(info.value)
    for fragment in [f"'{fed}' was fed shape (2, 3)", "(3,)", "multiply", "ad.Variable"]:
        assert fragment in message, f"{fragment!r} not in: {message}"


def test_imperative_gradients_fed_at_their_own_shape_and_forward_graphs_at_any():
    x, b, y, (dx, db) = imperative_gradient_of_a_product()
    new_dx, new_db = ad.Executor([dx, db]).run({b: np.arange(3.0), x: np.full(3, 2.0)})
    np.testing.assert_array_equal(new_dx, [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(new_db, [2.0, 2.0, 2.0])
    (value,) = ad.Executor([y]).run({b: np.ones((2, 3))})  # no gradient in it: any shape
    assert value == 6.0


def test_gradients_built_from_placeholders_follow_the_fed_shapes():
    x, b = ad.Variable("x"), ad.Variable("b")
    dx, db = ad.gradients(ad.sum(x * b), [x, b])
    executor = ad.Executor([dx, db])
    for b_value in [np.arange(3.0), np.arange(6.0).reshape(2, 3)]:
        new_dx, new_db = executor.run({x: np.ones(3), b: b_value})
        assert new_dx.shape == (3,) and new_db.shape == b_value.shape
        np.testing.assert_array_equal(new_dx, b_value.reshape(-1, 3).sum(axis=0))


def test_symbolic_gradients_of_a_tensor_fed_another_shape_are_summed_back_to_it():
    # Static shapes may drop a sum back to an input's shape only where the declared
    # shapes prove it: a tensor leaf can be fed any shape, so its gradient keeps it.
    x = ad.Variable("x", shape=(None, 3))
    c = ad.tensor(np.zeros((4, 3)))
    dx, dc = ad.gradients(ad.sum(x * c), [x, c])
    got = ad.Executor([dx, dc]).run({x: np.ones((4, 3)), c: np.full((1, 3), 2.0)})
    np.testing.assert_allclose(got[0], np.full((4, 3), 2.0))
    np.testing.assert_allclose(got[1], np.full((1, 3), 4.0))  # summed over the 4 rows
