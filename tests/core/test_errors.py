"""Bad input gets an error that names the op, the shapes or dtypes, and what to do."""

from contextlib import contextmanager

import numpy as np
import pytest

import autodiff as ad


@contextmanager
def raises(error, *fragments):
    """pytest.raises that also checks the message contains every fragment."""
    with pytest.raises(error) as info:
        yield info
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} not in: {info.value}"


def test_matmul_shape_mismatch_names_the_op_and_both_shapes():
    a, b = ad.tensor(np.ones((2, 3))), ad.tensor(np.ones((4, 5)))
    with raises(ad.ShapeError, "matmul", "(2, 3)", "(4, 5)", "3 and 4", "trans_B=True"):
        a @ b


def test_matmul_of_a_vector_says_how_to_make_a_matrix():
    # A vector known as one when the graph is built follows NumPy's rule; one
    # that turns out to be a vector only when fed is refused, saying what to do.
    assert (ad.tensor(np.ones(3)) @ ad.tensor(np.ones((3, 2)))).shape == (2,)
    v = ad.Variable("v")
    with raises(ad.ShapeError, "matmul", "(3,)", "reshape", "declare the Variable's shape"):
        ad.evaluate(v @ ad.tensor(np.ones((3, 2))), {v: np.ones(3)})


def test_broadcast_mismatch_names_the_op_and_both_shapes():
    with raises(ad.ShapeError, "add", "(2, 3)", "(4,)", "trailing dimensions"):
        ad.tensor(np.ones((2, 3))) + ad.tensor(np.ones(4))


def test_broadcast_mismatch_in_a_symbolic_graph_is_just_as_clear():
    a, b = ad.Variable("a"), ad.Variable("b")
    with raises(ad.ShapeError, "multiply", "(2, 3)", "(4,)"):
        ad.evaluate(a * b, {a: np.ones((2, 3)), b: np.ones(4)})


@pytest.mark.parametrize(
    "data", [[1, 2, 3], np.array([True, False]), np.array([1.0, None], dtype=object)]
)
def test_non_float_input_to_a_differentiable_op(data):
    x = ad.tensor(data)
    with raises(ad.DTypeError, "exp", str(x.dtype), "dtype='float64'"):
        ad.exp(x)


def test_integer_labels_are_fine_where_an_op_expects_them():
    loss = ad.softmax_cross_entropy(ad.tensor(np.zeros((2, 3))), [0, 2])
    assert loss.value == pytest.approx(np.log(3))


def test_placeholder_missing_from_the_feed_is_named():
    x, y = ad.Variable("x"), ad.Variable("y")
    with raises(ValueError, "Placeholder 'y'", "feed"):
        ad.evaluate(x * y, {x: 1.0})


def test_feed_of_the_wrong_shape_for_a_declared_placeholder():
    x = ad.Variable("x", shape=(None, 3))
    assert ad.evaluate(x * 2, {x: np.ones((5, 3))}).shape == (5, 3)
    with raises(ad.ShapeError, "'x'", "(None, 3)", "(2, 4)"):
        ad.evaluate(x * 2, {x: np.ones((2, 4))})


def test_feed_by_an_unknown_name_lists_the_leaves():
    with raises(KeyError, "'z'", "'x'"):
        ad.evaluate(ad.Variable("x") * 2, {"z": 1.0})


def test_gradients_of_something_that_is_not_a_node():
    with raises(TypeError, "gradients", "ndarray", "Node"):
        ad.gradients(np.ones(3), [])


def test_gradients_wrt_must_be_a_list():
    x = ad.tensor(1.0)
    with raises(TypeError, "gradients(y, [x])"):
        ad.gradients(x * 2, x)
    with raises(TypeError, "wrt must hold Nodes"):
        ad.gradients(x * 2, [1.0])


def test_gradients_with_respect_to_integers():
    labels = ad.tensor([1, 2])
    with raises(ad.DTypeError, "int64", "floating-point"):
        ad.gradients(ad.tensor(1.0) * 2, [labels])


def test_output_grad_of_the_wrong_shape():
    x = ad.tensor(np.ones(3))
    with raises(ValueError, "output_grad", "(4,)", "(3,)"):
        ad.gradients(x * 2, [x], output_grad=np.ones(4))


def test_cross_entropy_labels_that_do_not_fit():
    logits = ad.tensor(np.ones((3, 4)))
    with raises(ad.ShapeError, "softmax_cross_entropy", "(2,)", "(3, 4)"):
        ad.softmax_cross_entropy(logits, [0, 1])
    with raises(ValueError, "[0, 4)", "7"):
        ad.softmax_cross_entropy(logits, [0, 1, 7])
    with raises(ad.DTypeError, "probabilities"):
        ad.softmax_cross_entropy(logits, np.array(["a", "b", "c"]))


def test_reshape_to_an_impossible_shape():
    with raises(ValueError, "reshape", "size 6", "(4,)"):
        ad.tensor(np.ones((2, 3))).reshape((4,))


def test_executor_rejects_what_is_not_a_node():
    with raises(TypeError, "Executor takes Nodes"):
        ad.Executor([np.ones(3)])


def test_unknown_device():
    with raises(ValueError, "'tpu'", "'cpu' or 'gpu'"):
        ad.tensor(1.0, device="tpu")


def test_a_gradient_rule_returning_the_wrong_number_of_gradients():
    class Half(ad.Op, register=False):
        """Y = X / 2, with a broken rule that forgets to return a list per input."""

        def compute(self, x, y):
            return x / 2 + 0 * y

        def gradient(self, node, output_grad):
            return [output_grad / 2]

    x = ad.tensor(1.0)
    with raises(TypeError, "Half.gradient returned 1 gradients for 2 inputs"):
        ad.gradients(Half.apply(x, x), [x])


def test_integer_feed_to_a_placeholder_says_how_to_declare_or_cast_it():
    x = ad.Variable("pixels")
    executor = ad.Executor([ad.sin(x) * 2])
    with raises(
        ad.DTypeError,
        "sin: input 0 has dtype int64",
        "Placeholder 'pixels' was fed int64 data",
        "ad.Variable('pixels', dtype='float64')",
        "np.asarray(data, dtype='float64')",
    ) as info:
        executor.run({x: np.arange(3)})
    assert "ad.tensor(" not in str(info.value)  # a placeholder is no tensor
    declared = ad.Variable("pixels", dtype="float32")  # the fix the message gives
    np.testing.assert_allclose(
        ad.evaluate(ad.sin(declared), {declared: np.arange(3)}), np.sin([0, 1, 2]), rtol=1e-6
    )


def test_integer_feed_to_a_tensor_says_to_feed_floats():
    t = ad.tensor(np.ones(3), name="t")
    with raises(ad.DTypeError, "exp", "'t' was fed int64 data", "feed floats") as info:
        ad.evaluate(ad.exp(t), {t: np.arange(3)})
    assert "Variable" not in str(info.value)


def test_integer_constant_says_how_to_make_a_float_constant():
    with raises(ad.DTypeError, "exp", "ad.constant(data, dtype='float64')"):
        ad.exp(ad.constant([1, 2]))
