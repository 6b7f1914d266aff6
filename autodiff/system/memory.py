"""Memory planning: how a framework fits a big graph into a small memory.

Running a graph holds each value until nothing needs it any more. Three ideas make that
memory smaller, each a few lines here:

* **liveness**: a value is *live* from the step that computes it to the last step that
  reads it. After that step, its memory can hold another value.
* **buffer sharing**: a new value reuses the buffer of a dead value of the same size
  and dtype. An elementwise op may write its output over an input that dies at that
  very step (*in place*).
* **checkpointing** (checkpoint.py): keep fewer forward values for the backward pass
  and recompute the others, ``gradients(y, wrt, checkpoint="sqrt")``.

``plan(outputs, feed_dict)`` works this out before any number is computed, with each
op's shape rule (``Op.infer``, *shape inference*). ``Executor(outputs, plan=...)`` then
runs the graph, writing into the planned buffers. ``levels(outputs)`` groups the nodes
into steps that could run in parallel.

>>> import numpy as np, autodiff as ad
>>> x = ad.Variable("x")
>>> y = ad.sin(ad.exp(x)) * 2
>>> p = plan([y], {x: np.zeros(1000)})
>>> p.naive_bytes, p.peak_bytes      # three values of 8000 bytes, or one buffer
(24000, 8000)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType
from typing import Any

from ..core import backend
from ..core.errors import ShapeError
from ..core.graph import Node, Op, Spec, find_topo_sort, spec_of
from ..core.schedule import resolve_feeds
from ..ops.elementwise import Elementwise
from ..ops.linalg import MatMul
from ..ops.losses import logits_gradient

Interval = tuple[int, int]  # (first step, last step), both included


def nbytes(spec: Spec) -> int:
    """The bytes a value of this Spec takes (0 for a Python number).

    >>> nbytes(Spec((2, 3), backend.float_dtype("float32")))
    24
    """
    if spec.dtype is None:
        return 0
    return math.prod(spec.shape) * backend.float_dtype(spec.dtype).itemsize


# Execution order and shape inference ----------------------------------------------------


def program_order(topo_order: Sequence[Node]) -> list[Node]:
    """The nodes in the order the program created them, which is a topological order.

    It is also a good order for memory: the reverse pass builds each layer's gradients
    right after that layer's adjoint, so they are computed, and freed, together.
    """
    order = sorted(topo_order, key=lambda node: node.serial)
    position = {node: i for i, node in enumerate(order)}
    for i, node in enumerate(order):
        if any(position.get(x, -1) > i for x in node.inputs):
            return list(topo_order)  # someone edited a node's inputs afterwards
    return order


def infer_specs(leaves: Sequence[Node], steps: Sequence[Node], feeds: dict) -> dict:
    """The Spec of every node, from the leaves' values through each op's shape rule."""
    specs: dict[Node, Spec] = {}
    numbers: dict[Node, Any] = {}  # Python numbers: ops on them are simply computed
    for leaf in leaves:
        value = feeds[leaf] if leaf in feeds else leaf.value
        if value is None:
            raise _missing_feed(leaf, "plan")
        specs[leaf] = spec_of(value)
        if specs[leaf].dtype is None:
            numbers[leaf] = value
    for node in steps:
        input_specs = [specs[x] for x in node.inputs]
        if all(x in numbers for x in node.inputs):
            value = node.op.run([numbers[x] for x in node.inputs], node.attrs)
            specs[node] = spec_of(value)
            if specs[node].dtype is None:
                numbers[node] = value
        else:
            specs[node] = _infer(node, input_specs)
    return specs


def _infer(node: Node, input_specs: list[Spec]) -> Spec:
    try:
        return node.op.infer(*input_specs, **node.attrs)
    except (ShapeError, NotImplementedError):
        raise
    except Exception as exc:  # NumPy's broadcasting error, say: name the op and shapes
        raise node.op.explain(exc, input_specs, node.attrs) from exc


def _missing_feed(leaf: Node, where: str) -> ValueError:
    return ValueError(
        f"{where}: placeholder '{leaf.name}' has no value. Put it in the feed, e.g. "
        f"ad.memory.plan(outputs, {{{leaf.name}: array}}); the plan needs its shape and dtype."
    )


# Liveness and buffers -------------------------------------------------------------------


def liveness(steps: Sequence[Node], outputs: Sequence[Node]) -> dict[Node, Interval]:
    """For each computed node: the step that computes it and the last step that reads it.

    Outputs are read after the last step (step ``len(steps)``).

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> a = ad.exp(x); b = ad.sin(a); c = a * b
    >>> [liveness([a, b, c], [c])[n] for n in (a, b, c)]
    [(0, 2), (1, 2), (2, 3)]
    """
    live = {node: (t, t) for t, node in enumerate(steps)}
    for t, node in enumerate(steps):
        for x in node.inputs:
            if x in live:
                live[x] = (live[x][0], t)
    for node in outputs:
        if node in live:
            live[node] = (live[node][0], len(steps))
    return live


def _memory_owners(steps, specs, live) -> tuple[dict[Node, Node], dict[Node, Interval]]:
    """Which node's memory each view uses, and how long each owner's memory is held:
    until the last read of the owner or of any view of it."""
    views: dict[Node, Node] = {}
    held: dict[Node, Interval] = {}
    for node in steps:
        if specs[node].view:
            base = node.inputs[0]
            views[node] = views.get(base, base)
        elif nbytes(specs[node]) > 0:
            held[node] = live[node]
    for view, owner in views.items():
        if owner in held:
            start, end = held[owner]
            held[owner] = (start, max(end, live[view][1]))
    return views, held


def _ufunc_into(function: str, out, *inputs):
    """The array library's elementwise ``function`` (np.multiply...), written into ``out``."""
    return getattr(backend.namespace(*inputs), function)(*inputs, out=out)


