"""The primitive ops, by family. Each op's forward, gradient and tangent rule live in one class.

Importing this package fills ``Op.registry`` (every op class registers itself) and the
table of Node's operators (``graph.OPERATORS``: ``x + y`` calls ``add``).
"""

from ..graph import OPERATORS
from .elementwise import (
    add,
    cos,
    divide,
    exp,
    log,
    maximum,
    multiply,
    negative,
    ones_like,
    power,
    relu,
    sigmoid,
    sin,
    sqrt,
    step,
    subtract,
    tanh,
    zeros_like,
)
from .indexing import (
    concatenate,
    getitem,
    place_part,
    scatter_like,
    split,
    split_part,
    stack,
)
from .linalg import matmul
from .losses import one_hot, softmax_cross_entropy, softmax_cross_entropy_composed
from .reductions import count, log_softmax, logsumexp, mean, softmax, sum
from .shape import (
    broadcast_like,
    broadcast_to,
    expand_dims,
    flatten,
    reshape,
    reshape_like,
    squeeze,
    sum_to_like,
    transpose,
)

OPERATORS.update(
    add=add,
    subtract=subtract,
    multiply=multiply,
    divide=divide,
    power=power,
    matmul=matmul,
    negative=negative,
    sum=sum,
    mean=mean,
    reshape=reshape,
    transpose=transpose,
    getitem=getitem,
    flatten=flatten,
    squeeze=squeeze,
)

__all__ = [
    "concatenate",
    "expand_dims",
    "flatten",
    "getitem",
    "place_part",
    "scatter_like",
    "split",
    "split_part",
    "squeeze",
    "stack",
    "add",
    "broadcast_like",
    "broadcast_to",
    "cos",
    "count",
    "divide",
    "exp",
    "log",
    "log_softmax",
    "logsumexp",
    "matmul",
    "maximum",
    "mean",
    "multiply",
    "negative",
    "one_hot",
    "ones_like",
    "power",
    "relu",
    "reshape",
    "reshape_like",
    "sigmoid",
    "sin",
    "softmax",
    "softmax_cross_entropy",
    "softmax_cross_entropy_composed",
    "sqrt",
    "step",
    "subtract",
    "sum",
    "sum_to_like",
    "tanh",
    "transpose",
    "zeros_like",
]
