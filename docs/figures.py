"""The figures of docs/lecturers.md: ``make figures`` (or ``python docs/figures.py``) draws
them again.

Each is drawn by the WebAssembly Graphviz that ``pip install`` brings, so the files are
the same on every machine; ``tests/drawing/test_docs_figures.py`` checks that they still say
what the code draws, and compares the classic figures with golden images.
"""

from __future__ import annotations

import pathlib

import numpy as np

import autodiff as ad
from autodiff import viz

HERE = pathlib.Path(__file__).resolve().parent / "figures"


def classic() -> viz.Drawing:
    """The lecture's classic: f = x**2 y + y + 2 at x = 3, y = 4, and its gradient."""
    x, y = ad.tensor(3.0, name="x"), ad.tensor(4.0, name="y")
    return viz.side_by_side(x**2 * y + y + 2, [x, y], title="x**2*y + y + 2")


def classic_edges() -> viz.Drawing:
    """The same, with the forward values each gradient node reads drawn as links."""
    x, y = ad.tensor(3.0, name="x"), ad.tensor(4.0, name="y")
    return viz.side_by_side(x**2 * y + y + 2, [x, y], reads="edges", title="reads as links")


def mlp() -> viz.Drawing:
    """A 2-layer MLP's training step: ReLU, softmax cross-entropy, gradients of W and b."""
    rng = np.random.default_rng(1)
    x = ad.constant(rng.standard_normal((4, 3)), name="X")
    w1, b1 = ad.tensor(rng.standard_normal((3, 5)), name="W1"), ad.tensor(np.zeros(5), name="b1")
    w2, b2 = ad.tensor(rng.standard_normal((5, 2)), name="W2"), ad.tensor(np.zeros(2), name="b2")
    logits = ad.relu(x @ w1 + b1) @ w2 + b2
    loss = ad.softmax_cross_entropy(logits, ad.constant([0, 1, 1, 0], name="labels"))
    return viz.side_by_side(loss, [w1, b1, w2, b2], title="a 2-layer MLP's training step")


def checkpointed() -> viz.Drawing:
    """Six tanh layers, every second output kept for the backward pass."""
    h = x = ad.Variable("x")
    for _ in range(6):
        h = ad.tanh(h)
    return viz.draw_checkpointed(h.sum(), [x], checkpoint=2)


FIGURES = {"classic": classic, "classic_edges": classic_edges, "mlp": mlp}
FIGURES["checkpointed"] = checkpointed


def main() -> None:
    for name, figure in FIGURES.items():
        drawing = figure()
        drawing.renderer = "wasm"  # the same file on every machine
        print(drawing.save(HERE / f"{name}.svg"))


if __name__ == "__main__":
    main()