def _matmul_into(out, a, b, trans_A, trans_B):
    a, b = MatMul._instance.operands(a, b, trans_A, trans_B)
    return backend.namespace(a, b).matmul(a, b, out=out)


# How an op writes its result into a given array (``out=``), by op name: a plan hands
# these a buffer. An op not named here allocates its result, a buffer of its own.
WRITERS: dict[str, Callable] = {
    **{
        name: partial(_ufunc_into, name)
        for name in """add subtract multiply divide power negative exp log sin cos tanh sqrt
        log1p expm1 maximum minimum equal not_equal less less_equal greater
        greater_equal""".split()
    },
    "abs": partial(_ufunc_into, "absolute"),
    "relu": lambda out, x: backend.namespace(x).maximum(x, 0, out=out),
    "clip": lambda out, x, lo, hi: backend.namespace(x).clip(x, lo, hi, out=out),
    "sum": lambda out, x, axis, keepdims: x.sum(axis=axis, keepdims=keepdims, out=out),
    "matmul": _matmul_into,
}


def writer(op: Op) -> Callable | None:
    """How ``op`` writes its result into a given array (``WRITERS``), or None."""
    return WRITERS.get(op.name)


@dataclass(frozen=True)
class Overwrite:
    """An op that may write its result over its input ``index`` at the step where that
    value dies: when an op named ``made_by`` made the value (a new array each time) and
    every op that reads it is one of ``readers`` (none of which makes a view of it).
    ``into(out, *inputs)`` computes the result into ``out``."""

    index: int
    made_by: str
    readers: frozenset[str]
    into: Callable


# Coarse ops whose result may take the place of an input nothing needs after them, by
# op name. Compiled code (compiled.py, gradient_cache.py) writes over such an input where
# it knows it dies (``overwritten``), as PyTorch's backward overwrites what only it holds.
OVERWRITES = MappingProxyType(
    {
        "softmax_cross_entropy_gradient": Overwrite(  # over the softmax the loss read too
            3,
            "softmax",
            frozenset({"softmax_cross_entropy", "softmax_cross_entropy_gradient"}),
            lambda out, z, labels, d_loss, probs: logits_gradient(z, labels, d_loss, probs, out),
        )
    }
)


def overwritten(
    node: Node, dying: Callable[[Node], bool], readers: Callable[[Node], Iterable[Node]]
) -> Node | None:
    """The input ``node`` may write its result over (``OVERWRITES``), or None: one that
    ``dying(input)`` says no later step reads and nothing else holds, and that
    ``readers(input)`` (every node of the program that reads it) allows."""
    rule = OVERWRITES.get(node.op.name)
    if rule is None or len(node.inputs) <= rule.index:
        return None
    value = node.inputs[rule.index]
    if value.op.name != rule.made_by or not dying(value):
        return None
    if any(backend.is_weak_scalar(x.value) for x in node.inputs):
        return None  # (a number input: compiled code converts it, see compiled.kernel)
    return value if all(r.op.name in rule.readers for r in readers(value)) else None


def overwriting_kernel(node: Node) -> Callable:
    """What compiled code calls for ``node`` where ``overwritten`` allowed it:
    ``into(out, *inputs)`` with the node's settings bound."""
    return partial(OVERWRITES[node.op.name].into, **node.attrs)


