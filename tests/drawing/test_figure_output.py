"""Figures for slides: PNG and PDF without a system Graphviz, PNG at a scale, the reverse
pass as one PDF or an animated GIF, and messages in the command line's own words.

Checked on the files written (PNG header, PDF pages, GIF frames), never on time. The
files are kept in tests/artifacts/figures/ (git-ignored) for a person to look at."""

import io
import re
import shutil
import struct
import sys
from pathlib import Path

import pypdf
import pytest
from PIL import Image
from system_parts import require_dot

import autodiff as ad
from autodiff import renderer, viz
from autodiff.__main__ import main

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "figures"


@pytest.fixture
def folder(request):
    """A folder of this test's own under tests/artifacts/figures/, emptied first."""
    path = ARTIFACTS / request.node.name.replace("[", "-").rstrip("]")
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


@pytest.fixture
def no_dot(monkeypatch, tmp_path):
    """PATH without Graphviz's `dot`, as after a plain pip install."""
    monkeypatch.setenv("PATH", str(tmp_path))
    assert renderer.choose() == "wasm"


@pytest.fixture
def classic():
    x, y = ad.tensor(3.0, name="x"), ad.tensor(4.0, name="y")
    return x**2 * y + y + 2, [x, y]


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height in pixels, from the PNG's IHDR chunk."""
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def pages(path: Path) -> list[str]:
    """The text of each page of a PDF."""
    return [page.extract_text() for page in pypdf.PdfReader(path).pages]


def svg_width_in_points(svg: str) -> float:
    return float(svg.split('width="', 1)[1].split("pt", 1)[0])


# PNG and PDF without `dot` ----------------------------------------------------------------


def test_png_and_pdf_without_dot(no_dot, classic, folder):
    drawing = viz.side_by_side(*classic)
    png = drawing.save(folder / "classic.png").read_bytes()
    width, _ = png_size(png)
    # scale 1 is 96 pixels per inch, as `dot -Tpng` draws: 4/3 of a pixel per point
    assert width == pytest.approx(svg_width_in_points(drawing.svg()) * 96 / 72, abs=2)
    pdf = drawing.save(folder / "classic.pdf")
    assert pdf.read_bytes().startswith(b"%PDF")
    (text,) = pages(pdf)
    assert "adjoint of x" in text and "= 24" in text  # letters, not a picture of them


def test_text_is_drawn_without_fonts_named_as_graphviz_names_them():
    # Graphviz writes font-family="Helvetica,sans-Serif"; a converter that did not
    # find the font would leave the picture blank.
    source = 'digraph { a [label="adjoint of x", shape=plaintext, fontname="Helvetica"] }'
    png = renderer.render(source, "png", renderer="wasm")
    picture = Image.open(io.BytesIO(png)).convert("L")
    assert picture.point(lambda v: 255 if v < 128 else 0).getbbox() is not None


def test_render_without_the_converter_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "vl_convert", None)
    with pytest.raises(renderer.RendererError, match="pip install vl-convert-python"):
        renderer.render("digraph { a }", "png", renderer="wasm")


# Scale ------------------------------------------------------------------------------------


@pytest.mark.parametrize("renderer_name", ["wasm", "dot"])
def test_scale_2_doubles_a_png(classic, folder, renderer_name):
    if renderer_name == "dot":
        require_dot()
    drawing = viz.side_by_side(*classic)
    drawing.renderer = renderer_name
    one = png_size(drawing.save(folder / "scale-1.png").read_bytes())
    two = png_size(drawing.save(folder / "scale-2.png", scale=2).read_bytes())
    print(f"{renderer_name}: {one} at scale 1, {two} at scale 2")
    assert 600 <= one[0] <= 900  # (a lecture graph at 96 pixels per inch)
    assert two[0] == pytest.approx(2 * one[0], abs=2)
    assert two[1] == pytest.approx(2 * one[1], abs=2)


