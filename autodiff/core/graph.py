"""Computation graphs: nodes and ops.

A program is a graph. Each ``Node`` is the output of one ``Op`` applied to input
nodes; leaves are placeholders (``Variable``), tensors with a value (``tensor``) and
constants. The same nodes serve two styles of programming:

* imperative (define-by-run, like PyTorch): when every input of a new node has a
  value, the node computes its value at once;
* symbolic (define-then-run, like TensorFlow 1): when some input has no value yet, the
  node waits until an ``Executor`` (executor.py) runs the graph with a ``feed_dict``.

Gradients are built as more nodes (see ``gradients.py``), so everything here works on
them too.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ClassVar, NamedTuple

from . import backend
from .errors import AutodiffError, DeviceError, DTypeError

# Inside ``deferred()``: the list recording the nodes built, in creation order (a
# topological order), which are not computed; outside (None) a node is computed as
# soon as its inputs have values. gradients() builds its graph this way, then computes
# only what the results need. A context variable: each thread has its own.
_building: ContextVar[list[Node] | None] = ContextVar("building", default=None)
_FLOAT64 = backend.float_dtype("float64")  # the dtype check's default for Python numbers
new_serial = itertools.count().__next__  # numbers nodes in creation order (see Node.serial)


@contextmanager
def deferred() -> Iterator[list[Node]]:
    """Build nodes without computing them, even when their inputs have values.

    Yields the list of nodes built inside the block, in creation order.

    >>> x = tensor(2.0)
    >>> with deferred() as built:
    ...     y = x * 3
    >>> y.value is None and built[-1] is y
    True
    """
    built: list[Node] = []
    token = _building.set(built)
    try:
        yield built
    finally:
        _building.reset(token)


def named(node: Node, name: str | None) -> Node:
    """``node``, called ``name`` if one is given: the ``name=`` of an op function made of
    several ops names its last node (drawings show the name instead of the op's symbol)."""
    if name is not None:
        node.name = name
    return node


def describe(value: Any) -> str:
    """A short description of an input for error messages: 'float32[2, 3] on cpu'."""
    if value is None:
        return "no value"
    if backend.is_weak_scalar(value):
        return f"Python {type(value).__name__} {value!r}"
    shape = ", ".join(str(d) for d in getattr(value, "shape", ()))
    return f"{value.dtype}[{shape}] on {backend.device_of(value)}"


# What Node's operators and methods call: x + y is OPERATORS["add"](x, y), ops.add.
# The op functions are defined in ops/, which imports this module (never the other
# way round), and fills this table when it is imported; ``import autodiff`` does that.
OPERATORS: dict[str, Callable[..., Node]] = {}


def operator(op_name: str, reflected: bool = False) -> Callable:
    """A Node method calling the op function ``op_name`` (from ``OPERATORS``) on the node
    and the other operand, in that order, or the other way round when ``reflected``."""

    def method(self, *other):
        inputs = (*other, self) if reflected else (self, *other)
        return OPERATORS[op_name](*inputs)

    return method


class Node:
    """One value in a computation graph: the output of ``op`` applied to ``inputs``.

    Attributes: ``op``, ``inputs`` (tuple of Nodes), ``attrs`` (the op's constants, such
    as ``axis``), ``name``, ``value`` (an array, a Python number for constants written
    as numbers, or ``None`` while the node is symbolic), and ``serial`` (creation order).
    """

    __slots__ = ("op", "inputs", "attrs", "name", "value", "serial", "grad", "__weakref__")
    # Make ``numpy_array * node`` call ``node.__rmul__`` instead of looping over the array.
    __array_ufunc__ = None

    def __init__(self, op: Op, inputs: tuple = (), attrs: dict | None = None, name=None):
        self.op = op
        self.inputs = inputs
        self.attrs = attrs if attrs is not None else {}
        self.name = name if name is not None else op.name
        self.value = None
        # Creation order is the order the program was written in, and a topological
        # order (inputs exist first): system/memory.py runs graphs in it.
        self.serial = new_serial()
        self.grad = None  # filled by backward() (PyTorch's habit)

    # Shape, dtype and device come from the value; a placeholder knows its declared ones.
    @property
    def shape(self) -> tuple[int, ...] | None:
        if self.value is not None:
            return getattr(self.value, "shape", ())  # () for a Python number
        return self.attrs.get("shape") if self.op.is_leaf else None

    @property
    def dtype(self):
        if self.value is not None:
            return backend.dtype_of(self.value)
        return self.attrs.get("dtype") if self.op.is_leaf else None

    @property
    def device(self) -> str | None:
        return None if self.value is None else backend.device_of(self.value)

    @property
    def ndim(self) -> int | None:
        shape = self.shape
        return None if shape is None else len(shape)

    def numpy(self):
        """The value as a NumPy array (copied from the GPU if needed)."""
        if self.value is None:
            raise ValueError(f"Node '{self.name}' is symbolic: use ad.evaluate(node, feed_dict).")
        return backend.to_numpy(self.value)

    def __repr__(self) -> str:
        parts = [f"{self.op.name}", f"name={self.name!r}"]
        if self.shape is not None:
            parts.append(f"shape={self.shape}")
        if self.dtype is not None:
            parts.append(f"dtype={self.dtype}")
        if self.value is None:
            parts.append("symbolic")
        return f"Node({', '.join(parts)})"

    # Operators: x + y is add(x, y), 2 * x is multiply(2, x) (reflected: x on the right).
    # Python numbers mix freely, and so do NumPy scalars (np.int64(3) * x: NumPy defers
    # to __rmul__, see __array_ufunc__ above). Comparisons give boolean Nodes (x > 0 for
    # ad.where); not == and !=: Nodes are dict keys and set members (feed_dict, visited
    # sets), compared by identity: use ad.equal / ad.not_equal.
    __add__, __radd__ = operator("add"), operator("add", reflected=True)
    __sub__, __rsub__ = operator("subtract"), operator("subtract", reflected=True)
    __mul__, __rmul__ = operator("multiply"), operator("multiply", reflected=True)
    __truediv__, __rtruediv__ = operator("divide"), operator("divide", reflected=True)
    __pow__, __rpow__ = operator("power"), operator("power", reflected=True)
    __matmul__, __rmatmul__ = operator("matmul"), operator("matmul", reflected=True)
    __neg__, __abs__ = operator("negative"), operator("absolute")
    __lt__, __le__ = operator("less"), operator("less_equal")
    __gt__, __ge__ = operator("greater"), operator("greater_equal")
    __getitem__ = operator("getitem")

    def __pos__(self):
        return self

    # Methods named as in NumPy.
    def sum(self, axis=None, keepdims: bool = False) -> Node:
        return OPERATORS["sum"](self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims: bool = False) -> Node:
        return OPERATORS["mean"](self, axis=axis, keepdims=keepdims)

    def reshape(self, *shape) -> Node:
        return OPERATORS["reshape"](self, shape[0] if len(shape) == 1 else shape)

    def transpose(self, *axes) -> Node:
        return OPERATORS["transpose"](self, axes if axes else None)

    @property
    def T(self) -> Node:
        return OPERATORS["transpose"](self)

    def backward(self) -> None:
        """PyTorch's ``loss.backward()``: fills ``.grad`` of the tensor leaves this node
        depends on: sugar over ``ad.gradients``, defined with it (system/gradients.py)."""
        OPERATORS["backward"](self)

    def flatten(self, start: int = 0) -> Node:
        return OPERATORS["flatten"](self, start)

    def squeeze(self, axis=None) -> Node:
        return OPERATORS["squeeze"](self, axis)


class Spec(NamedTuple):
    """What shape inference knows of a value without computing it (see system/memory.py).

    ``dtype`` is None for a Python number. ``view`` is True when an op's output shares
    the memory of its first input (a reshape, a transpose): it costs no new bytes.

    >>> Spec((2, 3), "float64")
    Spec(shape=(2, 3), dtype='float64', view=False)
    """

    shape: Any  # tuple[int, ...] when concrete
    dtype: Any
    view: bool = False


def spec_of(value: Any) -> Spec:
    """The Spec of a value: its shape and dtype (dtype None for a Python number)."""
    if backend.is_weak_scalar(value):
        return Spec((), None)
    return Spec(tuple(value.shape), value.dtype)


class Op:
    """An operation: how to compute its output, and how to differentiate it.

    Subclasses define

    * ``compute(*input_vals, **attrs)``: the forward computation on arrays;
    * ``gradient(node, output_grad)``: the vector-Jacobian product, one Node (or None
      for "no gradient") per input, *written with library ops*, so that gradient
      graphs can be drawn and differentiated again;
    * ``jvp(node, *input_tangents)``: the tangent of the output (forward mode), also
      written with ops; ``None`` means a zero tangent;
    * ``infer(*input_specs, **attrs)``: the shape rule, the output's ``Spec`` (shape,
      dtype, whether it is a view of input 0) from the inputs' Specs, with no data.
      Memory planning (system/memory.py) and graph passes (ops/static_shapes.py) both use it;
      the second passes symbols for unknown lengths, shapes and dtypes, so rules
      combine shapes with the helpers of ops/static_shapes.py (``broadcast_shapes``...).

    Defining a subclass registers it in ``Op.registry``, which the test suite loops
    over: an op without a passing gradient check fails CI.
    """

    registry: ClassVar[dict[str, type[Op]]] = {}
    _instance: ClassVar[Op]  # ops hold no state: one instance per class serves every node
    name: ClassVar[str] = "op"
    is_leaf: ClassVar[bool] = False
    # True for ops that broadcast their inputs (add, mul, matmul's batch axes...): the
    # engine then sums each input's gradient back to that input's shape.
    broadcasts: ClassVar[bool] = False
    # Positions of inputs that only lend their shape (``ones_like(x)``): the output does
    # not depend on their values, so they get no gradient and may have any dtype.
    shape_inputs: ClassVar[tuple[int, ...]] = ()
    # Positions that may hold integers (class labels); integers are never differentiated.
    integer_inputs: ClassVar[tuple[int, ...]] = ()
    # False for ops whose output has no derivative: comparisons (booleans), argmax
    # (indices). Their inputs may have any dtype, their tangent is zero (jvp: None), and
    # their gradient rule raises ``not_differentiable``'s error (a boolean or an index was
    # differentiated). The tests check their values against NumPy instead.
    differentiable: ClassVar[bool] = True
    # True for ops that take Python numbers as they are (elementwise ops, as NumPy's do).
    # The others call array methods (x.sum()): a number comes as a 0-d array (backend.numbers).
    takes_numbers: ClassVar[bool] = False

    def __init_subclass__(cls, register: bool = True, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__.lower()
        if register:
            Op.registry[cls.name] = cls
        cls._instance = cls()

    @classmethod
    def apply(cls, *inputs, name: str | None = None, **attrs) -> Node:
        """Make a node of this op (called ``name`` in drawings, if given); compute it now
        if every input has a value."""
        for x in inputs:
            if not isinstance(x, Node):  # a number or an array: a constant node
                inputs = tuple([as_node(x) for x in inputs])
                break
        node = Node(cls._instance, inputs, attrs, name)
        built = _building.get()
        if built is not None:
            built.append(node)
            return node
        input_vals = []
        for x in inputs:
            if x.value is None:
                return node  # symbolic: computed later by an Executor
            input_vals.append(x.value)
        node.value = node.op.run(input_vals, attrs, inputs=inputs)
        return node

    def run(self, input_vals: Sequence[Any], attrs: dict, compute: Any = None, inputs=()) -> Any:
        """``compute`` with the checks that turn NumPy errors into readable ones.

        ``compute``, if given, computes instead of the op's own (the system layer writes
        results into planned buffers this way). ``inputs``, the input nodes where the
        caller knows them, make the advice for a non-float input fit the node at hand.
        """
        if self.differentiable:  # floating-point inputs only (a Python number is one)
            for value in input_vals:
                if getattr(value, "dtype", _FLOAT64).kind not in "fc":
                    self.check_dtypes(input_vals, inputs)  # raises, unless it may have any dtype
        if not self.takes_numbers:  # a Python number reaches it as a 0-d array
            for value in input_vals:
                if type(value) in backend.NUMBER_TYPES:
                    input_vals = backend.numbers(input_vals, as_arrays=True)
                    break
        try:
            return (compute or self.compute)(*input_vals, **attrs)
        except AutodiffError:
            raise  # already written for a student
        except Exception as exc:
            raise self.explain(exc, input_vals, attrs) from exc

    def check_dtypes(self, input_vals: Sequence[Any], inputs: Sequence[Node] = ()) -> None:
        """Raise a DTypeError for a non-float input the op cannot take. ``inputs``, the
        input nodes where the caller knows them, make the advice fit the node at hand."""
        for i, value in enumerate(input_vals):
            dtype = getattr(value, "dtype", _FLOAT64)  # (a Python number: as a float)
            if dtype.kind not in "fc" and i not in self.any_dtype_inputs:
                node = inputs[i] if len(inputs) == len(input_vals) else None
                raise DTypeError(
                    f"{self.name}: input {i} has dtype {dtype}, but {self.name} is "
                    f"differentiable and needs floating-point inputs. {_float_advice(node, value)}"
                )

    def explain(self, exc: Exception, input_vals: Sequence[Any], attrs: dict) -> Exception:
        """Turn an error from ``compute`` into one that names the op and its inputs."""
        inputs = ", ".join(describe(v) for v in input_vals)
        settings = f" with {attrs}" if attrs else ""
        devices = [
            (i, backend.device_of(v))
            for i, v in enumerate(input_vals)
            if type(v).__name__ == "ndarray"
        ]
        if len({device for _, device in devices}) > 1:
            placed = ", ".join(f"input {i} on {device}" for i, device in devices)
            return DeviceError(
                f"{self.name}: inputs are on different devices ({placed}). Move one with "
                f"ad.backend.to_device(x, 'gpu'), or make leaves with device='gpu' "
                f"(or ad.backend.set_default_device('gpu'))."
            )
        return type(exc)(f"{self.name} failed on inputs {inputs}{settings}: {exc}")

    def not_differentiable(self, node: Node) -> DTypeError:
        """The error a non-``differentiable`` op's gradient rule raises."""
        return DTypeError(
            f"{self.name} is not differentiable: its output ({node.dtype}) is piecewise "
            f"constant, so no gradient flows back through it. Differentiate a "
            f"floating-point expression instead; to choose values by a condition, use "
            f"ad.where(cond, a, b), which passes gradients to a and b (cond gets none)."
        )

    @property
    def any_dtype_inputs(self) -> tuple[int, ...]:
        return self.shape_inputs + self.integer_inputs

    def compute(self, *input_vals, **attrs):
        raise NotImplementedError(f"{type(self).__name__}.compute")

    def gradient(self, node: Node, output_grad: Node) -> list[Node | None]:
        raise NotImplementedError(f"{type(self).__name__}.gradient")

    def jvp(self, node: Node, *input_tangents: Node) -> Node | None:
        raise NotImplementedError(f"{type(self).__name__}.jvp")

    def infer(self, *input_specs: Spec, **attrs) -> Spec:
        raise NotImplementedError(
            f"{type(self).__name__}.infer: the op has no shape rule, which memory planning "
            f"needs. Define infer(self, *input_specs, **attrs) returning a Spec."
        )

    def unbroadcast_needed(self, node: Node, index: int, known_shape=None) -> bool:
        """Whether the gradient for input ``index`` may be bigger than that input: it has
        the output's shape, and shapes not known (symbolic graphs) may differ.
        ``known_shape(n)``: what is known of a node's shape (default ``n.shape``;
        static_shapes gives symbols, equal only when equal in every run)."""
        known_shape = known_shape or (lambda n: n.shape)
        shape, input_shape = known_shape(node), known_shape(node.inputs[index])
        return not (isinstance(shape, tuple) and shape == input_shape)

    def __repr__(self) -> str:
        return f"<op {self.name}>"


def _float_advice(node: Node | None, value: Any) -> str:
    """How to make the input ``node``, found holding the non-float ``value``, a float."""
    cast = "np.asarray(data, dtype='float64')"
    if node is not None and isinstance(node.op, Placeholder):
        return (
            f"Placeholder '{node.name}' was fed {value.dtype} data: declare it "
            f"ad.Variable('{node.name}', dtype='float64') (or 'float32'), which converts "
            f"what is fed, or feed floats, e.g. {cast}."
        )
    if node is not None and node.op.is_leaf and node.value is not value:
        return f"'{node.name}' was fed {value.dtype} data: feed floats, e.g. {cast}."
    if node is not None and isinstance(node.op, Constant):
        return "Convert it explicitly, e.g. ad.constant(data, dtype='float64') or 'float32'."
    return "Convert it explicitly, e.g. ad.tensor(data, dtype='float64') or 'float32'."


# Leaves ---------------------------------------------------------------------------------


class Placeholder(Op):
    """A named input without a value, filled by ``feed_dict`` when the graph runs."""

    name = "placeholder"
    is_leaf = True


class TensorLeaf(Op):
    """A leaf that holds a value; gradients can be taken with respect to it."""

    name = "tensor"
    is_leaf = True


class Constant(Op):
    """A leaf that holds a value and is never differentiated."""

    name = "constant"
    is_leaf = True


def Variable(name: str, shape: Sequence[int | None] | None = None, dtype=None) -> Node:
    """A placeholder: a named input whose value comes from the feed (define-then-run).

    ``shape`` may use ``None`` for a dimension of any size (a batch, say).

    >>> from autodiff import evaluate
    >>> x = Variable("x", shape=(None, 3))
    >>> evaluate(2 * x, {x: [[1.0, 2.0, 3.0]]})
    array([[2., 4., 6.]])
    """
    attrs = {
        "shape": None if shape is None else tuple(shape),
        "dtype": None if dtype is None else backend.float_dtype(dtype),
    }
    return Node(Placeholder._instance, (), attrs, name)


def tensor(data, name: str | None = None, dtype=None, device: str | None = None) -> Node:
    """A leaf holding a copy of ``data`` (define-by-run): ops on it compute at once.

    >>> x = tensor([1.0, 2.0], name="x", dtype="float32")
    >>> (x * 3).value
    array([3., 6.], dtype=float32)
    """
    node = Node(TensorLeaf._instance, (), {}, name or "tensor")
    node.value = backend.asarray(data, dtype, backend.leaf_device(data, device), copy=True)
    return node


def constant(data, name: str | None = None, dtype=None, device: str | None = None) -> Node:
    """A leaf that is never differentiated. Python numbers stay dtype-less ("weak")."""
    node = Node(Constant._instance, (), None, name or "constant")
    if backend.is_weak_scalar(data) and dtype is None and device is None:
        node.value = data  # weak on every device
    else:
        node.value = backend.asarray(data, dtype=dtype, device=backend.leaf_device(data, device))
    return node


def as_node(x) -> Node:
    """``x`` itself if it is a Node, else a constant holding it (a NumPy scalar as the
    Python number it holds, so that it stays weak: see ``backend.numbers``)."""
    if isinstance(x, Node):
        return x
    return constant(x if backend.is_weak_scalar(x) else backend.numbers([x])[0])


# Running graphs --------------------------------------------------------------------------


def find_topo_sort(nodes: Iterable[Node], descend: Callable[[Node], bool] | None = None):
    """All nodes that ``nodes`` depend on, each once, every node after its inputs.

    Iterative depth-first search (an explicit stack), so a chain of 100,000 ops does not
    hit Python's recursion limit. A node reused many times is still visited once.
    ``descend(node) -> False`` treats a node as a leaf (its inputs are not visited).

    >>> x = tensor(1.0, name="x")
    >>> [n.name for n in find_topo_sort([x * x + x])]
    ['x', 'multiply', 'add']
    """
    topo_order: list[Node] = []
    visited: set[Node] = set()
    for root in nodes:
        if root in visited:
            continue
        visited.add(root)
        stack = [(root, iter(root.inputs if descend is None or descend(root) else ()))]
        while stack:
            node, inputs = stack[-1]
            for child in inputs:
                if child not in visited:
                    visited.add(child)
                    grandchildren = child.inputs if descend is None or descend(child) else ()
                    stack.append((child, iter(grandchildren)))
                    break
            else:
                stack.pop()
                topo_order.append(node)
    return topo_order