def overwrites_inputs(op: Op) -> bool:
    """Whether ``op``'s output may overwrite an input of its shape: an elementwise op's
    output element i needs element i of each input only (once read, it may go)."""
    return isinstance(op, Elementwise) and op.name in WRITERS


@dataclass
class _Assignment:
    buffer: dict[Node, int | None] = field(default_factory=dict)
    buffer_bytes: list[int] = field(default_factory=list)
    shared: set[int] = field(default_factory=set)  # buffers the plan allocates
    in_place: dict[Node, Node] = field(default_factory=dict)


def assign_buffers(steps, specs, views, held) -> _Assignment:
    """Greedy buffer sharing, step by step: write in place over a dying input if the op
    allows it, else reuse a free buffer of the same bytes and dtype, else take a new one.

    Only ops with a writer (``WRITERS``) write into planned buffers; any other op's result is
    its own (private) buffer, freed after its last use and never shared.
    """
    plan = _Assignment()
    free: dict[tuple, list[int]] = {}  # (bytes, dtype) -> buffers nobody uses now
    ending: dict[int, list[Node]] = {}
    for owner, (_, end) in held.items():
        ending.setdefault(end, []).append(owner)
    for t, node in enumerate(steps):
        if node in views:
            plan.buffer[node] = plan.buffer.get(views[node])
            continue
        if node not in held:  # a Python number
            plan.buffer[node] = None
            continue
        key = (nbytes(specs[node]), str(specs[node].dtype))
        overwritten = _in_place_input(node, t, specs, views, held, plan)
        if overwritten is not None:
            plan.in_place[node] = overwritten
            plan.buffer[node] = plan.buffer[overwritten]
        elif writer(node.op) is not None and free.get(key):
            plan.buffer[node] = free[key].pop()  # the one freed last
        else:
            plan.buffer[node] = len(plan.buffer_bytes)
            plan.buffer_bytes.append(key[0])
            if writer(node.op) is not None:
                plan.shared.add(len(plan.buffer_bytes) - 1)
        for owner in ending.get(t, []):
            b = plan.buffer[owner]
            if b in plan.shared and plan.in_place.get(node) is not owner:
                free.setdefault((nbytes(specs[owner]), str(specs[owner].dtype)), []).append(b)
    return plan


def _in_place_input(node, t, specs, views, held, plan) -> Node | None:
    """An input that ``node`` may overwrite: it dies at this step, in a planned buffer of
    the output's shape and dtype, and no other input is a view of it."""
    if not overwrites_inputs(node.op):
        return None
    for x in node.inputs:
        if (
            x in held
            and held[x][1] == t
            and plan.buffer[x] in plan.shared
            and specs[x][:2] == specs[node][:2]
            and not any(views.get(y) is x for y in node.inputs)
        ):
            return x
    return None


# The plan -------------------------------------------------------------------------------


