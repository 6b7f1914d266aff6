"""A cache of gradient programs, for graphs rebuilt step after step (define-by-run).

A training loop in the imperative style builds the same forward graph at every step:
the same ops, wired the same way, on values of the same shapes and dtypes. Building its
gradient graph again each time (a Python object per gradient node, each rule called
again) costs more than the arithmetic of small ops. So ``gradients`` keys the forward
graph by its *structure* (each node's op, settings and inputs, and its value's shape,
dtype and device; the values of Python-number constants; which nodes are ``wrt``), as
``jax.jit`` and ``torch.compile`` key their traces, but without being asked:

* a **miss** (a structure not seen lately) builds the gradient graph as always; the
  second time a structure is seen, it also compiles it into one Python function from
  the forward values to the gradients' values (a line per gradient op,
  ``v7 = f7(forward[3], v5)``; ``GradientProgram.source``). Compiling costs about three
  builds, so a graph met once (a student's one-off question) never pays for it;
* a **hit** runs that function on this step's forward values and returns nodes holding
  the results (``CachedGradient``). Their graph is built when it is first looked at
  (``.op``, ``.inputs``: drawing it, differentiating it again, an Executor), so the
  gradient is still a graph of Nodes; a step that only reads ``.value`` never builds it.

``cache_info()`` counts hits and misses; ``disabled()`` turns the cache off in a block.
What decides the gradient program is in the key: a new shape, dtype, device, op, wiring
or constant number is a miss. Graphs whose settings cannot be hashed (an index array)
are not cached.
"""

from __future__ import annotations

import sys
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import backend
from ..core.graph import Node, find_topo_sort, new_serial
from .compiled import checked_earlier, kernel, trusting_kernel
from .memory import overwriting_kernel, overwritten

MAX_PROGRAMS = 64  # structures kept, least recently used first out
_programs: OrderedDict[StructureKey, GradientProgram] = OrderedDict()
_seen_once: OrderedDict[StructureKey, None] = OrderedDict()  # keys built once, not compiled yet
_stats = {"hits": 0, "misses": 0, "uncacheable": 0}
_enabled = [True]


@dataclass(frozen=True)
class CacheInfo:
    hits: int
    misses: int
    uncacheable: int
    programs: int
    max_programs: int


def cache_info() -> CacheInfo:
    """How often ``gradients`` found a compiled program for its graph's structure.

    >>> import autodiff as ad
    >>> clear()
    >>> for step in range(3):  # the same structure, new values: built, compiled, run
    ...     x = ad.tensor(float(step))
    ...     (dx,) = ad.gradients(x * x, [x])
    >>> cache_info().misses, cache_info().hits, float(dx.value)
    (2, 1, 4.0)
    """
    return CacheInfo(**_stats, programs=len(_programs), max_programs=MAX_PROGRAMS)


def clear() -> None:
    """Forget every program and reset the counts."""
    _programs.clear()
    _seen_once.clear()
    _stats.update(hits=0, misses=0, uncacheable=0)


@contextmanager
def disabled() -> Iterator[None]:
    """``with gradient_cache.disabled():`` every ``gradients`` call builds its graph."""
    _enabled.append(False)
    try:
        yield
    finally:
        _enabled.pop()


def enabled() -> bool:
    """Whether ``gradients`` uses the cache here (False inside ``disabled()``)."""
    return _enabled[-1]


class StructureKey:
    """A graph's structure (a tuple of parts), hashed once: a lookup and the move to the
    end of the cache's order each ask for the hash, and hashing walks the whole tuple."""

    __slots__ = ("parts", "_hash")

    def __init__(self, parts: tuple):
        self.parts, self._hash = parts, hash(parts)  # TypeError: an unhashable setting

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StructureKey) and self.parts == other.parts


