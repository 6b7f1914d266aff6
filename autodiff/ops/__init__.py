"""The primitive ops, by family. Each op's forward, gradient and tangent rule live in one class.

Importing this package fills ``Op.registry`` (every op class registers itself) and the
table of Node's operators (``graph.OPERATORS``: ``x + y`` calls ``add``).
"""

from ..graph import OPERATORS
from .conv import avg_pool2d, col2im, conv2d, dropout, im2col, max_pool2d
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
from .linalg import matmul
from .losses import one_hot, softmax_cross_entropy, softmax_cross_entropy_composed
from .normalization import batch_norm, layer_norm
from .reductions import (
    argmax,
    argmin,
    count,
    log_softmax,
    logsumexp,
    max,
    mean,
    min,
    prod,
    softmax,
    std,
    sum,
    var,
)
from .shape import (
    broadcast_like,
    broadcast_to,
    reshape,
    reshape_like,
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
)

__all__ = [
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
    # reductions and convolution (issue 19)
    "argmax",
    "argmin",
    "avg_pool2d",
    "batch_norm",
    "col2im",
    "conv2d",
    "dropout",
    "im2col",
    "layer_norm",
    "max",
    "max_pool2d",
    "min",
    "prod",
    "std",
    "var",
]
