"""Static shapes and dtypes: for every op, the signature inferred before running agrees
with the value computed, with shapes known, partly known (None axes) or unknown."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import autodiff as ad
from autodiff.static_shapes import Dim, Signature, Signatures
from strategies import OP_CASES

OPS = sorted(OP_CASES)


def test_every_op_has_a_rule():
    missing = [name for name in OPS if ad.Op.registry[name].infer is ad.Op.infer]
    assert not missing, f"ops without a shape rule (Op.infer): {missing}"


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@given(data=st.data())
def test_inferred_signature_is_the_computed_one(name, dtype, data):
    case = data.draw(OP_CASES[name])
    out = case.fn(*[ad.tensor(a, dtype=dtype) for a in case.args])
    signature = Signatures().of(out)
    assert signature.is_static
    assert signature.shape == np.shape(out.value)
    assert signature.dtype == np.result_type(out.value)


@pytest.mark.parametrize("name", OPS)
@given(data=st.data())
def test_known_axes_are_right_when_others_are_unknown(name, data):
    case = data.draw(OP_CASES[name])
    hide = data.draw(st.lists(st.booleans(), min_size=8, max_size=8))
    leaves = []
    for i, arg in enumerate(case.args):
        shape = [None if hide[(i + k) % 8] else n for k, n in enumerate(arg.shape)]
        leaves.append(ad.Variable(f"x{i}", shape, "float64"))
    out = case.fn(*leaves)
    value = ad.evaluate(out, dict(zip(leaves, case.args, strict=True)))
    signature = Signatures().of(out)
    assert signature.dtype == np.result_type(value)
    if isinstance(signature.shape, tuple):
        assert len(signature.shape) == np.ndim(value)
        for inferred, actual in zip(signature.shape, np.shape(value), strict=True):
            assert inferred == actual or isinstance(inferred, Dim)


def test_unknown_shapes_are_tracked_through_elementwise_ops():
    x, y = ad.Variable("x"), ad.Variable("y", shape=(None, 3))
    signatures = Signatures()
    assert signatures.of(ad.tanh(x) * 2 - x) == Signature(x, x)
    assert signatures.of(ad.sin(y) + y) == signatures.of(y)
    assert signatures.of(x * y) != signatures.of(x)  # x may be smaller than the product
    assert signatures.of(y @ ad.Variable("w", shape=(3, 5))).shape == (Dim(y, 0), 5)


def test_dtypes_promote_as_numpy_does():
    x32 = ad.Variable("x", shape=(2,), dtype="float32")
    signatures = Signatures()
    assert signatures.of(x32 * 2.0).dtype == np.float32  # Python numbers are weak
    assert signatures.of(x32 * ad.constant(np.ones(2))).dtype == np.float64
    assert not signatures.of(ad.Variable("u") * x32).is_static
