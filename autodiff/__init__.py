"""autodiff: a compact reverse-mode automatic differentiation library for teaching.

>>> import autodiff as ad
>>> x = ad.tensor(2.0, name="x")
>>> y = x * ad.sin(x)
>>> (dy,) = ad.gradients(y, [x])
>>> round(float(dy.value), 4)   # sin(2) + 2 cos(2)
0.077
"""

from . import (
    backend,
    checkpoint,
    data,
    executor,
    forward,
    functional,
    fusion,
    graph,
    memory,
    nn,
    numerical,
    ops,
    optim,
    parallel,
    passes,
    static_shapes,
    symbolic,
    viz,
)
from .executor import Executor, evaluate
from .functional import grad, jvp, value_and_grad, vjp
from .gradients import gradients, jvp_graph
from .graph import (
    AutodiffError,
    DeviceError,
    DomainError,
    DTypeError,
    Node,
    Op,
    ShapeError,
    Variable,
    as_node,
    constant,
    deferred,
    find_topo_sort,
    tensor,
)
from .numerical import check_grads
from .ops import *  # noqa: F403  (every op function: ad.exp, ad.matmul, ...)
from .ops import __all__ as _op_names

__version__ = "0.1.0"

__all__ = [
    "AutodiffError",
    "DeviceError",
    "DomainError",
    "DTypeError",
    "Executor",
    "Node",
    "Op",
    "ShapeError",
    "Variable",
    "as_node",
    "backend",
    "check_grads",
    "checkpoint",
    "constant",
    "data",
    "deferred",
    "evaluate",
    "executor",
    "find_topo_sort",
    "forward",
    "functional",
    "fusion",
    "grad",
    "gradients",
    "graph",
    "jvp",
    "jvp_graph",
    "memory",
    "nn",
    "numerical",
    "ops",
    "optim",
    "parallel",
    "passes",
    "static_shapes",
    "symbolic",
    "tensor",
    "value_and_grad",
    "vjp",
    "viz",
    *_op_names,
]