@pytest.mark.parametrize("suffix", ["svg", "pdf", "dot"])
def test_scale_is_for_pictures_only(classic, tmp_path, suffix):
    drawing = viz.side_by_side(*classic)
    with pytest.raises(ValueError, match=r"scale=2 enlarges PNG and GIF pictures only"):
        drawing.save(tmp_path / f"f.{suffix}", scale=2)
    assert list(tmp_path.iterdir()) == []
    drawing.save(tmp_path / f"f.{suffix}", scale=1)


@pytest.mark.parametrize("scale", [0, -1, "2", True])
def test_scale_must_be_a_positive_number(classic, tmp_path, scale):
    with pytest.raises(ValueError, match=r"scale must be a positive number, e\.g\. 2"):
        viz.side_by_side(*classic).save(tmp_path / "f.png", scale=scale)


# The reverse pass as one PDF or one GIF ---------------------------------------------------


def test_steps_as_one_pdf_a_page_each(no_dot, classic, folder):
    steps = viz.backward_steps(*classic)
    assert steps.save(folder / "steps.pdf") == [folder / "steps.pdf"]
    texts = pages(folder / "steps.pdf")
    assert len(texts) == len(steps) == 6
    for k, text in enumerate(texts, start=1):
        assert f"step {k} of 6" in text


def test_steps_as_an_animated_gif(no_dot, classic, folder):
    steps = viz.backward_steps(*classic)
    assert steps.save(folder / "steps.gif", scale=2) == [folder / "steps.gif"]
    gif = Image.open(folder / "steps.gif")
    assert gif.n_frames == len(steps) == 6
    assert gif.info["loop"] == 0 and gif.info["duration"] == 1500
    # Labels may change the layout from step to step: the largest picture sets the size.
    sizes = [png_size(path.read_bytes()) for path in steps.save(folder / "step.png")]
    assert gif.width == pytest.approx(2 * max(width for width, _ in sizes), abs=2)
    assert gif.height == pytest.approx(2 * max(height for _, height in sizes), abs=2)


def test_gif_frames_are_padded_to_the_largest():
    small = renderer.render("digraph { a }", "png", renderer="wasm")
    large = renderer.render("digraph { a -> b -> c; a -> c }", "png", renderer="wasm")
    gif = Image.open(io.BytesIO(renderer.animate([small, large, small])))
    assert gif.n_frames == 3
    (small_width, small_height), (large_width, large_height) = png_size(small), png_size(large)
    assert gif.size == (max(small_width, large_width), max(small_height, large_height))


def test_steps_in_other_formats_are_one_file_each(no_dot, classic, tmp_path):
    steps = viz.backward_steps(*classic)
    ones = steps.save(tmp_path / "one.png")
    twos = steps.save(tmp_path / "two.png", scale=2)
    assert [p.name for p in twos] == [f"two-0{i}.png" for i in range(1, 7)]
    for one, two in zip(ones, twos, strict=True):
        width, _ = png_size(one.read_bytes())
        assert png_size(two.read_bytes())[0] == pytest.approx(2 * width, abs=2)
    with pytest.raises(ValueError, match="scale=2 enlarges PNG and GIF pictures only"):
        steps.save(tmp_path / "steps.pdf", scale=2)


def test_steps_with_dot(classic, folder):
    require_dot()
    steps = viz.backward_steps(*classic)
    for drawing in steps:
        drawing.renderer = "dot"
    assert len(pages(steps.save(folder / "steps.pdf")[0])) == 6
    assert Image.open(steps.save(folder / "steps.gif")[0]).n_frames == 6


# The command line -------------------------------------------------------------------------