@dataclass(repr=False)
class MemoryPlan:
    """Where every value of a graph lives while it runs. Made by ``plan``.

    Attributes:

    * ``steps``: the nodes computed, in execution order (step t computes ``steps[t]``);
      ``leaves`` are the inputs (fed, or holding values), which the plan does not count;
    * ``specs``: shape and dtype of every node (shape inference);
    * ``live``: node -> (step that computes it, last step that reads it);
    * ``views``: node -> the node whose memory it views (reshape, transpose, ...);
    * ``held``: owner -> the steps during which its memory is held (its views included);
    * ``buffer``: node -> buffer id (views: their owner's; None for Python numbers);
      ``buffer_bytes[b]`` is the size of buffer b;
    * ``in_place``: node -> the input whose buffer it overwrites;
    * ``peak_bytes``: the most bytes held at once; ``naive_bytes``: every value kept.
    """

    outputs: list[Node]
    leaves: list[Node]
    steps: list[Node]
    specs: dict[Node, Spec]
    live: dict[Node, Interval]
    views: dict[Node, Node]
    held: dict[Node, Interval]
    buffer: dict[Node, int | None]
    buffer_bytes: list[int]
    in_place: dict[Node, Node]
    shared: set[int]
    # The buffers to drop once a step has computed its node (made once, here).
    _releases: dict[Node, list[int]] = field(init=False)

    def __post_init__(self) -> None:
        self._releases = {}
        for b, (_, end) in self.buffer_span().items():
            if b in self.shared and end < len(self.steps):
                self._releases.setdefault(self.steps[end], []).append(b)

    @property
    def peak_bytes(self) -> int:
        return max(self.timeline()["planned"], default=0)

    @property
    def naive_bytes(self) -> int:
        return sum(nbytes(self.specs[node]) for node in self.held)

    def buffer_span(self) -> dict[int, Interval]:
        """Buffer id -> the steps from its first value's birth to its last value's death."""
        span: dict[int, Interval] = {}
        for owner, (start, end) in self.held.items():
            b = self.buffer[owner]
            assert b is not None
            first, last = span.get(b, (start, end))
            span[b] = (min(first, start), max(last, end))
        return span

    def timeline(self) -> dict[str, list[int]]:
        """Bytes held while each step runs (its inputs and its output included).

        ``"naive"``: every value kept; ``"freed"``: each value freed after its last
        use, no sharing; ``"planned"``: the buffers of this plan. Plot them against
        the step number to see what liveness and sharing buy.
        """
        n = len(self.steps)
        naive, freed, planned = [0] * (n + 2), [0] * (n + 2), [0] * (n + 2)
        for owner, (start, end) in self.held.items():
            size = nbytes(self.specs[owner])
            _add(naive, start, n, size)
            _add(freed, start, end, size)
        for b, (start, end) in self.buffer_span().items():
            _add(planned, start, end, self.buffer_bytes[b])
        series = {"naive": naive, "freed": freed, "planned": planned}
        return {name: _running_sum(changes)[:n] for name, changes in series.items()}

    def summary(self, rows: int = 30) -> str:
        """The totals, then one line per step (the first ``rows`` of them)."""
        lines = [repr(self), " step  op              shape              bytes  buffer  note"]
        for t, node in enumerate(self.steps[:rows]):
            spec = self.specs[node]
            b = self.buffer[node]
            if node in self.in_place:
                note = f"in place over step {self.live[self.in_place[node]][0]}"
            elif node in self.views:
                note = "view: no new memory"
            else:
                note = "" if b is None or b in self.shared else "op allocates"
            shape = str(tuple(spec.shape))
            bytes_text = "" if node in self.views else f"{nbytes(spec):,}"
            buffer_text = "" if b is None else str(b)
            line = f"{t:5}  {node.op.name:15} {shape:15} {bytes_text:>9}  {buffer_text:>6}  {note}"
            lines.append(line.rstrip())
        if len(self.steps) > rows:
            lines.append(f"  ... {len(self.steps) - rows} more steps")
        return "\n".join(lines)

    def __repr__(self) -> str:
        freed = max(self.timeline()["freed"], default=0)
        ratio = self.naive_bytes / self.peak_bytes if self.peak_bytes else 1.0
        return (
            f"MemoryPlan: {_count(self.steps, 'step')}, {_count(self.buffer_bytes, 'buffer')}, "
            f"{_count(self.in_place, 'value')} written in place\n"
            f"  every value kept (naive)   {self.naive_bytes:>14,} bytes\n"
            f"  freed after last use       {freed:>14,} bytes\n"
            f"  planned (shared buffers)   {self.peak_bytes:>14,} bytes "
            f"({ratio:.1f}x less than naive)"
        )

    # Running with the plan (Executor(outputs, plan=...) calls these) -----------------

    def check_outputs(self, nodes: Sequence[Node]) -> None:
        same = len(nodes) == len(self.outputs) and all(
            a is b for a, b in zip(nodes, self.outputs, strict=True)
        )
        if not same:
            raise ValueError(
                "Executor: this memory plan was made for other outputs. Make one for these: "
                "ad.memory.plan(outputs, feed_dict), with the same outputs in the same order."
            )

    @property
    def order(self) -> list[Node]:
        """The schedule the Executor runs: the leaves, then the steps in planned order."""
        return [*self.leaves, *self.steps]

    def compute(self, node: Node, input_vals: list, buffers: dict[int, dict]) -> Any:
        """Step ``node``, as the Executor's loop calls it: its value, written into its
        planned buffer (allocated at first use, in ``buffers``); then the buffers no
        later step reads are dropped.

        A buffer is shaped for a step by one view per shape, kept with it: a step that
        overwrites its input is then given that very array as ``out``, which CuPy
        writes in place (another view of the same memory it would copy first)."""
        b, spec = self.buffer[node], self.specs[node]
        # A shared buffer is planned only for a step whose op writes into one.
        write = None if node in self.views or b not in self.shared else writer(node.op)
        if write is None or b is None:
            value = node.op.run(input_vals, node.attrs)
            if spec_of(value)[:2] != spec[:2]:
                raise RuntimeError(
                    f"plan: {node.op.name} gave {spec_of(value)[:2]} where its shape rule "
                    f"said {spec[:2]}: {type(node.op).__name__}.infer is wrong."
                )
        else:
            if b not in buffers:  # the buffer, flat, then its views by shape
                count = nbytes(spec) // backend.float_dtype(spec.dtype).itemsize
                buffers[b] = {(count,): backend.empty((count,), spec.dtype, like=input_vals)}
            shaped = buffers[b]
            if spec.shape not in shaped:
                shaped[spec.shape] = next(iter(shaped.values())).reshape(spec.shape)
            value = node.op.run(input_vals, node.attrs, partial(write, shaped[spec.shape]))
        for released in self._releases.get(node, ()):
            del buffers[released]
        return value

    def check_feeds(self, feeds: dict) -> None:
        """The leaves have values of the planned shapes and dtypes, and no node the plan
        computes is fed."""
        for leaf in self.leaves:
            value = feeds[leaf] if leaf in feeds else leaf.value
            if value is None:
                raise _missing_feed(leaf, "Executor")
            planned, given = self.specs[leaf], spec_of(value)
            if planned[:2] != given[:2]:
                raise ShapeError(
                    f"Executor: the memory plan was made for '{leaf.name}' of shape "
                    f"{planned.shape} ({planned.dtype}), but it is fed shape {given.shape} "
                    f"({given.dtype}). Buffers are planned for fixed shapes: make a new plan, "
                    f"ad.memory.plan(outputs, feed_dict)."
                )
        for node in feeds:
            if node in self.live:
                raise ValueError(
                    f"Executor: '{node.name}' is fed, but the memory plan computes it. Make the "
                    f"plan with the same feed_dict: ad.memory.plan(outputs, feed_dict)."
                )


