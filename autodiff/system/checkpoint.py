"""Checkpointing: trading compute for memory in reverse mode.

Reverse mode reads forward values in the backward pass, so a chain of n layers keeps all
n activations until the backward pass reaches them. Chen et al. (2016, "Training deep
nets with sublinear memory cost") keep only some of them, the *checkpoints*, and
recompute each segment between two checkpoints just before its backward pass needs it.
With about sqrt(n) evenly spaced checkpoints, segments are about sqrt(n) long, so memory
grows like sqrt(n) (checkpoints plus one segment), for about one extra forward pass.

Here the recomputation is part of the gradient graph: ``gradients(y, wrt,
checkpoint="sqrt")`` hands each gradient rule recomputed copies of the forward values
it did not keep (``Recomputation``; a checkpoint is read as it is, never recomputed), so
the graph can be drawn (``viz.draw_checkpointed``), planned (memory.py) and run as any
other.

>>> import autodiff as ad
>>> x = ad.Variable("x")
>>> h = x
>>> for _ in range(16):
...     h = ad.tanh(h)
>>> kept = choose_checkpoints(h, "sqrt")       # every 4th of the 16 tanh
>>> len(kept)
4
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from weakref import WeakKeyDictionary

from ..core.graph import Node, find_topo_sort

# The copies that checkpointing recomputes (weakly held: they go with their graph).
_copies: WeakKeyDictionary[Node, Node] = WeakKeyDictionary()  # copy: what it copies


def longest_chain(topo_order: Sequence[Node]) -> list[Node]:
    """The longest path of ops through a graph (leaves left out), first op first.

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> [n.name for n in longest_chain(ad.find_topo_sort([ad.exp(ad.sin(x)) + x]))]
    ['sin', 'exp', 'add']
    """
    depth: dict[Node, int] = {}
    previous: dict[Node, Node | None] = {}
    for node in topo_order:
        if node.op.is_leaf:
            continue
        inner = [x for x in node.inputs if x in depth]
        previous[node] = max(inner, key=depth.__getitem__, default=None)
        depth[node] = 1 + max((depth[x] for x in inner), default=0)
    chain = []
    last = max(depth, key=depth.__getitem__, default=None)
    while last is not None:
        chain.append(last)
        last = previous[last]
    return chain[::-1]


def choose_checkpoints(output: Node, checkpoint: str | int | Iterable[Node]) -> set[Node]:
    """The forward values that checkpointing keeps for the backward pass.

    ``"sqrt"``: about sqrt(n) of them, evenly spaced along the longest chain of n ops;
    an int k: every k-th op of that chain; a list: those nodes.
    """
    topo_order = find_topo_sort([output])
    if checkpoint == "sqrt" or (isinstance(checkpoint, int) and not isinstance(checkpoint, bool)):
        chain = longest_chain(topo_order)
        every = max(1, round(math.sqrt(len(chain)))) if checkpoint == "sqrt" else checkpoint
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"gradients: checkpoint={checkpoint!r}: an int must be >= 1.")
        return set(chain[every - 1 :: every])
    if isinstance(checkpoint, str) or not isinstance(checkpoint, Iterable):
        raise ValueError(
            f"gradients: checkpoint must be None, 'sqrt', a positive int (every k-th op) "
            f"or a list of Nodes to keep; got {checkpoint!r}."
        )
    chosen = set(checkpoint)
    in_graph = set(topo_order)
    for node in chosen:
        if node not in in_graph:
            raise ValueError(
                f"gradients: checkpoint {node!r} is not part of the graph of the output."
            )
    return chosen


class Recomputation:
    """Stand-ins for the forward values that checkpointing does not keep.

    A kept node (a checkpoint or a leaf) stands for itself: its value is kept, never
    computed again. Any other node is recomputed: a copy of its op applied to the
    stand-ins of its inputs, so a segment is recomputed from the checkpoint below it,
    each node once. Copies are made when the reverse pass first needs them, so each
    segment is recomputed just before its backward pass.
    """

    def __init__(self, kept: set[Node]):
        self.kept = kept
        self.copies: dict[Node, Node] = {}

    def is_kept(self, node: Node) -> bool:
        return node.op.is_leaf or node in self.kept

    def value(self, node: Node) -> Node:
        """``node`` itself if it is kept, else its recomputed copy."""
        return node if self.is_kept(node) else self.copy(node)

    def rule_node(self, node: Node) -> Node:
        """The node whose gradient rule the reverse pass calls (the rule reads it and its
        inputs): ``node`` when it and its inputs are kept, its recomputed copy when it is
        not kept. A kept node whose inputs are not gets a *view*: a node never computed,
        its op on the stand-ins of its inputs, which ``read_kept`` then replaces by the
        kept node in what the rule built."""
        if not self.is_kept(node):
            return self.copy(node)
        inputs = tuple(self.value(x) for x in node.inputs)
        if inputs == node.inputs:
            return node
        return Node(node.op, inputs, node.attrs, node.name)  # not Op.apply: never run

    def read_kept(self, node: Node, rule_node: Node, grads: list[Node | None]) -> list:
        """``grads``, from the rule of ``rule_node``, reading ``node`` where they read
        the view: the checkpoint's value is kept, so recomputing it would be waste."""
        if rule_node is node or not self.is_kept(node):
            return grads
        built = [g for g in grads if g is not None]
        # The rule's nodes were made after the view (serials count up): rewire those.
        for n in find_topo_sort(built, descend=lambda n: n.serial > rule_node.serial):
            if rule_node in n.inputs:
                n.inputs = tuple(node if x is rule_node else x for x in n.inputs)
        return [node if g is rule_node else g for g in grads]

    def copy(self, node: Node) -> Node:
        def stops(n: Node) -> bool:
            return self.is_kept(n) or n in self.copies

        # The segment below ``node``, inputs first (a loop, not recursion: segments can
        # be long).
        for n in find_topo_sort([node], descend=lambda n: not stops(n)):
            if not stops(n):
                inputs = [self.value(x) for x in n.inputs]
                self.copies[n] = type(n.op).apply(*inputs, **n.attrs)
                self.copies[n].name = f"recomputed {n.name}"
                _copies[self.copies[n]] = n
        return self.copies[node]


def is_recomputed(node: Node) -> bool:
    """Whether ``node`` is a forward value that a checkpointed gradient graph computes
    again (``gradients(..., checkpoint=...)``): drawings give these a colour of their own.

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> (dx,) = ad.gradients(ad.tanh(ad.tanh(x)).sum(), [x], checkpoint=2)
    >>> sorted(n.name for n in ad.find_topo_sort([dx]) if is_recomputed(n))
    ['recomputed tanh']
    """
    return node in _copies


def original_of(node: Node) -> Node | None:
    """The forward node that the recomputed ``node`` is a copy of (None if it is none)."""
    return _copies.get(node)