def structure_key(inputs: Sequence[Node], wrt: Sequence[Node]) -> tuple | None:
    """The key of a valued forward graph (``inputs``, a topological order), or None when
    it holds a symbolic node. (A setting that cannot be hashed, such as an index array,
    makes the key unhashable: such graphs are not cached.)"""
    position = {node: i for i, node in enumerate(inputs)}
    at = position.__getitem__
    parts: list[tuple] = []
    for node in inputs:
        value: Any = node.value
        # Of a value, what the program depends on: an array's shape, dtype and device
        # (its numbers are read at each run); a Python number itself (rules may write
        # it into the program).
        kind = type(value)
        if kind is np.ndarray:
            value_key: tuple = (value.shape, value.dtype)
        elif kind in backend.NUMBER_TYPES:
            value_key = (kind, value)
        elif value is None:
            return None
        else:
            value_key = (kind, getattr(value, "shape", None), getattr(value, "dtype", None))
        attrs = tuple(node.attrs.items()) if node.attrs else ()
        wiring = tuple(map(at, node.inputs)) if node.inputs else ()  # (by position)
        parts.append((node.op, node.name, attrs, wiring, value_key))
    parts.append(tuple([position[x] for x in wrt]))
    return tuple(parts)


class GradientProgram:
    """The gradient graph as one Python function of the forward values (by position).

    ``run(forward)`` keeps the forward values; ``run_releasing(forward, nodes, let_go)``
    also lets go of the forward value at each position of ``let_go``
    (``nodes[i].value = None``) after the line that reads it last, as PyTorch frees what
    its backward pass saved: for ``gradients(..., retain_graph=False)`` (``nn.train``).
    """

    def __init__(self, inputs: Sequence[Node], grads: Sequence[Node], releasable: Sequence[Node]):
        position = {node: i for i, node in enumerate(inputs)}
        steps = find_topo_sort(list(grads), descend=lambda n: n not in position)
        # In creation order, as the reverse pass made them: each forward value is read
        # for the last time as early as it can be (retain_graph=False lets it go then).
        steps = sorted((n for n in steps if n not in position), key=lambda n: n.serial)
        last_use: dict[Node, int] = {}
        for i, node in enumerate(steps):
            for x in node.inputs:
                last_use[x] = i
        self._names: dict[str, Any] = {}
        results = set(grads)
        # Forward values retain_graph=False lets go of, by the step that reads them last
        # (-1: none does, so they go first); not a result (a rule may return one).
        self._release: dict[int, list[int]] = {}
        for node in releasable:
            if node not in results:
                self._release.setdefault(last_use.get(node, -1), []).append(position[node])
        # Each of those by position, with its uses in the forward graph (for unheld()).
        uses = Counter(x for node in inputs for x in node.inputs)
        self._uses = [(i, uses[inputs[i]]) for at in self._release.values() for i in at]
        ref: dict[Node, str] = {node: f"forward[{i}]" for node, i in position.items()}
        self._lines: list[tuple[int, str]] = []  # (step, line)
        # Lines that, when their step lets go of a forward value, write over it instead
        # (memory.OVERWRITES): by their index in _lines, the line that does.
        self._over: dict[int, str] = {}
        released = set(releasable).difference(results)
        readers: dict[Node, list[Node]] = {}
        for node in [*inputs, *steps]:
            for x in node.inputs:
                readers.setdefault(x, []).append(node)
        for i, node in enumerate(steps):
            if node.op.is_leaf:  # a constant the rules made (a number): part of the program
                self._names[f"c{i}"], ref[node] = node.value, f"c{i}"
                continue
            # (A check a forward op made of the same inputs stands: compiled.CHECKED_BY.)
            checked = checked_earlier(node, readers.__getitem__, position.__contains__)
            self._names[f"f{i}"] = trusting_kernel(node, False) if checked else kernel(node)
            args = ", ".join(ref[x] for x in node.inputs)
            dying = lambda x, i=i: x in released and last_use[x] == i  # noqa: E731
            over = overwritten(node, dying, readers.__getitem__)
            if over is not None:
                self._names[f"o{i}"] = (
                    trusting_kernel(node, True) if checked else overwriting_kernel(node)
                )
                self._over[len(self._lines)] = (
                    f"v{i} = o{i}({ref[over]}, {args}) if {position[over]} in let_go "
                    f"else f{i}({args})  # {node.op.name}, over {ref[over]} if let go"
                )
            self._lines.append((i, f"v{i} = f{i}({args})  # {node.op.name}"))
            ref[node] = f"v{i}"
            done = [  # values no later line reads, and not results: freed now
                ref[x]
                for x in dict.fromkeys(node.inputs)
                if last_use[x] == i and x not in results and ref[x][0] == "v"
            ]
            if done:
                self._lines.append((i, f"del {', '.join(done)}"))
        self._lines.append((len(steps), f"return [{', '.join(ref[g] for g in grads)}]"))
        self.names = [g.name for g in grads]
        self.source = self._text(releasing=False)
        self.run: Callable[[list], list] = self._compile(self.source)
        self._releasing: Callable | None = None

    def _text(self, releasing: bool) -> str:
        lines, step = [f"def run(forward{', nodes, let_go' if releasing else ''}):"], -1
        for k, (at, line) in enumerate(self._lines):
            while releasing and step < at:  # the lines of a step are done: let go
                for j in self._release.get(step, ()):
                    lines.append(f"    if {j} in let_go: forward[{j}] = nodes[{j}].value = None")
                step += 1
            lines.append(f"    {self._over.get(k, line) if releasing else line}")
        return "\n".join(lines) + "\n"

    def _compile(self, source: str) -> Callable:
        scope = dict(self._names)
        exec(compile(source, "<autodiff gradient program>", "exec"), scope)
        return scope["run"]

    def unheld(self, nodes: Sequence[Node]) -> list[int]:
        """``intermediates`` for this structure, with its uses counted once for all."""
        return unheld(nodes, self._uses)

    def run_releasing(self, forward: list, nodes: Sequence[Node], let_go: set[int]) -> list:
        if self._releasing is None:
            self._releasing = self._compile(self._text(releasing=True))
        return self._releasing(forward, nodes, let_go)