def _count(items, word: str) -> str:
    return f"{len(items)} {word}" + ("" if len(items) == 1 else "s")


def _add(series: list[int], start: int, end: int, amount: int) -> None:
    """Add ``amount`` to steps start..end of a series kept as changes from step to step."""
    series[start] += amount
    series[end + 1] -= amount


def _running_sum(differences: list[int]) -> list[int]:
    total, out = 0, []
    for d in differences:
        total += d
        out.append(total)
    return out


def plan(outputs: Node | Sequence[Node], feed_dict: dict | None = None) -> MemoryPlan:
    """Plan the memory of running ``outputs`` on feeds of these shapes and dtypes.

    Shape inference gives every value's size; liveness says when each can be freed;
    buffers are shared greedily, in place where an elementwise op allows it. The
    graph runs in program order (the order its nodes were created). Nothing is
    computed, except ops on Python numbers. Run it with ``Executor(outputs, plan=p)``.

    >>> import numpy as np, autodiff as ad
    >>> x = ad.Variable("x")
    >>> p = plan([ad.exp(x) @ x.T], {x: np.ones((100, 10))})
    >>> p.steps[0].op.name, p.naive_bytes, p.peak_bytes    # exp's 8000 + matmul's 80000
    ('exp', 88000, 88000)
    """
    outputs = [outputs] if isinstance(outputs, Node) else list(outputs)
    for node in outputs:
        if not isinstance(node, Node):
            raise TypeError(f"plan takes Nodes, got {type(node).__name__}: {node!r}")
    graph_leaves = [node for node in find_topo_sort(outputs) if node.op.is_leaf]
    feeds = resolve_feeds(graph_leaves, feed_dict or {})
    order = program_order(find_topo_sort(outputs, descend=lambda n: n not in feeds))
    leaves = [node for node in order if node.op.is_leaf or node in feeds]
    is_leaf = set(leaves)
    steps = [node for node in order if node not in is_leaf]
    specs = infer_specs(leaves, steps, feeds)
    live = liveness(steps, outputs)
    views, held = _memory_owners(steps, specs, live)
    chosen = assign_buffers(steps, specs, views, held)
    return MemoryPlan(outputs, leaves, steps, specs, live, views, held, **vars(chosen))


def levels(outputs: Node | Iterable[Node]) -> list[list[Node]]:
    """The nodes grouped into levels: level 0 holds the leaves, and each node sits one
    level above its highest input. The nodes of one level need only nodes of lower
    levels, so they could all run at the same time (on different cores or streams).

    >>> import autodiff as ad
    >>> x, y = ad.Variable("x"), ad.Variable("y")
    >>> [[n.name for n in level] for level in levels(ad.sin(x) * ad.cos(y))]
    [['x', 'y'], ['sin', 'cos'], ['multiply']]
    """
    outputs = [outputs] if isinstance(outputs, Node) else list(outputs)
    level: dict[Node, int] = {}
    groups: list[list[Node]] = []
    for node in find_topo_sort(outputs):
        k = 1 + max((level[x] for x in node.inputs), default=-1)
        level[node] = k
        if k == len(groups):
            groups.append([])
        groups[k].append(node)
    return groups
