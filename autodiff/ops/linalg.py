"""Matrix multiplication: the op that dominates the cost of training.

``matmul(A, B, trans_A, trans_B)`` multiplies op(A) @ op(B) where op transposes the last
two axes when its flag is set, as in BLAS. Leading axes are batch axes and broadcast.
"""

from __future__ import annotations

from ..core.errors import ShapeError
from ..core.graph import Node, Op, Spec, as_node, named
from .shape import expand_dims, squeeze
from .static_shapes import UNKNOWN, broadcast_shapes, has_rank, is_symbol, result_dtype


def _matrix_transpose(x):
    return x.swapaxes(-1, -2)


class MatMul(Op):
    """Y = A @ B;   dA = dY @ B.T,  dB = A.T @ dY;   Y' = A' @ B + A @ B'.

    With the transpose flags the same rules are written without forming any transpose:
    each case below is the plain rule with the flags pushed through.
    """

    broadcasts = True

    def compute(self, a, b, trans_A, trans_B):
        a, b = self.operands(a, b, trans_A, trans_B)
        return a @ b

    def operands(self, a, b, trans_A, trans_B):
        """A and B with the transpose flags applied (views, no copies)."""
        self._check_shapes(a, b, trans_A, trans_B)
        return (_matrix_transpose(a) if trans_A else a), (_matrix_transpose(b) if trans_B else b)

    def infer(self, a, b, trans_A, trans_B):
        if not (has_rank(a.shape) and has_rank(b.shape)):
            return Spec(UNKNOWN, result_dtype(a.dtype, b.dtype))
        self._check_shapes(a, b, trans_A, trans_B)
        rows = a.shape[-1] if trans_A else a.shape[-2]
        columns = b.shape[-2] if trans_B else b.shape[-1]
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        return Spec((*batch, rows, columns), result_dtype(a.dtype, b.dtype))

    def gradient(self, node, output_grad):
        a, b = node.inputs
        dy = output_grad
        trans_A, trans_B = node.attrs["trans_A"], node.attrs["trans_B"]
        if not trans_A and not trans_B:  # Y = A B
            return [matmul(dy, b, trans_B=True), matmul(a, dy, trans_A=True)]
        if trans_A and not trans_B:  # Y = A^T B
            return [matmul(b, dy, trans_B=True), matmul(a, dy)]
        if not trans_A and trans_B:  # Y = A B^T
            return [matmul(dy, b), matmul(dy, a, trans_A=True)]
        return [matmul(b, dy, True, True), matmul(dy, a, True, True)]  # Y = A^T B^T

    def jvp(self, node, a_dot, b_dot):
        a, b = node.inputs
        flags = node.attrs
        return matmul(a_dot, b, **flags) + matmul(a, b_dot, **flags)

    def unbroadcast_needed(self, node, index, known_shape=None):
        # The matrix axes of each gradient are right by construction; only batch axes
        # that broadcasting stretched or added need summing.
        known_shape = known_shape or (lambda n: n.shape)
        shape, input_shape = known_shape(node), known_shape(node.inputs[index])
        known = isinstance(shape, tuple) and isinstance(input_shape, tuple)
        return not (known and shape[:-2] == input_shape[:-2])

    def _check_shapes(self, a, b, trans_A, trans_B):  # (arrays, or Specs in infer)
        sa, sb = getattr(a, "shape", ()), getattr(b, "shape", ())
        if len(sa) < 2 or len(sb) < 2:
            vector = sa if len(sa) < 2 else sb
            raise ShapeError(
                f"matmul: inputs need at least 2 dimensions here, got shapes {sa} and {sb}. "
                f"ad.matmul treats a vector as NumPy does when it knows, as the graph is "
                f"built, that it is one: declare the Variable's shape (ad.Variable('v', "
                f"shape=(n,))), or make the vector of shape {vector} a matrix, e.g. "
                f"x.reshape((1, -1)) for a row or x.reshape((-1, 1)) for a column."
            )
        inner_a = sa[-2] if trans_A else sa[-1]
        inner_b = sb[-1] if trans_B else sb[-2]
        if inner_a != inner_b and not (is_symbol(inner_a) or is_symbol(inner_b)):
            raise ShapeError(
                f"matmul: shapes {sa} and {sb} do not line up (trans_A={trans_A}, "
                f"trans_B={trans_B}): the inner dimensions are {inner_a} and {inner_b}. "
                f"Transpose one input (trans_A=True / trans_B=True, or .T) so they match."
            )


def matmul(a, b, trans_A: bool = False, trans_B: bool = False, *, name: str | None = None) -> Node:
    """Matrix product op(a) @ op(b), where op transposes the last two axes if its flag is set.

    NumPy's rule for vectors: a 1-D ``a`` is a row (1, n) and a 1-D ``b`` a column
    (n, 1); the product's added axis is then taken away again (``expand_dims`` before,
    ``squeeze`` after: their gradients do the rest). A transpose flag on a vector does
    nothing, as ``v.T`` does nothing in NumPy.

    >>> import autodiff as ad
    >>> a = ad.tensor([[1.0, 2.0]])
    >>> ad.matmul(a, a, trans_B=True).value
    array([[5.]])
    >>> (a @ ad.tensor([3.0, 4.0])).value
    array([11.])
    """
    a, b = as_node(a), as_node(b)
    a_vector, b_vector = a.ndim == 1, b.ndim == 1
    if not (a_vector or b_vector):
        return MatMul.apply(a, b, trans_A=bool(trans_A), trans_B=bool(trans_B), name=name)
    y = MatMul.apply(
        expand_dims(a, 0) if a_vector else a,
        expand_dims(b, -1) if b_vector else b,
        trans_A=bool(trans_A) and not a_vector,
        trans_B=bool(trans_B) and not b_vector,
    )
    return named(squeeze(y, (-2, -1) if a_vector and b_vector else -2 if a_vector else -1), name)
