"""The figures of docs/lecturers.md (docs/figures/, drawn by docs/figures.py): still what
the code draws, and, for the classic ones, still looking like their golden images (PNG,
drawn without a system Graphviz), within a tolerance for fonts and antialiasing."""

import importlib.util
import io
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from autodiff import renderer

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "figures"


def figures_module():
    spec = importlib.util.spec_from_file_location("figures", ROOT / "docs" / "figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIGURES = figures_module().FIGURES


def texts(svg: str) -> list[str]:
    """Every text an SVG shows, sorted: what a figure says, whatever its layout."""
    return sorted(re.findall(r"<text[^>]*>([^<]*)</text>", svg))


@pytest.mark.parametrize("name", list(FIGURES))
def test_the_figures_say_what_the_code_draws(name):
    drawing = FIGURES[name]()
    drawing.renderer = "wasm"
    committed = (ROOT / "docs" / "figures" / f"{name}.svg").read_text()
    assert texts(committed) == texts(drawing.svg()), f"docs/figures/{name}.svg: run make figures"
    assert f"(figures/{name}.svg)" in (ROOT / "docs" / "lecturers.md").read_text()


def blocks(png: bytes, size) -> np.ndarray:
    """A picture's colours, averaged over blocks of pixels to ``size`` (width, height)."""
    picture = Image.open(io.BytesIO(png)).convert("RGB")
    return np.asarray(picture.resize(size, Image.Resampling.BOX), dtype=float)


@pytest.mark.parametrize("name", ["classic", "checkpointed"])
def test_the_classic_figures_look_like_their_golden_images(name):
    drawing = FIGURES[name]()
    png = renderer.render(drawing.source, "png", "wasm")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"{name}.png").write_bytes(png)  # for a person to look at
    # The golden image is the picture in blocks of 4 x 4 pixels (small to keep, and
    # forgiving): a font drawn a little differently moves little; missing text, a lost
    # node or another colour moves a lot. (The words are checked above.)
    golden = Image.open(GOLDEN / f"{name}.png")
    width, height = Image.open(io.BytesIO(png)).size
    expected = (golden.width * 4, golden.height * 4)
    assert (width, height) == pytest.approx(expected, rel=0.03), f"{name}: {width} x {height}"
    difference = np.abs(blocks(png, golden.size) - np.asarray(golden, dtype=float))
    assert difference.mean() < 3, f"{name}: mean difference {difference.mean():.1f} of 255"
    assert (difference > 60).mean() < 0.01, f"{name}: {(difference > 60).mean():.1%} differ"


def golden_image(png: bytes) -> Image.Image:
    """What a golden image keeps of a picture (``python tests/drawing/test_docs_figures.py``
    writes them again, after a change meant to change the pictures)."""
    picture = Image.open(io.BytesIO(png))
    return Image.fromarray(blocks(png, (picture.width // 4, picture.height // 4)).astype(np.uint8))


if __name__ == "__main__":
    for name in ["classic", "checkpointed"]:
        png = renderer.render(FIGURES[name]().source, "png", "wasm")
        golden_image(png).save(GOLDEN / f"{name}.png", optimize=True)
