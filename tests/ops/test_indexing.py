"""Indexing, joining, splitting, axes and matmul's vector rule, beyond what the registry-wide
tests (test_every_op.py) check for every op: repeated indices, empty picks, graphs run
at a new shape, NumPy's vector rule for matmul, and the errors."""

import numpy as np
import pytest

import autodiff as ad


def grad_of(f, x):
    leaf = ad.tensor(x)
    (g,) = ad.gradients(f(leaf), [leaf])
    return g.value


def test_repeated_indices_add_their_adjoints():
    x = np.arange(5.0)
    g = grad_of(lambda a: ad.sum(a[[0, 0, 3, 0]] * np.array([1.0, 2.0, 3.0, 4.0])), x)
    np.testing.assert_array_equal(g, [7.0, 0.0, 0.0, 3.0, 0.0])


def test_a_mask_and_a_stepped_slice_route_the_adjoint_back():
    x = np.array([[-1.0, 2.0, 3.0], [4.0, -5.0, 6.0]])
    g = grad_of(lambda a: ad.sum(a[x > 0] ** 2), x)
    np.testing.assert_array_equal(g, np.where(x > 0, 2 * x, 0))
    g = grad_of(lambda a: ad.sum(a[::-1, ::2] * 3), x)
    np.testing.assert_array_equal(g, [[3, 0, 3], [3, 0, 3]])


def test_an_empty_pick_has_a_zero_gradient():
    x = np.arange(4.0)
    out = ad.tensor(x)[np.zeros(4, bool)]
    assert out.shape == (0,)
    np.testing.assert_array_equal(grad_of(lambda a: ad.sum(a[2:2] * 5), x), np.zeros(4))


def test_an_int_index_gives_an_array_and_a_view():
    x = ad.tensor(np.arange(6.0).reshape(2, 3))
    row, element = x[1], x[1, 2]
    assert isinstance(element.value, np.ndarray) and element.shape == ()
    assert np.shares_memory(row.value, x.value)
    assert float(element.value) == 5.0


def test_index_errors_name_the_index_and_the_shape():
    node = ad.Variable("x")[5]  # symbolic: the shape rule sees the mistake first
    with pytest.raises(ad.ShapeError, match=r"index \[5\] does not fit shape \(2, 3\)"):
        node.op.infer(ad.graph.Spec((2, 3), np.float64), **node.attrs)
    with pytest.raises(IndexError, match="getitem.*out of bounds"):
        _ = ad.tensor(np.zeros((2, 3)))[5]
    with pytest.raises(TypeError, match="integers or booleans, got dtype float64"):
        _ = ad.tensor(np.zeros(3))[np.array([0.5])]
    with pytest.raises(TypeError, match="the index is a Node"):
        _ = ad.tensor(np.zeros(3))[ad.tensor(np.array([0]))]


def test_concatenate_and_split_run_at_any_batch_size():
    """Where each part starts is read from the shapes when the graph runs."""
    a, b = ad.Variable("a"), ad.Variable("b")
    c = ad.concatenate([a, b * 2], axis=0)
    loss = ad.sum(c * c)
    ga, gb = ad.gradients(loss, [a, b])
    run = ad.Executor([c, ga, gb])
    for n, m in [(2, 3), (5, 1)]:
        A, B = np.ones((n, 2)), np.full((m, 2), 3.0)
        c_val, ga_val, gb_val = run.run({a: A, b: B})
        np.testing.assert_array_equal(c_val, np.concatenate([A, 2 * B]))
        np.testing.assert_array_equal(ga_val, 2 * A)
        np.testing.assert_array_equal(gb_val, 8 * B)


def test_split_gives_numpys_parts_and_their_gradients():
    x = np.arange(12.0).reshape(2, 6)
    parts = ad.split(ad.tensor(x), [1, 4], axis=1)
    for part, expected in zip(parts, np.split(x, [1, 4], axis=1), strict=True):
        np.testing.assert_array_equal(part.value, expected)
    g = grad_of(lambda t: ad.sum(ad.split(t, 3, axis=-1)[1] * 2), x)
    np.testing.assert_array_equal(g, [[0, 0, 2, 2, 0, 0]] * 2)
    with pytest.raises(ad.ShapeError, match="do not split into 4 equal parts"):
        ad.split(ad.tensor(x), 4, axis=1)


def test_stack_matches_numpy_with_its_gradient():
    xs = [np.full((2, 3), float(k)) for k in range(3)]
    for axis in (0, 1, -1):
        out = ad.stack([ad.tensor(x) for x in xs], axis=axis)
        np.testing.assert_array_equal(out.value, np.stack(xs, axis=axis))
    ad.check_grads(lambda a, b: ad.stack([a, b * a], axis=1), [xs[1], xs[2]], order=2)


def test_shape_errors_of_joining_and_axes():
    with pytest.raises(ad.ShapeError, match="differ in more than axis 0"):
        ad.concatenate([ad.tensor(np.zeros((2, 3))), ad.tensor(np.zeros((2, 4)))])
    with pytest.raises(ad.ShapeError, match=r"not a permutation of the 3 axes"):
        ad.transpose(ad.tensor(np.zeros((2, 3, 4))), (0, 0, 1))
    with pytest.raises(ad.ShapeError, match="length > 1"):
        ad.squeeze(ad.tensor(np.zeros((2, 1))), 0)


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((5, 2, 3), (3,)), ((3,), (5, 3, 2)),
     ((2, 1, 3, 4), (5, 4, 2)), ((3, 4), (2, 4, 5))],
)  # fmt: skip
def test_matmul_follows_numpy_for_vectors_and_batches(a_shape, b_shape):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=a_shape), rng.normal(size=b_shape)
    out = ad.tensor(a) @ ad.tensor(b)
    np.testing.assert_allclose(out.value, a @ b, rtol=1e-12)
    assert out.shape == np.shape(a @ b)
    ad.check_grads(lambda x, y: x @ y, [a, b], order=2, modes=("rev", "fwd"))
    out32 = ad.tensor(a, dtype="float32") @ ad.tensor(b, dtype="float32")
    assert out32.dtype == np.float32


def test_matmul_of_a_vector_declared_as_one_and_of_an_undeclared_one():
    A, v = ad.Variable("A"), ad.Variable("v", shape=(3,))
    y = A @ v
    (gv,) = ad.gradients(ad.sum(y), [v])
    m = np.arange(6.0).reshape(2, 3)
    y_val, gv_val = ad.Executor([y, gv]).run({A: m, v: np.ones(3)})
    np.testing.assert_array_equal(y_val, m @ np.ones(3))
    np.testing.assert_array_equal(gv_val, m.sum(axis=0))
    w = ad.Variable("w")  # no shape: a vector is only known when the graph runs
    with pytest.raises(ad.ShapeError, match=r"declare the Variable's shape"):
        ad.evaluate(A @ w, {A: m, w: np.ones(3)})