def render(capsys, *args):
    status = main(["render", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_png_at_scale_2_without_dot(no_dot, capsys, folder):
    widths = []
    for scale in ("1", "2"):
        target = folder / f"scale-{scale}.png"
        status, out, err = render(capsys, "x*y + sin(x)", "--scale", scale, "-o", str(target))
        assert (status, out.strip(), err) == (0, str(target), "")
        widths.append(png_size(target.read_bytes())[0])
    assert widths[1] == pytest.approx(2 * widths[0], abs=2)


@pytest.mark.parametrize("suffix", ["pdf", "gif"])
def test_cli_steps_in_one_file(no_dot, capsys, folder, suffix):
    target = folder / f"steps.{suffix}"
    status, out, err = render(capsys, "x*sin(x)", "--mode", "steps", "-o", str(target))
    assert (status, out.split(), err) == (0, [str(target)], "")
    if suffix == "pdf":
        assert len(pages(target)) == 3
    else:
        assert Image.open(target).n_frames == 3


# Each message: the flag from the command line, Python's argument from Python.
TOO_BIG = ["x*y", "--max-nodes", "3"]
MESSAGES = [
    (["x*y", "--renderer", "dot", "-o", "f.svg"], 1, r"--renderer dot but `dot` is not on PATH"),
    (["x*y", "--renderer", "dot", "-o", "f.svg"], 1, r"or use --renderer auto, which draws"),
    (["x*y", "--scale", "2", "-o", "f.pdf"], 2, r"save as \.png for --scale 2\."),
    ([*TOO_BIG, "-o", "f.svg"], 1, r"more than --max-nodes 3\. Pass --max-nodes \d+ to"),
    ([*TOO_BIG, "-o", "f.svg"], 1, r"or pass --collapse to fold chains"),
    ([*TOO_BIG, "--collapse", "-o", "f.svg"], 1, r"even with --collapse"),
    (["x*y", "-o", "f.gif"], 2, r"a GIF animates the steps: add --mode steps"),
    (["x*y", "-o", "f.jpg"], 2, r"\.svg, \.png, \.pdf or \.dot \(\.gif with --mode steps\)"),
]


@pytest.mark.parametrize("args, status, message", MESSAGES)
def test_cli_messages_name_flags(no_dot, capsys, tmp_path, args, status, message):
    *args, target = args
    code, out, err = render(capsys, *args, str(tmp_path / target))
    assert (code, out) == (status, "")
    assert err.startswith("error: ") and re.search(message, err)
    for python in ("renderer=", "scale=", "max_nodes=", "collapse="):
        assert python not in err
    assert list(tmp_path.iterdir()) == []


def test_cli_scale_that_is_not_a_number(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["render", "x*y", "--scale", "big", "-o", "f.png"])
    assert exit.value.code == 2
    assert "argument --scale: 'big' is not a positive number" in capsys.readouterr().err


def test_python_messages_keep_python_arguments(no_dot, classic, tmp_path):
    drawing = viz.side_by_side(*classic)
    drawing.renderer = "dot"
    with pytest.raises(renderer.RendererError, match="renderer='dot' but `dot` is not on PATH"):
        drawing.save(tmp_path / "f.png")
    with pytest.raises(ValueError, match=r"save as \.png for scale=2\."):
        viz.side_by_side(*classic).save(tmp_path / "f.pdf", scale=2)
    with pytest.raises(viz.GraphTooLarge, match=r"Pass max_nodes=\d+ .* collapse=True"):
        viz.side_by_side(*classic, max_nodes=3)


@pytest.mark.parametrize("scale", [float("inf"), float("nan")])
def test_a_scale_that_is_not_a_finite_number_is_refused(scale, tmp_path, capsys):
    with pytest.raises(ValueError, match="scale must be a positive number"):
        renderer.check_scale("png", scale)
    x = ad.tensor(2.0, name="x")
    with pytest.raises(ValueError, match="scale must be a positive number"):
        viz.draw(x * x).save(tmp_path / "f.png", scale=scale)
    with pytest.raises(SystemExit) as refused:  # (argparse: usage, then status 2)
        main(["render", "x*x", "-o", str(tmp_path / "g.png"), "--scale", str(scale)])
    assert refused.value.code == 2 and not (tmp_path / "g.png").exists()
    assert "not a positive number" in capsys.readouterr().err


def test_dot_drawing_nothing_is_an_error_not_an_empty_file():
    require_dot()
    with pytest.raises(renderer.RendererError, match="drew nothing"):
        renderer.render("digraph { a -> b }", "png", "dot", scale=1e-9)