def intermediates(nodes: Sequence[Node], output: Node, wrt: Sequence[Node]) -> list[int]:
    """The positions in ``nodes`` (a forward graph) of the values ``retain_graph=False``
    lets go of: those computed by an op that only the graph holds. Not the output (the
    loss, read after), the nodes of ``wrt``, or a node kept elsewhere: in a variable, a
    module, another graph (its references outnumber its uses in this graph's inputs)."""
    keep = {output, *wrt}
    uses = Counter(x for node in nodes for x in node.inputs)
    counted = [(i, uses[n]) for i, n in enumerate(nodes) if not n.op.is_leaf and n not in keep]
    del uses, keep  # (their references to the nodes would count as holders)
    return unheld(nodes, counted)


def unheld(nodes: Sequence[Node], counted: Sequence[tuple[int, int]]) -> list[int]:
    """Of the (position, uses in the graph) in ``counted``, the positions of the nodes
    that nothing but the graph holds: no references beyond their uses."""
    return [i for i, extra in _references(nodes, counted) if extra <= _OWN_REFERENCES]


def _references(nodes: Sequence[Any], counted: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(i, sys.getrefcount(nodes[i]) - n) for i, n in counted]


# _references' own references to a node (the list's, getrefcount's argument), measured
# on an object that nothing else holds.
_OWN_REFERENCES = _references([object()], [(0, 0)])[0][1]

# Outputs whose graphs let go of their values: differentiating them again is refused.
_released_outputs: weakref.WeakSet[Node] = weakref.WeakSet()


def check_not_released(output: Node) -> None:
    """Refuse to differentiate a graph again after ``retain_graph=False`` let it go."""
    if output in _released_outputs:
        raise ValueError(
            f"gradients: the graph of '{output.name}' let go of its intermediate values "
            f"(an earlier gradients(..., retain_graph=False)), so it cannot be "
            f"differentiated again. Build it again, or pass retain_graph=True the first time."
        )


def released(nodes: Sequence[Node], positions: Sequence[int], output: Node) -> list[Node]:
    """The nodes at ``positions``, about to let go of their values; ``output`` noted."""
    if positions:
        _released_outputs.add(output)
    return [nodes[i] for i in positions]


# Node's own storage for these three (slots), which CachedGradient's properties fill.
_OP: Any = Node.__dict__["op"]
_INPUTS: Any = Node.__dict__["inputs"]
_ATTRS: Any = Node.__dict__["attrs"]


