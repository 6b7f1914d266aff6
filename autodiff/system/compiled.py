"""Straight-line code: a schedule compiled into one Python function.

The Executor's loop (slots.run_schedule) looks up each node's inputs in a list,
checks their dtypes, and turns NumPy's errors into readable ones. Once a run with some
leaf dtypes has passed those checks, later runs with the same dtypes need none of it:
the schedule becomes the source of one function, a line per op (``v7 = f7(v3, v5)``)
and a ``del`` after each value's last use, compiled once (``StraightLine.source`` shows
it). This is what "compiling a graph" means in small: Python's own loop and lookups
disappear, and what is left per op is the call of its ``compute``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..core.backend import is_weak_scalar, numbers
from ..core.graph import Node
from ..ops.losses import logits_gradient
from .memory import overwriting_kernel, overwritten
from .slots import Step

# What an op raises on inputs it cannot take (NumPy's and ours). The compiled function
# lets these through to a checked run, which explains them; any other error
# (MemoryError, a bug) is raised as it is.
INPUT_ERRORS = (ValueError, TypeError, ArithmeticError, IndexError)


def straight_line(steps: Sequence[Step], result_slots: Sequence[int]) -> tuple[str, dict]:
    """The schedule as the source of one Python function, and the names it uses.

    ``run(values)`` takes the leaves' values (in their slots) and returns the results:
    one line per op, ``v7 = f7(v3, v5)`` with ``f7`` the op's ``compute`` (its settings
    bound), and a ``del`` after each value's last use. It is what the schedule loop
    does, minus the loop: no lookups in lists, no checks, the same calls in the same
    order.
    """
    lines = ["def run(values):"]
    names: dict[str, Any] = {}
    slot = {node: i for i, (node, _, _) in enumerate(steps)}
    readers: dict[int, list[Node]] = {}
    for node, input_slots, _ in steps:
        for j in input_slots:
            readers.setdefault(j, []).append(node)
    reading = lambda x: readers[slot[x]]  # noqa: E731 (every node that reads x)
    for i, (node, input_slots, frees) in enumerate(steps):
        if node.op.is_leaf:
            lines.append(f"    v{i} = values[{i}]")
            continue
        args = ", ".join(f"v{j}" for j in input_slots)
        dying = lambda x, frees=frees: x in slot and slot[x] in frees  # noqa: E731
        over = overwritten(node, dying, reading)
        earlier = lambda n, i=i: slot[n] < i  # noqa: E731
        checked = checked_earlier(node, reading, earlier)
        if over is None:
            names[f"f{i}"] = trusting_kernel(node, False) if checked else kernel(node)
            lines.append(f"    v{i} = f{i}({args})  # {node.op.name}")
        else:  # its result takes the place of an input that dies here (memory.OVERWRITES)
            names[f"f{i}"] = trusting_kernel(node, True) if checked else overwriting_kernel(node)
            lines.append(f"    v{i} = f{i}(v{slot[over]}, {args})  # {node.op.name}, over it")
        if frees:
            lines.append(f"    del {', '.join(f'v{j}' for j in frees)}")
    lines.append(f"    return [{', '.join(f'v{i}' for i in result_slots)}]")
    return "\n".join(lines) + "\n", names


def kernel(node) -> Any:
    """What compiled code calls for ``node``: its op's ``compute``, its settings bound.
    An op that does not take Python numbers is handed its number inputs as ``Op.run``
    hands them (0-d arrays). Graphs hold numbers known as they are built (constants;
    ops on constants, computed at once), so which inputs are numbers is known here."""
    compute = node.op.compute
    bound = functools.partial(compute, **node.attrs) if node.attrs else compute
    if node.op.takes_numbers or not any(is_weak_scalar(x.value) for x in node.inputs):
        return bound
    return lambda *values: bound(*numbers(values, as_arrays=True))


@dataclass(frozen=True)
class CheckedBy:
    """An op whose checks of its first ``inputs`` inputs are those that the op named
    ``op`` makes of the same nodes. ``trusting(out, *inputs)`` computes it without them
    (``out``: None, or an input it may write over, as memory.OVERWRITES allows)."""

    op: str
    inputs: int
    trusting: Callable


# Where compiled code has run that op earlier in the same run (``checked_earlier``), its
# checks stand: the loss has checked the labels, so its gradient need not check them again.
CHECKED_BY = MappingProxyType(
    {
        "softmax_cross_entropy_gradient": CheckedBy(
            "softmax_cross_entropy",
            2,
            lambda out, z, labels, d_loss, probs=None: logits_gradient(
                z, labels, d_loss, probs, out, checked=True
            ),
        )
    }
)


def checked_earlier(
    node: Node, readers: Callable[[Node], Iterable[Node]], earlier: Callable[[Node], bool]
) -> bool:
    """Whether ``node``'s checks were made (``CHECKED_BY``): by a node that reads the same
    inputs (``readers(input)``: every node of the program that reads it) and that runs
    ``earlier`` in the run. Not with a number input (compiled code converts those)."""
    rule = CHECKED_BY.get(node.op.name)
    if rule is None or any(is_weak_scalar(x.value) for x in node.inputs):
        return False
    shared = node.inputs[: rule.inputs]
    return any(
        r.op.name == rule.op and r.inputs[: rule.inputs] == shared and earlier(r)
        for r in readers(shared[-1])
    )


def trusting_kernel(node: Node, overwriting: bool) -> Callable:
    """What compiled code calls for ``node`` where ``checked_earlier``: its ``trusting``
    compute, writing over an input if ``overwriting`` (the input comes first)."""
    trusting = CHECKED_BY[node.op.name].trusting
    return trusting if overwriting else functools.partial(trusting, None)


class StraightLine:
    """A schedule's compiled function, used for the leaf dtypes a checked run has seen.

    Every check an op makes depends on dtypes, and the leaves' dtypes decide all the
    others, so a run with dtypes seen before needs no checks.
    """

    def __init__(self, steps: Sequence[Step], result_slots: Sequence[int]):
        self.steps, self.result_slots = steps, list(result_slots)
        self.leaf_slots = [i for i, (node, _, _) in enumerate(steps) if node.op.is_leaf]
        self.checked: set[tuple] = set()
        self.source: str | None = None  # the function's text, once compiled
        self._function = None

    def leaf_values(self, feeds: dict) -> list | None:
        """A run's slots, each leaf's holding its value (fed, or the leaf's own); None if
        a leaf has none (the checked path then says which)."""
        values: list = [None] * len(self.steps)
        for i in self.leaf_slots:
            leaf = self.steps[i][0]
            value = feeds.get(leaf, leaf.value)
            if value is None:
                return None
            values[i] = value
        return values

    def dtypes(self, values: list) -> tuple:
        """The leaves' dtypes: what a checked run vouches for."""
        leaves = map(values.__getitem__, self.leaf_slots)  # (a Python number: its type)
        return tuple([getattr(v, "dtype", None) or type(v) for v in leaves])

    def vouch(self, dtypes: tuple) -> None:
        """After a checked run: later runs with these leaf dtypes may run compiled, unless
        a leaf in ``arrays_only`` is fed a Python number (such runs are all checked)."""
        fed = [i for i, kind in zip(self.leaf_slots, dtypes, strict=True) if isinstance(kind, type)]
        if not any(i in self.arrays_only for i in fed):  # (a number's "dtype": its type)
            self.checked.add(dtypes)

    @functools.cached_property
    def arrays_only(self) -> set[int]:
        """The leaves that must not be fed a Python number here: kernel() converts the
        numbers the graph held as it was built, not one fed to a leaf whose value may flow
        (through ops that take numbers) into an op that calls array methods."""
        reach: dict[int, set[int]] = {}
        arrays_only: set[int] = set()
        for k, (node, input_slots, _) in enumerate(self.steps):
            came = set().union(*(reach.get(j, ()) for j in input_slots))
            if node.op.is_leaf:
                reach[k] = set() if is_weak_scalar(node.value) else {k}
            elif node.op.takes_numbers:
                reach[k] = came
            else:
                arrays_only |= came
        return arrays_only

    def run(self, values: list) -> list | None:
        """The results, or None when a checked run must be made (dtypes not seen yet,
        or an op refused its inputs: the checked run then says how)."""
        if self.dtypes(values) not in self.checked:
            return None
        try:
            return self.function()(values)  # reads the leaves' slots, writes none
        except INPUT_ERRORS:
            return None

    def function(self):
        if self._function is None:
            self.source, names = straight_line(self.steps, self.result_slots)
            exec(compile(self.source, "<autodiff.Executor>", "exec"), names)
            self._function = names["run"]
        return self._function
