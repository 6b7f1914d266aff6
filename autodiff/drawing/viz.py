"""Drawing graphs: the forward graph, and beside it the gradient graph that reverse mode builds.

This is the lecture's "AutoDiff algorithm" picture. The forward graph flows up from its
leaves (lined up at the bottom) to the output. The gradient graph, in a second colour,
flows down from the seed ``ones_like(output)`` to the adjoints of the inputs. Each value
of the forward graph that a gradient node reads is a dashed link across: the gradient
graph re-uses forward values; it does not recompute them.

* ``draw(*nodes)``: the forward graph of ``nodes``;
* ``side_by_side(output, wrt)``: forward and gradient graphs in one picture;
* ``backward_steps(output, wrt)``: the reverse pass one node at a time (a slider in Jupyter);
* ``draw_levels(*nodes)``: the graph in rows of nodes that could run in parallel;
* ``draw_checkpointed(output, wrt, checkpoint)``: ``side_by_side`` for a checkpointed
  gradient, its checkpoints and its recomputed values marked;
* ``draw_memory(plans)``: memory plans' bytes live at each step: a matplotlib Figure.

The others return a ``Drawing``: Jupyter shows it as SVG, ``.source`` is its DOT text,
and ``.save("fig.svg")`` writes ``.svg .png .pdf`` or ``.dot`` (see renderer.py for how),
``.save("fig.png", scale=2)`` a PNG twice as large, for a projector.

>>> import autodiff as ad
>>> x = ad.tensor(3.0, name="x")
>>> picture = side_by_side(x * ad.sin(x), [x])
>>> "cluster_gradient" in picture.source
True
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import graphviz

from ..core import backend
from ..core.gradients import AdjointStep
from ..core.graph import Constant, Node, find_topo_sort
from ..system.checkpoint import choose_checkpoints, is_recomputed, original_of
from ..system.executor import Executor
from ..system.gradients import gradients
from ..system.memory import MemoryPlan, levels
from . import renderer

INK = "#334155"  # forward graph
GRADIENT = "#c2410c"  # gradient graph: nodes, edges and text
CROSS = "#64748b"  # dashed links: forward values that gradient nodes read
LEAF_FILL = "#e2e8f0"
GRADIENT_FILL = "#fff7ed"
HIGHLIGHT = "#fde047"  # backward_steps: the adjoint being filled in
CONTRIBUTION = "#fdba74"  # backward_steps: the contributions summed into it
KEPT_FILL = "#bbf7d0"  # draw_checkpointed: the checkpoints, kept for the backward pass
RECOMPUTED = "#6d28d9"  # draw_checkpointed: forward values the gradient graph recomputes
RECOMPUTED_FILL = "#ede9fe"
MIB = 2**20  # draw_memory's unit
MAX_NODES = 300
MIN_RUN = 3  # collapse=True folds chains of at least this many ops
ROW_LENGTH = 6  # leaves, or gradients asked for, in one row at most
READS = ("label", "edges", "none")  # how side_by_side shows the forward values read
# Leaves are lined up in one row up to this many nodes. In a deep graph the row makes
# long edges up to every layer, and Graphviz's crossing minimisation then takes minutes
# (a 40-layer MLP: 27 s for its forward graph alone, 0.07 s without the row).
ALIGN_LIMIT = 100

SYMBOLS = {
    "add": "+",
    "subtract": "−",
    "multiply": "×",
    "divide": "÷",
    "negative": "neg",
    "power": "**",
    "matmul": "matmul",
}


class GraphTooLarge(ValueError):
    """A graph with more nodes than ``max_nodes`` (the message says how to draw it anyway)."""


class Drawing:
    """A picture of a graph: SVG in Jupyter, ``.source`` (DOT), ``.save(path)``.

    ``renderer`` is ``"auto"`` (Graphviz's ``dot`` when on PATH, else WebAssembly),
    ``"dot"`` or ``"wasm"``.
    """

    def __init__(self, source: str, renderer: str = "auto"):
        self.source = source
        self.renderer = renderer
        self._svg: str | None = None

    def svg(self) -> str:
        """The picture as SVG text (rendered once, then kept)."""
        if self._svg is None:
            self._svg = renderer.render(self.source, "svg", self.renderer).decode()
        return self._svg

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return {"image/svg+xml": self.svg(), "text/plain": repr(self)}

    def save(self, path: str | pathlib.Path, scale: float = 1) -> pathlib.Path:
        """Write the picture; the suffix (``.svg .png .pdf .dot``) picks the format.

        ``scale`` enlarges a PNG: ``save("fig.png", scale=2)`` is twice as wide and high
        (for a projector); SVG and PDF are sharp at any size.

        >>> import autodiff as ad, tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> draw(ad.tensor(1.0, name="x") + 1).save(folder / "x.dot").suffix
        '.dot'
        """
        path = pathlib.Path(path)
        suffix = path.suffix.lower().lstrip(".")
        if suffix not in ("dot", "gv", *renderer.FORMATS):
            raise ValueError(
                f"save: cannot tell the format of '{path.name}' from its suffix: use .svg, "
                f".png, .pdf or .dot (and .gif for the pictures of backward_steps)."
            )
        renderer.check_scale(suffix, scale)
        if suffix in ("dot", "gv"):
            path.write_text(self.source)
        elif suffix == "svg":
            path.write_text(self.svg())
        else:
            path.write_bytes(renderer.render(self.source, suffix, self.renderer, scale))
        return path

    def __repr__(self) -> str:
        return "<Drawing: shown as SVG in Jupyter; .source is DOT; .save('fig.svg') writes it>"


# What to draw ---------------------------------------------------------------------------


@dataclass
class _Scene:
    """The nodes of one picture and how each is marked."""

    forward: list[Node]  # topological order
    gradient: list[Node] = field(default_factory=list)  # not in forward, topological order
    outputs: list[Node] = field(default_factory=list)
    results: list[Node] = field(default_factory=list)  # the gradients asked for
    adjoint_of: dict[Node, list[Node]] = field(default_factory=dict)  # gradient -> forward
    fill: dict[Node, str] = field(default_factory=dict)  # highlighted nodes
    recomputed: set[Node] = field(default_factory=set)  # gradient nodes in a third colour
    hidden: set[Node] = field(default_factory=set)  # laid out but not drawn (steps)
    caption: str | None = None
    names: dict[Node, str] = field(default_factory=dict)  # v1, v2, ... for unnamed ops
    values: dict[Node, Any] = field(default_factory=dict)  # what the labels show
    digits: int = 4  # significant digits of the values shown
    reads: str = "label"  # forward values a gradient node reads: "label", "edges", "none"
    sizes: dict[str, tuple[str, str]] = field(default_factory=dict)  # node id: fixed size


def draw(
    *nodes: Node,
    max_nodes: int = MAX_NODES,
    collapse: bool = False,
    title: str | None = None,
    values: bool = True,
    digits: int = 4,
) -> Drawing:
    """The forward graph of ``nodes``: leaves at the bottom, outputs (double border) on top.

    Each op without a name of its own is called v1, v2, ... in the order it is computed
    (as in a trace of the evaluation); ``values=True`` shows each value of at most four
    numbers, to ``digits`` significant digits. ``collapse=True`` folds each chain of ops
    (a repeated layer, say) into one node; a graph of more than ``max_nodes`` nodes is
    refused with a message saying so.

    >>> import autodiff as ad
    >>> x, y = ad.tensor(3.0, name="x"), ad.tensor(4.0, name="y")
    >>> lines = draw(x * y + ad.sin(x)).source.splitlines()
    >>> sum("->" in line and "invis" not in line for line in lines)   # five edges
    5
    """
    if not nodes or not all(isinstance(n, Node) for n in nodes):
        raise TypeError("draw: pass one or more Nodes, e.g. draw(y) or draw(loss, grad).")
    scene = _forward_scene(find_topo_sort(nodes), values, digits)
    scene.outputs, scene.caption = list(nodes), title
    return Drawing(_to_dot(scene, "draw", max_nodes, collapse))


def _forward_scene(forward: list[Node], values: bool, digits: int) -> _Scene:
    if isinstance(digits, bool) or not isinstance(digits, int) or not 1 <= digits <= 17:
        raise ValueError(f"digits must be a whole number from 1 to 17, got {digits!r}.")
    shown = _values_of(forward) if values else {}
    return _Scene(forward, names=_short_names(forward), values=shown, digits=digits)


def side_by_side(
    output: Node,
    wrt: Sequence[Node],
    *,
    max_nodes: int = MAX_NODES,
    collapse: bool = False,
    title: str | None = None,
    reads: str = "label",
    values: bool = True,
    digits: int = 4,
) -> Drawing:
    """The forward graph of ``output`` on the left, the gradient graph on the right.

    The gradient graph is the one ``ad.gradients(output, wrt)`` builds, less the nodes
    no result needs. Its nodes and edges are in a second colour; the adjoint of each
    forward node says so in its label. The forward values a gradient node reads are
    named in its label (``reads="label"``), or drawn as dashed links across
    (``reads="edges"``: fine for small graphs), or not shown (``"none"``). ``values``
    and ``digits`` as in ``draw``, for the gradient's values too. ``output`` may itself
    be a gradient (second derivatives), and the graph may be symbolic (no values yet).

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> picture = side_by_side(ad.exp(x) * x, [x])
    >>> "reads x" in picture.source and "style=dashed" not in picture.source
    True
    >>> side_by_side(ad.exp(x) * x, [x], reads="edges").source.count("style=dashed")
    3
    """
    scene, _, _ = _gradient_scene(output, wrt, reads, values, digits)
    scene.caption = title
    return Drawing(_to_dot(scene, "side_by_side", max_nodes, collapse))


def draw_checkpointed(
    output: Node,
    wrt: Sequence[Node],
    checkpoint: str | int | Sequence[Node] = "sqrt",
    *,
    max_nodes: int = MAX_NODES,
    collapse: bool = False,
    title: str | None = None,
) -> Drawing:
    """``side_by_side`` for ``ad.gradients(output, wrt, checkpoint=checkpoint)``: the
    checkpoints (forward values kept for the backward pass) are filled green with a bold
    border; the forward values that the gradient graph computes again are violet; the
    rest of the gradient graph is orange, as always. The caption counts both.

    >>> import autodiff as ad
    >>> x = ad.Variable("x")
    >>> h = x
    >>> for _ in range(6):
    ...     h = ad.tanh(h)
    >>> picture = draw_checkpointed(h.sum(), [x], checkpoint=2)
    >>> picture.source.count(RECOMPUTED_FILL), picture.source.count(KEPT_FILL)
    (3, 3)
    """
    if checkpoint is None:
        raise ValueError(
            "draw_checkpointed: checkpoint=None keeps every forward value, so nothing is "
            "recomputed: pass 'sqrt', an int k (every k-th op) or a list of nodes to keep, "
            "or draw the plain gradient with side_by_side."
        )
    scene, _, _ = _gradient_scene(output, wrt, checkpoint=checkpoint)
    kept = [n for n in scene.forward if n in choose_checkpoints(output, checkpoint)]
    scene.fill = dict.fromkeys(kept, KEPT_FILL)
    scene.recomputed = {n for n in scene.gradient if is_recomputed(n)}
    legend = (
        f"{_count(kept, 'checkpoint')} kept (green, bold), "
        f"{_count(scene.recomputed, 'value')} recomputed (violet), gradient (orange)"
    )
    scene.caption = legend if title is None else f"{title}: {legend}"
    return Drawing(_to_dot(scene, "draw_checkpointed", max_nodes, collapse))


def _count(items: Sequence | set, word: str) -> str:
    return f"{len(items)} {word}" + ("" if len(items) == 1 else "s")


def draw_memory(
    plans: MemoryPlan | Mapping[str, MemoryPlan | Sequence[float]],
    *,
    title: str | None = None,
    figsize: tuple[float, float] = (7, 3.5),
) -> Any:
    """The memory timeline: bytes live while each step runs (``MemoryPlan.timeline()``),
    in MiB (KiB when all stay below one) against the step, the peak of each curve
    marked and given in the legend.
    Returns the matplotlib Figure: Jupyter shows it; ``.savefig("fig.pdf")`` writes it.

    ``plans``: one plan, drawn as its three curves (every value kept, each value freed
    after its last use, the planned buffers); or a dict of labels to plans, each drawn
    as its planned curve (its ``peak_bytes``), or to lists of bytes per step, such as
    ``plan.timeline()["naive"]``, to compare plain, planned and checkpointed runs.

    >>> import numpy as np, autodiff as ad
    >>> x = ad.Variable("x")
    >>> y = ad.sin(ad.exp(x)) * 2
    >>> figure = draw_memory(ad.memory.plan([y], {x: np.zeros(1000)}))
    >>> for text in figure.axes[0].get_legend().get_texts():
    ...     print(text.get_text())
    every value kept (naive): peak 23.44 KiB
    freed after last use: peak 15.62 KiB
    planned (shared buffers): peak 7.81 KiB
    """
    import matplotlib.pyplot as plt

    curves = _memory_curves(plans)
    figure, ax = plt.subplots(figsize=figsize)
    plt.close(figure)  # not left to pyplot: Jupyter shows the returned figure once
    largest = max((max(series, default=0) for series in curves.values()), default=0)
    unit, size = ("MiB", MIB) if largest >= MIB else ("KiB", 1024)  # (a lecture's plans)
    for label, series in curves.items():
        scaled = [b / size for b in series]
        peak = max(scaled, default=0.0)
        (line,) = ax.plot(scaled, label=f"{label}: peak {peak:.2f} {unit}")
        if scaled:  # a dot on the (first) step that holds the peak
            ax.scatter([scaled.index(peak)], [peak], color=line.get_color(), zorder=3)
    ax.set_xlabel("step (ops in execution order)")
    ax.set_ylabel(f"memory live ({unit})")
    if title:
        ax.set_title(title)
    ax.legend()
    figure.tight_layout()
    return figure


def _memory_curves(plans) -> dict[str, Sequence[float]]:
    """Label -> bytes per step, for ``draw_memory``."""
    if isinstance(plans, MemoryPlan):
        timeline = plans.timeline()
        return {
            "every value kept (naive)": timeline["naive"],
            "freed after last use": timeline["freed"],
            "planned (shared buffers)": timeline["planned"],
        }
    if not isinstance(plans, Mapping):
        raise TypeError(
            f"draw_memory: pass a MemoryPlan (ad.memory.plan(outputs, feed)) or a dict "
            f"of labels to plans, got {type(plans).__name__}."
        )
    if not plans:
        raise ValueError("draw_memory: the dict is empty: give it a label and a plan.")
    curves: dict[str, Sequence[float]] = {}
    for label, plan in plans.items():
        if isinstance(plan, MemoryPlan):
            curves[str(label)] = plan.timeline()["planned"]
            continue
        try:
            if isinstance(plan, (str, bytes)):
                raise TypeError
            curves[str(label)] = [float(b) for b in plan]
        except (TypeError, ValueError):
            raise TypeError(
                f"draw_memory: {label!r} is a {type(plan).__name__}; give a MemoryPlan, "
                f"or a list of bytes per step such as plan.timeline()['naive']."
            ) from None
    return curves


def draw_levels(*nodes: Node, max_nodes: int = MAX_NODES, title: str | None = None) -> Drawing:
    """The forward graph in rows: row k holds ``ad.memory.levels(nodes)[k]``, the nodes
    whose inputs are all in lower rows. Each row could run at once, in parallel; the
    number of rows is the length of the critical path.

    >>> import autodiff as ad
    >>> x, y = ad.tensor(3.0, name="x"), ad.tensor(4.0, name="y")
    >>> draw_levels(ad.sin(x) * ad.cos(y)).source.count('label="level')   # three levels
    3
    """
    if not nodes or not all(isinstance(n, Node) for n in nodes):
        raise TypeError("draw_levels: pass one or more Nodes, e.g. draw_levels(loss).")
    scene = _forward_scene(find_topo_sort(nodes), values=False, digits=4)
    scene.outputs, scene.caption = list(nodes), title
    return Drawing(_to_dot(scene, "draw_levels", max_nodes, False, rows=levels(nodes)))


def _gradient_scene(
    output: Node,
    wrt: Sequence[Node],
    reads: str = "label",
    values: bool = True,
    digits: int = 4,
    checkpoint=None,
) -> tuple[_Scene, list[AdjointStep], Node]:
    wrt = list(wrt)
    if not wrt:
        raise ValueError(
            "no nodes to differentiate with respect to (wrt is empty): pass them, e.g. "
            "side_by_side(y, [x]), or draw the forward graph alone with draw(y)."
        )
    if reads not in READS:
        raise ValueError(f"reads must be one of {READS}, got {reads!r}.")
    steps: list[AdjointStep] = []
    results = gradients(output, wrt, checkpoint=checkpoint, steps=steps)
    forward = find_topo_sort([output, *wrt])
    in_forward = set(forward)
    # Only what a result needs: an adjoint no result reads is built, never computed.
    live = set(find_topo_sort(results))
    steps = [step for step in steps if step.adjoint in live]
    gradient = [n for n in find_topo_sort(results) if n not in in_forward]
    adjoint_of: dict[Node, list[Node]] = {}
    for step in steps:  # one node can be several adjoints: + passes its adjoint on as is
        if step.adjoint not in in_forward:
            adjoint_of.setdefault(step.adjoint, []).append(step.node)
    for x, result in zip(wrt, results, strict=True):  # a zero gradient: no step reached x
        if result not in in_forward and x not in adjoint_of.get(result, []):
            adjoint_of.setdefault(result, []).append(x)
    scene = _forward_scene(forward, False, digits)
    scene.gradient, scene.outputs, scene.results = gradient, [output], results
    scene.adjoint_of, scene.reads = adjoint_of, reads
    if values:  # (forward and gradient in one run)
        scene.values = _values_of(forward + gradient)
    seed = steps[0].contributions[0] if steps else results[0]
    return scene, steps, seed


def _values_of(nodes: list[Node]) -> dict[Node, Any]:
    """The values of ``nodes``: those they hold, and the others that valued leaves
    determine, computed for the picture (the engine computes only what the results
    need, and keeps only the results; a placeholder leaves its part without values)."""
    known: dict[Node, bool] = {}  # whether a node's value is, or can be, known
    for node in find_topo_sort(nodes):
        known[node] = node.value is not None or (
            not node.op.is_leaf and all(known[x] for x in node.inputs)
        )
    missing = [node for node in nodes if node.value is None and known[node]]
    shown = {node: node.value for node in nodes if node.value is not None}
    if missing:
        shown.update(zip(missing, Executor(missing).run(), strict=True))
    return shown


# The reverse pass, step by step ---------------------------------------------------------


class BackwardSteps(Sequence[Drawing]):
    """The pictures of ``backward_steps``: a sequence of Drawings, a slider in Jupyter."""

    def __init__(self, drawings: list[Drawing], captions: list[str]):
        self.steps = drawings
        self.captions = captions

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, index):  # type: ignore[override]
        return self.steps[index]

    def __iter__(self) -> Iterator[Drawing]:
        return iter(self.steps)

    def save(self, path: str | pathlib.Path, scale: float = 1) -> list[pathlib.Path]:
        """Write the steps for slides; the paths written.

        ``steps.pdf`` is one PDF with a page per step, ``steps.gif`` an animated GIF (a
        frame per step, 1.5 s each); any other suffix writes one file per step:
        ``fig.svg`` becomes ``fig-01.svg``, ``fig-02.svg``, ... ``scale`` enlarges PNG
        and GIF pictures, as in ``Drawing.save``.
        """
        path = pathlib.Path(path)
        suffix = path.suffix.lower().lstrip(".")
        if suffix == "pdf":
            pages = [renderer.render(d.source, "pdf", d.renderer, scale) for d in self.steps]
            path.write_bytes(renderer.merge_pdfs(pages))
            return [path]
        if suffix == "gif":
            frames = [renderer.render(d.source, "png", d.renderer, scale) for d in self.steps]
            path.write_bytes(renderer.animate(frames))
            return [path]
        width = max(2, len(str(len(self.steps))))
        return [
            drawing.save(path.with_name(f"{path.stem}-{i:0{width}d}{path.suffix}"), scale)
            for i, drawing in enumerate(self.steps, start=1)
        ]

    def widget(self) -> Any:
        """An ipywidgets slider (with a play button) that steps through the pictures."""
        import ipywidgets

        play = ipywidgets.Play(min=1, max=len(self), interval=1500, description="play")
        slider = ipywidgets.IntSlider(min=1, max=len(self), description="step")
        picture = ipywidgets.HTML(self.steps[0].svg())
        ipywidgets.jslink((play, "value"), (slider, "value"))

        def show(change: dict) -> None:
            picture.value = self.steps[change["new"] - 1].svg()

        slider.observe(show, names="value")
        return ipywidgets.VBox([ipywidgets.HBox([play, slider]), picture])

    def _ipython_display_(self) -> None:
        from IPython.display import display

        try:
            display(self.widget())
        except ImportError:  # no ipywidgets: every step, one below the other
            for drawing in self.steps:
                display(drawing)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return self.steps[-1]._repr_mimebundle_()

    def __repr__(self) -> str:
        return f"<BackwardSteps: {len(self)} pictures of the reverse pass>"


def backward_steps(
    output: Node,
    wrt: Sequence[Node],
    *,
    max_nodes: int = MAX_NODES,
    reads: str = "label",
    digits: int = 4,
    values: bool = True,
    title: str | None = None,
):
    """The reverse pass as pictures, one per node in reverse topological order.

    Picture k shows the gradient graph as far as the engine has built it: the forward
    node whose adjoint is filled in and that adjoint (yellow), the contributions summed
    into it (orange), and what its gradient rule sent on to its inputs. Every picture
    has the same layout, so stepping through them animates the algorithm. ``reads``,
    ``values`` and ``digits`` as in ``side_by_side``; ``title`` leads each caption.

    >>> import autodiff as ad
    >>> x = ad.tensor(3.0, name="x")
    >>> steps = backward_steps(x * x, [x])
    >>> len(steps), steps.captions[-1]
    (2, "step 2 of 2: adjoint of 'x' = sum of 2 contributions")
    """
    base, trace, seed = _gradient_scene(output, wrt, reads, values, digits)
    if not trace:
        names = ", ".join(_title(x, base.names) for x in wrt)
        raise ValueError(
            f"backward_steps: no gradient flows from the output to {names} (their "
            f"gradients are zeros): the reverse pass has no steps to show. "
            f"side_by_side(output, wrt) draws the zero gradients."
        )
    scenes = []
    in_gradient = set(base.gradient)
    for k, step in enumerate(trace):
        built = [seed] + [n for s in trace[: k + 1] for n in (s.adjoint, *s.sent)]
        visible = find_topo_sort(built, descend=lambda n: n in in_gradient)
        # A contribution sent now may be a later step's adjoint: so labelled from then on.
        done = {s.node for s in trace[: k + 1]}
        adjoint_of = {g: [n for n in of if n in done] for g, of in base.adjoint_of.items()}
        scene = dataclasses.replace(base, adjoint_of=adjoint_of)
        scene.hidden = in_gradient - set(visible)
        scene.fill = _step_fill(step)
        scene.caption = _step_caption(k, len(trace), step, base.names)
        scene.caption = scene.caption if title is None else f"{title}: {scene.caption}"
        scenes.append(scene)
    # Labels grow as adjoints are filled in: every node gets the size of its last label,
    # so that the layout stays the same from step to step.
    final = renderer.layout(_to_dot(scenes[-1], "backward_steps", max_nodes, False))
    sizes = {o["name"]: (o["width"], o["height"]) for o in final["objects"] if "width" in o}
    drawings = []
    for scene in scenes:
        scene.sizes = sizes
        drawings.append(Drawing(_to_dot(scene, "backward_steps", max_nodes, False)))
    return BackwardSteps(drawings, [scene.caption or "" for scene in scenes])


def _step_fill(step: AdjointStep) -> dict[Node, str]:
    fill = {part: CONTRIBUTION for part in step.contributions}
    fill[step.node] = HIGHLIGHT
    # _sum_contributions adds them left to right: adjoint = ((c0 + c1) + c2) + ...
    node = step.adjoint
    for _ in step.contributions[1:]:
        fill[node] = HIGHLIGHT
        node = node.inputs[0]
    fill[step.adjoint] = HIGHLIGHT
    return fill


def _step_caption(k: int, count: int, step: AdjointStep, names: dict[Node, str]) -> str:
    parts = len(step.contributions)
    if k == 0:
        how = "the seed ones_like(output)"
    elif parts == 1:
        how = "its one contribution"
    else:
        how = f"sum of {parts} contributions"
    return f"step {k + 1} of {count}: adjoint of '{_title(step.node, names)}' = {how}"


# Labels ---------------------------------------------------------------------------------


def _title(node: Node, names: dict[Node, str], digits: int = 4) -> str:
    """What a node is called in labels and captions: its short name (v3), its own name,
    or, for a number written in the program, that number (to ``digits`` digits)."""
    if node in names:
        return names[node]
    if isinstance(node.op, Constant) and node.name == "constant":
        return _short_value(node.value, digits) or "constant"
    return node.name if node.op.is_leaf or node.name != node.op.name else _symbol(node)


def _short_names(nodes: Sequence[Node]) -> dict[Node, str]:
    """v1, v2, ... for the ops of ``nodes`` (a topological order) that have no name of
    their own, as in a trace of the evaluation; a name some node has already is skipped."""
    taken, names = {node.name for node in nodes}, {}
    count = 0
    for node in nodes:
        if not node.op.is_leaf and node.name == node.op.name:
            count += 1
            while f"v{count}" in taken:
                count += 1
            names[node] = f"v{count}"
    return names


def _symbol(node: Node) -> str:
    if node.op.name == "power_scalar":
        return f"** {node.attrs['exponent']:g}"
    return SYMBOLS.get(node.op.name, node.op.name)


def _attrs_text(node: Node) -> str | None:
    """The op's settings worth a glance (axis=1, trans_A=True), skipping the defaults."""
    if node.op.is_leaf or node.op.name == "power_scalar":
        return None
    shown = []
    for key, value in node.attrs.items():
        if value is None or value is False or isinstance(value, dict):
            continue
        shown.append(str(value) if key == "program" else f"{key}={value}")  # fused: a formula
    return ", ".join(shown) or None


def _short_value(value: Any, digits: int) -> str | None:
    """A value in a few characters: '3', '[1, 2.5]'; None for more than four numbers."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return _number(value, digits)
    array = backend.to_numpy(value)
    if array.size > 4:
        return None
    return _format_numbers(array.tolist(), digits)


def _format_numbers(item: Any, digits: int) -> str:
    if isinstance(item, list):
        return "[" + ", ".join(_format_numbers(x, digits) for x in item) + "]"
    return _number(item, digits)


def _number(x: float, digits: int) -> str:
    return f"{x + 0:.{digits}g}"  # (+ 0: a -0.0 reads 0)


def _label(
    node: Node, scene: _Scene, gradient: bool, reads: Sequence[Node] = (), inline: bool = False
) -> str:
    """A node's label, a line each: the op's symbol (with the numbers it takes written
    in, ``1 −``, if ``inline``); its name, or whose adjoint it is, with its value; the
    forward values it ``reads``; its settings; its shape."""
    value = _short_value(scene.values.get(node), scene.digits)
    adjoints = scene.adjoint_of.get(node, [])
    if adjoints:
        head = "adjoint of " + ", ".join(_title(n, scene.names) for n in adjoints)
    elif (original := original_of(node)) is not None:
        head = f"recomputed {_title(original, scene.names)}"
    elif isinstance(node.op, Constant) and node.name == "constant" and value is not None:
        head, value = value, None  # a number written in the program: its value says it
    elif not gradient or node.op.is_leaf or node.name != node.op.name:
        head = _title(node, scene.names)
    else:
        head = ""  # a step of the gradient: its op and value say what it is
    lines = [] if node.op.is_leaf else [_symbol(node)]
    if inline:  # the number it takes, written in: 1 − (y * y), (...) × 2
        first = _is_number(node.inputs[0])
        number = _title(node.inputs[0 if first else 1], {}, scene.digits)
        lines = [f"{number} {lines[0]}" if first else f"{lines[0]} {number}"]
    lines.append(head if value is None else f"{head} = {value}".strip())
    if reads:
        titles = (_title(x, scene.names, scene.digits) for x in reads)
        lines.append("reads " + ", ".join(dict.fromkeys(titles)))
    lines.append(_attrs_text(node) or "")
    shape = _shape(node, scene)
    if shape and value is None:
        lines.append(str(shape))  # (a value shown says its shape)
    return _lines(lines)


def _shape(node: Node, scene: _Scene) -> tuple | None:
    """The node's shape, or that of the value computed for the picture (gradient nodes
    get values for the picture only)."""
    if node.shape is not None:
        return tuple(node.shape)
    shape = getattr(scene.values.get(node), "shape", None)
    return None if shape is None else tuple(shape)


def _is_number(node: Node) -> bool:
    """A number written in the program (or by a gradient rule), not a named constant."""
    return isinstance(node.op, Constant) and node.name == "constant" and node.shape == ()


def _takes_a_number(node: Node) -> bool:
    """An op of two inputs, one of them a number: drawn as ``1 −`` or ``× 2``."""
    return len(node.inputs) == 2 and sum(map(_is_number, node.inputs)) == 1


def _inlined_numbers(gradient: list[Node]) -> set[Node]:
    """Numbers the gradient rules wrote (1 in 1 - y * y), written into their readers'
    labels rather than drawn (unless a reader cannot take them so)."""
    part = set(gradient)
    readers = [n for n in gradient if any(map(_is_number, n.inputs))]
    numbers = {x for n in readers for x in n.inputs if x in part and _is_number(x)}
    return numbers - {x for n in readers if not _takes_a_number(n) for x in n.inputs}


def _lines(texts: list[str]) -> str:
    r"""Plain text lines for a DOT label: ``\n`` between lines, backslashes escaped.

    Plain, not HTML-like labels: the WebAssembly build of Graphviz has no XML parser,
    and draws a node with an HTML-like label as its bare id.
    """
    text = "\\n".join(text.replace("\\", "\\\\") for text in texts if text)
    return graphviz.nohtml(text)  # a name such as "<x>" is text too


# DOT ------------------------------------------------------------------------------------


def _to_dot(
    scene: _Scene, function: str, max_nodes: int, collapse: bool, rows: list | None = None
) -> str:
    ids = {node: f"n{i}" for i, node in enumerate(scene.forward + scene.gradient)}
    seeds = [g for g, of in scene.adjoint_of.items() if set(of) & set(scene.outputs)]
    # (and what a picture marks: checkpoints, recomputed values)
    keep = {*scene.outputs, *scene.results, *seeds, *scene.fill, *scene.recomputed}
    folded: dict[Node, str] = {}
    sides: set[Node] = set()  # folded with a chain, but not part of its pattern
    if collapse:
        for part in (scene.forward, scene.gradient):
            chains, side = _fold_chains(part, keep, ids)
            folded.update(chains)
            sides.update(side)
    inlined = _inlined_numbers(scene.gradient)
    count = len(ids) - len(folded) + len(set(folded.values())) - len(inlined - set(folded))
    if count > max_nodes:
        _refuse(function, count, max_nodes, collapse)
    graph = graphviz.Digraph("autodiff")
    # Bottom to top, as in the lecture: leaves below, the output above.
    graph.attr(rankdir="BT", nodesep="0.3", ranksep="0.35", fontname="Helvetica")
    graph.attr("node", shape="box", style="rounded", fontname="Helvetica", color=INK)
    graph.attr("node", margin="0.08,0.04", height="0.3")
    graph.attr("edge", color=INK, arrowsize="0.7")
    if scene.caption:
        graph.attr(label=_lines([scene.caption]), labelloc="t", fontsize="16")
    drawer = _Drawer(scene, ids, folded, sides, inlined, align=count <= ALIGN_LIMIT)
    if scene.gradient:
        with graph.subgraph(name="cluster_forward") as forward:
            forward.attr(label="forward graph", labelloc="t", color="#cbd5e1", fontcolor=INK)
            forward.attr(margin="24")
            drawer.add_forward(forward)
        with graph.subgraph(name="cluster_gradient") as gradient:
            gradient.attr(label="gradient graph", labelloc="t", color="#fed7aa", margin="24")
            gradient.attr(fontcolor=GRADIENT)
            drawer.add_gradient(gradient)
        if scene.reads == "edges":
            drawer.add_cross_links(graph)
    else:
        drawer.add_forward(graph)
    if rows:
        drawer.add_rows(graph, rows)
    return graph.source


def _refuse(function: str, count: int, max_nodes: int, collapse: bool) -> None:
    fold = (
        "even with collapse=True"
        if collapse
        else "or pass collapse=True to fold chains of ops (repeated layers) into one node each"
    )
    if function == "backward_steps":  # (it shows every node: nothing to fold)
        fold = "or step through a smaller graph"
    raise GraphTooLarge(
        f"{function}: the picture would have {count} nodes, more than max_nodes={max_nodes}. "
        f"Pass max_nodes={count} to draw it all (Graphviz lays out 500 nodes in seconds), "
        f"{fold}; or draw a smaller part of the graph."
    )


class _Drawer:
    """Adds one scene's nodes and edges to Graphviz (sub)graphs."""

    def __init__(
        self,
        scene: _Scene,
        ids: dict[Node, str],
        folded: dict[Node, str],
        sides: set[Node],  # folded with a chain, not part of its pattern
        inlined: set[Node],  # numbers written into their readers' labels
        align: bool,
    ):
        self.scene, self.ids, self.folded, self.align = scene, ids, folded, align
        self.sides, self.inlined = sides, inlined
        self.in_gradient, self.in_forward = set(scene.gradient), set(scene.forward)
        self.edges: set[tuple[str, str]] = set()
        self.chains: dict[str, list[Node]] = {}
        for node, stand_in in folded.items():
            self.chains.setdefault(stand_in, []).append(node)

    def id(self, node: Node) -> str:
        return self.folded.get(node) or self.ids[node]

    def add_forward(self, graph: graphviz.Digraph) -> None:
        leaves = []
        for node in self.scene.forward:
            self.add_node(graph, node, gradient=False)
            if node.op.is_leaf:
                leaves.append(self.id(node))
            for x in node.inputs:
                self.add_edge(graph, x, node, {})
        self.line_up(graph, leaves)  # the leaves at the bottom

    def add_gradient(self, graph: graphviz.Digraph) -> None:
        for node in self.scene.gradient:
            if node in self.inlined:
                continue
            self.add_node(graph, node, gradient=True)
            for x in node.inputs:
                if x in self.in_gradient and x not in self.inlined:
                    # Written head to tail with dir=back: the gradient graph flows down,
                    # from the seed at the top to the inputs' adjoints at the bottom.
                    colour = RECOMPUTED if node in self.scene.recomputed else GRADIENT
                    attrs = {"color": colour, "dir": "back"}
                    self.add_edge(graph, node, x, attrs, hidden=node in self.scene.hidden)
        results = [self.id(n) for n in self.scene.results if n in self.in_gradient]
        self.line_up(graph, list(dict.fromkeys(results)))  # the gradients asked for

    def line_up(self, graph: graphviz.Digraph, node_ids: list[str]) -> None:
        """The nodes in a row, in the order given; more than ROW_LENGTH in rows stacked
        downwards (for a slide's proportions), each under the one before it."""
        if not self.align or len(node_ids) < 2:
            return
        count = -(-len(node_ids) // ROW_LENGTH)  # rows
        length = -(-len(node_ids) // count)
        rows = [node_ids[i : i + length] for i in range(0, len(node_ids), length)]
        for above, below in zip(rows, rows[1:], strict=False):
            graph.edge(below[0], above[0], style="invis")  # (upwards: graphs flow up)
        for ids in rows:
            with graph.subgraph() as row:
                row.attr(rank="same")
                for node_id in ids:
                    row.node(node_id)
                for left, right in zip(ids, ids[1:], strict=False):  # in the order given
                    row.edge(left, right, style="invis")

    def add_rows(self, graph: graphviz.Digraph, rows: list[list[Node]]) -> None:
        """One row (rank) per group of nodes, labelled "level k" beside it."""
        previous = None
        for k, group in enumerate(rows):
            label = f"level{k}"
            with graph.subgraph() as row:
                row.attr(rank="same")
                row.node(label, label=f"level {k}", shape="plaintext", fontcolor=CROSS)
                for node in group:
                    row.node(self.id(node))
            if previous is not None:
                graph.edge(previous, label, style="invis")
            previous = label

    def reads(self, node: Node) -> list[Node]:
        """The forward values a gradient node reads (not inputs that lend only a shape)."""
        shape_only = node.op.shape_inputs
        return [
            x for i, x in enumerate(node.inputs) if x in self.in_forward and i not in shape_only
        ]

    def add_cross_links(self, graph: graphviz.Digraph) -> None:
        for node in self.scene.gradient:
            for x in self.reads(node):
                attrs = {"style": "dashed", "color": CROSS, "constraint": "false"}
                self.add_edge(graph, x, node, attrs, hidden=node in self.scene.hidden)

    def add_edge(self, graph, tail: Node, head: Node, attrs: dict, hidden: bool = False) -> None:
        key = (self.id(tail), self.id(head))
        if key[0] == key[1] or key in self.edges:
            return  # inside a folded chain, or drawn already
        self.edges.add(key)
        if hidden or tail in self.scene.hidden or head in self.scene.hidden:
            attrs = {**attrs, "style": "invis"}
        graph.edge(*key, **attrs)

    def add_node(self, graph: graphviz.Digraph, node: Node, gradient: bool) -> None:
        node_id = self.id(node)
        if node in self.folded:
            if node_id == self.ids[node]:  # the chain's last node stands for the chain
                colour = {"color": GRADIENT, "fontcolor": GRADIENT} if gradient else {}
                label = self.folded_label(node)
                graph.node(node_id, label=label, style="rounded,dashed", **colour)
            return
        reads = self.reads(node) if gradient and self.scene.reads == "label" else []
        inline = any(x in self.inlined for x in node.inputs)
        attrs = {"label": _label(node, self.scene, gradient, reads, inline)}
        if node_id in self.scene.sizes:
            attrs["width"], attrs["height"] = self.scene.sizes[node_id]
            attrs["fixedsize"] = "true"
        styles = ["rounded"]
        if node.op.is_leaf or gradient:
            styles.append("filled")
            attrs["fillcolor"] = GRADIENT_FILL if gradient else LEAF_FILL
        if gradient:
            attrs.update(color=GRADIENT, fontcolor=GRADIENT)
        if node in self.scene.recomputed:
            attrs.update(color=RECOMPUTED, fontcolor=RECOMPUTED, fillcolor=RECOMPUTED_FILL)
        if node in self.scene.fill:
            styles.append("filled")
            attrs["fillcolor"] = self.scene.fill[node]
            attrs["penwidth"] = "2"
        if node in self.scene.outputs or node in self.scene.results:
            attrs["peripheries"] = "2"
        attrs["style"] = "invis" if node in self.scene.hidden else ",".join(dict.fromkeys(styles))
        graph.node(node_id, **attrs)

    def folded_label(self, last: Node) -> str:
        chain = self.chains[self.ids[last]]
        names = [n.op.name for n in chain if n not in self.sides]
        shorts = [self.scene.names[n] for n in chain if n in self.scene.names]
        text = _repeats(names)
        small = f"{len(chain)} ops folded"
        if shorts:  # the names the labels of other nodes may read
            small = f"{shorts[0]} … {shorts[-1]}: {small}"
        if shape := _shape(last, self.scene):
            small += f", {shape}"
        return _lines([text, small])


def _fold_chains(topo_order: list[Node], keep: set[Node], ids: dict[Node, str]):
    """Chains of ops to draw as one node each: a stack of layers, say. An op continues
    the chain of the one op of the graph it reads when nothing else of the graph reads
    that one but ``keep`` (outputs, the gradients asked for, hanging off the chain).
    Side computations (a tanh's 1 - y * y beside its adjoint) go with the op they feed:
    nodes read once that read nothing else of the graph, numbers written by rules too.
    Returns each folded node's stand-in id (the id of its chain's last node), and the
    side computations among them."""
    part = set(topo_order)
    readers: dict[Node, list[Node]] = {}
    for node in topo_order:
        for x in dict.fromkeys(node.inputs):
            if x in part:
                readers.setdefault(x, []).append(node)
    side: dict[Node, Node] = {}  # a side computation: the node it feeds
    for node in topo_order:
        number = isinstance(node.op, Constant) and node.name == "constant"
        if node in keep or len(readers.get(node, ())) != 1 or (node.op.is_leaf and not number):
            continue
        if all(x in side for x in node.inputs if x in part):
            side[node] = readers[node][0]
    chain_ending_at: dict[Node, list[Node]] = {}
    for node in topo_order:
        if node.op.is_leaf or node in keep or node in side:
            continue
        inner = [x for x in node.inputs if x in part and x not in side and not x.op.is_leaf]
        previous = inner[0] if len(inner) == 1 else None
        if previous is None or previous in keep:
            continue
        if [r for r in readers[previous] if r not in keep] == [node]:
            chain_ending_at[node] = chain_ending_at.pop(previous, [previous]) + [node]
    folded = {}
    for last, chain in chain_ending_at.items():
        if len(chain) >= MIN_RUN:
            for node in chain:
                folded[node] = ids[last]
    for node, host in side.items():  # with the chain of the op it feeds, if folded
        while host in side:
            host = side[host]
        if host in folded:
            folded[node] = folded[host]
    return folded, {node for node in side if node in folded}


def _repeats(names: list[str]) -> str:
    """'(matmul → add → tanh) × 4' for a repeated pattern (an op or two may come before
    or after it), else the first and last ops.

    >>> _repeats(["matmul", "add", "tanh", "matmul", "add", "tanh"])
    '(matmul → add → tanh) × 2'
    >>> _repeats(["add", "multiply", "matmul", "multiply", "matmul", "multiply"])
    'add → (multiply → matmul) × 2 → multiply'
    """
    for ends in range(3):  # ops outside the pattern, fewest first
        for before in range(ends + 1):
            middle = names[before : len(names) - (ends - before)]
            for period in range(1, len(middle) // 2 + 1):
                times = len(middle) // period
                if len(middle) % period == 0 and middle == middle[:period] * times:
                    pattern = f"({' → '.join(middle[:period])}) × {times}"
                    after = names[len(names) - (ends - before) :]
                    return " → ".join([*names[:before], pattern, *after])
    if len(names) <= 4:
        return " → ".join(names)
    return f"{names[0]} → {names[1]} → … → {names[-1]}"
