"""autodiff: a compact reverse-mode automatic differentiation library for teaching.

>>> import autodiff as ad
>>> x = ad.tensor(2.0, name="x")
>>> y = x * ad.sin(x)
>>> (dy,) = ad.gradients(y, [x])
>>> round(float(dy.value), 4)   # sin(2) + 2 cos(2)
0.077
"""

import sys

from . import ops
from .core import graph, schedule
from .core.errors import AutodiffError, DeviceError, DomainError, DTypeError, ShapeError
from .core.gradients import jvp_graph
from .core.graph import Node, Op, Variable, as_node, constant, deferred, find_topo_sort, tensor
from .drawing import expression, renderer, viz
from .ops import *  # noqa: F403  (every op function: ad.exp, ad.matmul, ...)
from .ops import __all__ as _op_names
from .ops import static_shapes
from .other_ways import algebra, forward, functional, numerical, simplification, symbolic
from .other_ways.functional import grad, jvp, value_and_grad, vjp
from .other_ways.numerical import check_grads
from .system import (
    backend,
    capture,
    checkpoint,
    compiled,
    executor,
    fusion,
    gradient_cache,
    memory,
    parallel,
    passes,
    slots,
)
from .system.executor import Executor, evaluate
from .system.gradients import gradients
from .training import data, nn, optim

# Each module also answers to its short name, as lectures and notebooks write it:
# ``ad.viz.draw``, ``from autodiff import passes``, ``from autodiff.symbolic import diff``.
for _module in (
    backend, executor, graph, schedule, expression, renderer, viz, algebra, forward,
    functional, numerical, simplification, symbolic, capture, checkpoint, compiled, fusion,
    gradient_cache, memory, parallel, passes, slots, static_shapes, data, nn, optim,
):  # fmt: skip
    sys.modules[f"{__name__}.{_module.__name__.rsplit('.', 1)[1]}"] = _module
sys.modules[f"{__name__}.gradients"] = sys.modules[f"{__name__}.system.gradients"]
del _module

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