class CachedGradient(Node):
    """A gradient node from a cached program: its value now, its graph (``op``,
    ``inputs``, ``attrs``) built the first time it is looked at."""

    __slots__ = ("_source", "_index")

    def __init__(self, value: Any, name: str, source: _GraphOnce | None, index: int = 0):
        self.value, self.name, self.grad = value, name, None
        self._source, self._index = source, index
        self.serial = new_serial()

    def _graph(self, slot: Any) -> Any:
        if self._source is not None:
            real, self._source = self._source.stand_in(self._index, self), None
            for own in (_OP, _INPUTS, _ATTRS):
                own.__set__(self, own.__get__(real, Node))
            self.serial = new_serial()  # after the nodes it now reads: creation order
        return slot.__get__(self, Node)

    op = property(lambda self: self._graph(_OP))  # type: ignore[assignment]
    inputs = property(lambda self: self._graph(_INPUTS))  # type: ignore[assignment]
    attrs = property(lambda self: self._graph(_ATTRS))  # type: ignore[assignment]


class _GraphOnce:
    """The gradient graph of cached gradients, built (``build(inputs)``) when one of them
    is first looked at; ``stand_in`` then lets that one stand for its built node."""

    def __init__(self, build: Callable, inputs: list[Node], stand_in: Callable):
        self.build, self.inputs, self._stand_in = build, inputs, stand_in
        self.grads: list[Node] | None = None

    def stand_in(self, index: int, cached: Node) -> Node:
        if self.grads is None:
            self.grads = self.build(self.inputs)
        return self._stand_in(self.grads[index], cached)  # type: ignore[index]


def cached_gradients(
    output: Node,
    wrt: list[Node],
    build: Callable[..., list[Node]],
    stand_in: Callable[[Node, Node], Node],
    retain_graph: bool = True,
) -> list[Node]:
    """``build(inputs)`` (the gradient graph, made as always) through the cache: see the
    module's docstring. ``inputs`` is the forward graph in topological order.
    ``stand_in(real, cached)``, once a cached gradient's graph is built: ``cached`` now
    stands for ``real`` (gradients.py moves what it knows of ``real`` over).
    ``retain_graph=False``: the intermediate forward values are let go as they are read
    for the last time (``build(inputs, release)`` lets go of ``release``)."""
    inputs = find_topo_sort([output, *wrt])  # (a wrt the output does not depend on: last)
    parts = structure_key(inputs, wrt) if _enabled[-1] else None
    try:
        key = None if parts is None else StructureKey(parts)
    except TypeError:  # an unhashable setting
        key = None
    program = None if key is None else _programs.get(key)
    let_go: list[int] = []
    if not retain_graph:  # (a compiled structure knows its uses: a quicker count)
        let_go = program.unheld(inputs) if program else intermediates(inputs, output, wrt)
    release = released(inputs, let_go, output)
    if key is None:
        _stats["uncacheable"] += 1
        return build(inputs, release)
    if program is not None:
        forward = [node.value for node in inputs]
        try:
            if retain_graph:
                values = program.run(forward)
            else:
                values = program.run_releasing(forward, inputs, set(let_go))
        except Exception:  # noqa: BLE001 (an op refused: the checked build says how)
            values = None
        if values is not None:
            _stats["hits"] += 1
            _programs.move_to_end(key)
            graph = _GraphOnce(build, inputs, stand_in)  # all of them, once, if asked
            return [
                CachedGradient(v, name, graph, i)
                for i, (v, name) in enumerate(zip(values, program.names, strict=True))
            ]
    _stats["misses"] += 1
    grads = build(inputs, release)
    if key not in _seen_once:  # compiled only if it comes back
        _seen_once[key] = None
        if len(_seen_once) > MAX_PROGRAMS:
            _seen_once.popitem(last=False)
    elif all(g.value is not None for g in grads):
        del _seen_once[key]
        every = [node for node in inputs if not node.op.is_leaf and node not in (output, *wrt)]
        _programs[key] = GradientProgram(inputs, grads, every)  # (let_go: per run)
        if len(_programs) > MAX_PROGRAMS:
            _programs.popitem(last=False)
    return grads
