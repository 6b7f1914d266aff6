"""Kernel fusion: one GPU kernel for a run of elementwise ops.

On a GPU every op is a kernel launch that reads its inputs from memory and writes its
output back. The gradient of tanh, ``dY * (1 - Y * Y)``, is three ops: three launches
and two temporary arrays, where one kernel could read dY and Y once and write the
result once. Elementwise ops are the easy case, because element i of the result needs
element i of each input only: a run of them is one loop body.

``fuse_elementwise(outputs)`` is a graph pass (the convention of passes.py). It finds
groups of elementwise nodes whose values are read only inside their group, and puts one
``Fused`` node in place of each group. The node keeps the group as a small ``Program``
(the ops in order, and which earlier value each reads):

* on the CPU it runs the program one op at a time, so the values are those of the
  unfused graph, bit for bit (NumPy has no fusion to offer);
* on the GPU it compiles the program once into one kernel with ``cupy.fuse`` and calls
  that. If CuPy cannot compile it, the program runs one op at a time instead, with a
  warning: slower, never wrong.

The op classes do not change: the kernel is made from their ``compute`` methods, and a
``Fused`` node's gradient and tangent come from their ``gradient`` and ``jvp`` rules,
applied to the group unfolded again. So a fused graph can be differentiated, like any
other. ``Executor(outputs, fuse=True)`` runs a graph fused.

>>> import autodiff as ad
>>> y = ad.Variable("y")
>>> g = ad.Variable("g")
>>> (fused,), report = fuse_elementwise([g * (1 - y * y)])
>>> print(fused.attrs["program"])
x1 × (1 − x0 × x0)
>>> float(ad.evaluate(fused, {y: 0.5, g: 2.0}))
1.5
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import backend
from ..core.gradients import forward_pass, reverse_pass
from ..core.graph import (
    Constant,
    Node,
    Op,
    Spec,
    Variable,
    as_node,
    deferred,
    find_topo_sort,
    spec_of,
)
from ..ops.elementwise import Elementwise
from .gradients import shape_aware_rule
from .passes import PassReport, check_outputs, copy_node, count_nodes
from .slots import last_reads, run_schedule

# The most ops in one kernel: longer runs are cut into several (compile time grows with
# the kernel's length, and a run of thousands would gain nothing more).
MAX_GROUP = 32


@dataclass(frozen=True)
class Literal:
    """A Python number written into a program, such as the 1 in ``1 - y * y``."""

    value: Any
    kind: str  # 'int', 'float' or 'bool': 1 and 1.0 are different programs

    @classmethod
    def of(cls, value: Any) -> Literal:
        return cls(value, type(value).__name__)


@dataclass(frozen=True)
class Instruction:
    """``op(*args, **attrs)``: args are slot numbers (inputs, then earlier results) or
    Literals."""

    op: Op
    args: tuple[int | Literal, ...]
    attrs: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Program:
    """The ops of a fused group. Slots 0 .. n_inputs-1 hold the inputs; instruction k
    writes slot n_inputs + k; the last one is the result. Programs are compared by
    value, so equal groups share one compiled kernel."""

    n_inputs: int
    instructions: tuple[Instruction, ...]

    def slots(
        self, inputs: Sequence[Any], apply: Callable[[Op, list, dict], Any], free: bool = False
    ) -> list:
        """Every slot's value, computing each instruction with ``apply(op, args, attrs)``
        by the Executor's loop (``run_schedule``); ``free=True`` lets go of each value
        after its last use, as an Executor does."""

        def compute(instruction: Instruction, input_vals: list) -> Any:
            read = iter(input_vals)  # the slots' values, with the literals put back
            args = [a.value if isinstance(a, Literal) else next(read) for a in instruction.args]
            return apply(instruction.op, args, dict(instruction.attrs))

        values = [*inputs, *[None] * len(self.instructions)]
        steps = self._steps if free else [(ins, reads, []) for ins, reads, _ in self._steps]
        return run_schedule(steps, values, compute)

    def run(self, inputs: Sequence[Any], apply: Callable[[Op, list, dict], Any]) -> Any:
        """The result, each value let go of after its last use."""
        return self.slots(inputs, apply, free=True)[-1]

    @functools.cached_property
    def _steps(self) -> list[tuple[Any, list[int], list[int]]]:
        """The schedule: a step per slot (the inputs' have nothing to compute), each
        instruction's slots read, and the slots no later instruction reads."""
        reads: list[list[int]] = [[] for _ in range(self.n_inputs)] + [
            [a for a in ins.args if not isinstance(a, Literal)] for ins in self.instructions
        ]
        return list(
            zip(
                [None] * self.n_inputs + list(self.instructions),
                reads,
                last_reads(reads),
                strict=True,
            )
        )

    def __hash__(self) -> int:
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:
        # Looked up in the kernel caches at every run of a fused node: hashing 32
        # instructions anew took 13 us, several kernel launches' worth.
        return hash((self.n_inputs, self.instructions))

    @property
    def kernel_name(self) -> str:
        names = "_".join(instruction.op.name for instruction in self.instructions[:6])
        return f"autodiff_fused_{names}"

    def __str__(self) -> str:
        """The program as one formula of x0, x1, ... (the inputs)."""
        texts = [f"x{i}" for i in range(self.n_inputs)]
        levels = [_ATOM] * self.n_inputs
        for instruction in self.instructions:
            args = []
            for a in instruction.args:
                if isinstance(a, Literal):
                    args.append((f"{a.value:g}" if a.kind == "float" else str(a.value), _ATOM))
                else:
                    args.append((texts[a], levels[a]))
            text, level = _formula(instruction, args)
            texts.append(text)
            levels.append(level)
        return texts[-1]


# How tightly each form binds, for parentheses: a + b < a × b < −a < a ** b < f(a), x0.
_INFIX = {"add": ("+", 1), "subtract": ("−", 1), "multiply": ("×", 2), "divide": ("÷", 2)}
_ATOM = 5


def _formula(instruction: Instruction, args: list[tuple[str, int]]) -> tuple[str, int]:
    """The text of one instruction from its arguments' texts and levels, and its level."""

    def wrap(arg: tuple[str, int], at_least: int) -> str:
        text, level = arg
        return text if level >= at_least else f"({text})"

    name = instruction.op.name
    if name in _INFIX:
        symbol, level = _INFIX[name]
        right = level + 1 if name in ("subtract", "divide") else level
        return f"{wrap(args[0], level)} {symbol} {wrap(args[1], right)}", level
    if name == "negative":
        return f"−{wrap(args[0], 3)}", 3
    if name == "power":
        return f"{wrap(args[0], _ATOM)}**{wrap(args[1], _ATOM)}", 4
    if name == "power_scalar":
        return f"{wrap(args[0], _ATOM)}**{dict(instruction.attrs)['exponent']:g}", 4
    return f"{name}({', '.join(text for text, _ in args)})", _ATOM


# Running a program ---------------------------------------------------------------------------

# Compiled kernels, one per distinct program, and the programs CuPy could not compile.
_kernels: dict[Program, Callable] = {}
_failed: dict[Program, str] = {}
_verified: set[tuple] = set()  # (program, input dtypes) whose result was checked once


def _compute(op: Op, args: list, attrs: dict) -> Any:
    return op.compute(*args, **attrs)


def _run_checked(op: Op, args: list, attrs: dict) -> Any:
    return op.run(args, attrs)  # with each op's own checks and error messages


def _gpu_kernel(program: Program, xp: Any) -> Callable | None:
    """The program compiled into one kernel by ``cupy.fuse`` (cached); None if it failed."""
    if program in _failed:
        return None
    if program not in _kernels:

        def kernel(*inputs):
            return program.run(inputs, _compute)

        _kernels[program] = xp.fuse(kernel_name=program.kernel_name)(kernel)
    return _kernels[program]


def kernel_counts() -> dict[str, int]:
    """How many distinct fused kernels were built, and how many failed to compile."""
    return {"kernels": len(_kernels) - len(_failed), "failed": len(_failed)}


class Fused(Op):
    """Y = a group of elementwise ops, as one GPU kernel (the ops' own rules inside).

    attrs: ``program``, the group (see ``Program``). Its inputs are the values the
    group reads from outside; Python numbers are written into the program.
    """

    name = "fused"
    takes_numbers = True

    def compute(self, *inputs, program: Program):
        if any(backend.device_of(x) == "gpu" for x in inputs):
            kernel = _gpu_kernel(program, backend.namespace(*inputs))
            if kernel is not None:
                try:
                    return self._checked(kernel(*inputs), inputs, program)
                except Exception as exc:  # noqa: BLE001 (any failure: run unfused instead)
                    _give_up(program, exc)
        return program.run(inputs, _run_checked)

    def _checked(self, result: Any, inputs: tuple, program: Program) -> Any:
        """The kernel's result, once its shape and dtype are seen to be the ops' own (the
        first time for each program and input dtypes): float32 must stay float32."""
        key = (program, tuple(backend.dtype_of(x) for x in inputs))
        if key not in _verified:
            expected = self.infer(*[spec_of(x) for x in inputs], program=program)
            got = Spec(tuple(result.shape), result.dtype)
            if got != Spec(tuple(expected.shape), expected.dtype):
                raise TypeError(f"the kernel gave {got}, the ops give {expected}")
            _verified.add(key)
        return result

    def gradient(self, node: Node, output_grad: Node) -> list[Node | None]:
        steps = unfold(node)
        rule = shape_aware_rule(imperative=False)
        return list(reverse_pass(steps, list(node.inputs), output_grad, rule))

    def jvp(self, node: Node, *input_tangents: Node) -> Node | None:
        steps = unfold(node)
        tangent = dict(zip(node.inputs, input_tangents, strict=True))
        return forward_pass(steps, tangent)

    def infer(self, *inputs: Spec, **attrs: Any) -> Spec:
        def infer_one(op: Op, args: list, attrs: dict) -> Spec:
            specs = [Spec((), None) if backend.is_weak_scalar(a) else a for a in args]
            return op.infer(*specs, **attrs)

        result = attrs["program"].run(inputs, infer_one)
        return Spec(result.shape, result.dtype)


def _give_up(program: Program, exc: Exception) -> None:
    _failed[program] = f"{type(exc).__name__}: {exc}"
    warnings.warn(
        f"autodiff.fusion: CuPy could not fuse '{program}' ({_failed[program]}). "
        f"Running its {len(program.instructions)} ops one at a time instead.",
        RuntimeWarning,
        stacklevel=4,
    )


def unfold(node: Node) -> list[Node]:
    """A fused node's group as ordinary nodes again, on its inputs, in order."""
    program: Program = node.attrs["program"]
    with deferred():
        slots = program.slots(node.inputs, lambda op, args, attrs: type(op).apply(*args, **attrs))
    return slots[program.n_inputs :]


def fused(function: Callable[..., Node]) -> Callable[..., Node]:
    """``function``, written with elementwise ops, as one ``Fused`` op: one kernel on the
    GPU, differentiable like the ops it is made of.

    >>> import autodiff as ad
    >>> tanh_grad = fused(lambda g, y: g * (1 - y * y))
    >>> z = tanh_grad(ad.tensor(2.0), ad.tensor(0.5))
    >>> z.op.name, float(z.value)
    ('fused', 1.5)
    """
    programs: dict[int, tuple[Program, list[int]]] = {}

    def apply(*args: Any) -> Node:
        if len(args) not in programs:
            params = [Variable(f"x{i}") for i in range(len(args))]
            (node,), _ = fuse_elementwise([function(*params)])
            if not isinstance(node.op, Fused) or not set(node.inputs) <= set(params):
                raise ValueError(
                    f"fused: {getattr(function, '__name__', function)} must be made of two "
                    f"or more elementwise ops (add, multiply, exp, tanh, ...) of its "
                    f"arguments only; reductions, matmul and reshapes cannot be fused."
                )
            programs[len(args)] = (node.attrs["program"], [params.index(x) for x in node.inputs])
        program, positions = programs[len(args)]
        return Fused.apply(*[as_node(args[i]) for i in positions], program=program)

    return apply


# The pass --------------------------------------------------------------------------------------


@dataclass
class FusionReport(PassReport):
    """What ``fuse_elementwise`` did: nodes before and after, and the groups it fused.

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> print(fuse_elementwise([ad.exp(-x * x)])[1])
    fuse_elementwise: 4 -> 2 nodes; 1 group of 3 ops: exp(−x0 × x0)
    """

    groups: list[str] = field(default_factory=list)
    fused_ops: int = 0

    def __str__(self) -> str:
        groups = len(self.groups)
        text = f"{super().__str__()}; {groups} group{'s' if groups != 1 else ''}"
        if groups:
            text += f" of {self.fused_ops} ops: " + "; ".join(self.groups[:5])
        return text + ("; ..." if groups > 5 else "")


def fusible(node: Node) -> bool:
    """Elementwise ops that compute their output from their inputs' values (not
    ones_like and zeros_like, which only read a shape), on floating-point values: not
    the comparisons (booleans out) nor ``where`` (a boolean condition in), so that a
    fused node's inputs and result are floats, as a differentiable op's are."""
    op = node.op
    if not isinstance(op, Elementwise):
        return False
    return op.differentiable and not op.integer_inputs


def fuse_elementwise(outputs: Node | Sequence[Node]) -> tuple[list[Node], FusionReport]:
    """Replace each group of elementwise nodes whose values are read only inside the
    group by one ``Fused`` node (see the module docstring).

    A node joins the group of its consumers when it is fusible, is not an output, and
    every node that reads it is in that one group. Groups hold at most ``MAX_GROUP`` ops.
    """
    outputs = check_outputs("fuse_elementwise", outputs)
    topo_order = find_topo_sort(outputs)
    groups = _groups(topo_order, set(outputs))
    new: dict[Node, Node] = {}
    report = FusionReport("fuse_elementwise", len(topo_order), 0)
    with deferred():
        for node in topo_order:
            root = groups.root.get(node)
            members = [] if root is None else groups.members[root]
            if len(members) > 1:
                if node is members[-1]:  # the group's last node: the fused node takes its place
                    fused_node = new[node] = _fused_node(members, new)
                    report.groups.append(str(fused_node.attrs["program"]))
                    report.fused_ops += len(members)
                continue  # a member inside a group: no node of its own
            inputs = tuple(new[x] for x in node.inputs)
            new[node] = node if inputs == node.inputs else copy_node(node, inputs)
    new_outputs = [new[node] for node in outputs]
    report.nodes_after = count_nodes(new_outputs)
    return new_outputs, report


@dataclass
class _Groups:
    root: dict[Node, Node] = field(default_factory=dict)  # node -> the last node of its group
    members: dict[Node, list[Node]] = field(default_factory=dict)  # root -> members, in order


def _groups(topo_order: list[Node], outputs: set[Node]) -> _Groups:
    readers: dict[Node, set[Node]] = {}
    for node in topo_order:
        for x in node.inputs:
            readers.setdefault(x, set()).add(node)
    groups = _Groups()
    for node in reversed(topo_order):  # readers first
        if not fusible(node):
            continue
        roots = {groups.root.get(reader) for reader in readers.get(node, ())}
        shared = roots.pop() if len(roots) == 1 else None  # None: read outside any group
        if node not in outputs and shared is not None and len(groups.members[shared]) < MAX_GROUP:
            groups.members[shared].append(node)
            groups.root[node] = shared
        else:
            groups.members[node] = [node]
            groups.root[node] = node
    for members in groups.members.values():
        members.reverse()  # into topological order
    return groups


def _is_literal(node: Node) -> bool:
    return isinstance(node.op, Constant) and backend.is_weak_scalar(node.value)


def _fused_node(members: list[Node], new: dict[Node, Node]) -> Node:
    inside = set(members)
    outside = {x for member in members for x in member.inputs}
    # x0, x1, ... in the order the program built them: a - b reads as x0 − x1
    inputs = sorted((x for x in outside - inside if not _is_literal(x)), key=lambda x: x.serial)
    slot = {x: i for i, x in enumerate(inputs)}
    instructions = []
    for member in members:
        args = tuple(Literal.of(x.value) if _is_literal(x) else slot[x] for x in member.inputs)
        slot[member] = len(slot)
        instructions.append(Instruction(member.op, args, tuple(member.attrs.items())))
    program = Program(len(inputs), tuple(instructions))
    return Node(Fused._instance, tuple(new[x] for x in inputs), {"program": program})
