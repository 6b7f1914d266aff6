"""What a student wrote, shown to the course team as text and pictures, never as code.

The Formgrader shows each submission as a web page in the instructor's browser, and
feedback pages are HTML too. A notebook is the student's file: its Markdown, its
outputs, even its metadata can hold HTML, and HTML can hold script (``<img src=x
onerror=...>``). Script on a Formgrader page runs with the instructor's session: it
could start a kernel in the Formgrader's server. So, in two layers:

* every piece of a notebook that becomes HTML is cleaned with bleach (a maintained
  allow-list sanitiser, the one nbconvert uses): Markdown after it is rendered (so a
  ``javascript:`` link goes too), HTML and LaTeX outputs, raw cells; pictures stay
  pictures (SVG drawings become ``<img>``, which runs no script); everything else that
  a browser would run (JavaScript outputs, widgets) is dropped;
* the Formgrader's submission page carries a Content-Security-Policy that lets run
  only the scripts its own template writes (``formgrader_guard.py``), so a hole in
  the first layer still runs nothing.

The course's ``nbgrader_config.py`` puts both on nbconvert's HTML exporter, which the
Formgrader and ``make feedback`` share.
"""

from __future__ import annotations

import base64
import re

import bleach
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode

TAGS = {
    "a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "div", "dl", "dt", "em",
    "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre",
    "s", "span", "strong", "sub", "sup", "table", "tbody", "td", "th", "thead", "tr", "ul",
}  # fmt: skip
_PLAIN_ATTRIBUTES = {
    "a": {"href", "title"},
    "img": {"src", "alt", "title", "width", "height"},
    "td": {"align", "colspan", "rowspan"},
    "th": {"align", "colspan", "rowspan"},
}
_STYLED = {"span", "div", "code", "pre"}  # a class for highlighting and math, no style
_PICTURE = re.compile(r"data:image/(png|jpeg|gif|svg\+xml);base64,[A-Za-z0-9+/=\s]*\Z")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*\Z")
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}\Z")  # grade ids, cell ids, lexer names
_KEPT_AS_IS = {"text/plain", "application/json"}  # the templates escape them
_CLEANED = {"text/html", "text/markdown", "text/latex"}


def _allowed(tag: str, name: str, value: str) -> bool:
    """bleach's question for every attribute: links to the web, pictures inline only."""
    if tag in _STYLED and name == "class":
        return True
    if name not in _PLAIN_ATTRIBUTES.get(tag, ()):
        return False
    if name == "href":
        return value.startswith(("http://", "https://", "mailto:", "#"))
    if name == "src":  # inline only: a picture from an address is a request in the
        return bool(_PICTURE.match(value))  # grader's name (a logout, a tracker)
    return True


def clean(html: str) -> str:
    """HTML with only text, formatting, links and pictures left: any other tag is
    shown as text, and attributes that can run script are removed.

    >>> clean('<img src=x onerror="alert(1)"><b>bold</b>')
    '<img><b>bold</b>'
    >>> clean('<a href="javascript:alert(1)">link</a><script>x</script>')
    '<a>link</a>&lt;script&gt;x&lt;/script&gt;'
    """
    # bleach lowercases protocols before asking; its own protocol list is not used
    # because ``_allowed`` decides (data: only for pictures, never for links).
    cleaner = bleach.Cleaner(
        tags=TAGS,
        attributes=_allowed,
        protocols={"http", "https", "mailto", "data"},
        strip_comments=True,
    )
    return cleaner.clean(html)


def safe_markdown(source: str) -> str:
    """The Markdown filter of the Formgrader's and feedback's templates: Markdown
    rendered (math kept for MathJax), then cleaned. Cleaning after rendering, not
    before, keeps ``x > 0`` in code as written and still catches what Markdown itself
    makes, such as ``[link](javascript:...)``."""
    return clean(markdown2html_mistune(source))


def svg_as_picture(svg: str) -> str:
    """An SVG drawing (``ad.viz.draw``) as an ``<img>``: a browser draws an image's
    SVG without running any script in it."""
    encoded = base64.b64encode(svg.encode()).decode()
    return f'<img src="data:image/svg+xml;base64,{encoded}">'


class SanitizeNotebook(Preprocessor):
    """nbconvert preprocessor: the outputs, raw cells and metadata of a notebook made
    safe to show as HTML (Markdown cells are cleaned by ``safe_markdown`` as they are
    rendered). Set in ``nbgrader_config.py`` on ``HTMLExporter.preprocessors``."""

    def preprocess(self, nb, resources):
        language = nb.metadata.get("language_info", {}).get("name", "python")
        nb.metadata = {
            key: value for key, value in nb.metadata.items() if key in ("autodiff", "nbgrader")
        }
        nb.metadata["language_info"] = {"name": _name_or(language, "python")}
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        if "id" in cell and not _SAFE_NAME.match(str(cell.id)):
            cell.id = f"cell-{index}"
        grading = cell.metadata.get("nbgrader", {})
        if "grade_id" in grading and not _SAFE_NAME.match(str(grading["grade_id"])):
            grading["grade_id"] = f"cell-{index}"
        cell.pop("attachments", None)  # pictures pasted into Markdown: not shown
        if cell.cell_type == "raw":
            cell.source = bleach.clean(cell.source)
        elif cell.cell_type == "code":
            outputs = [_safe_output(output) for output in cell.get("outputs", [])]
            cell.outputs = [output for output in outputs if output is not None]
        return cell, resources


def _name_or(text, default: str) -> str:
    return text if isinstance(text, str) and _SAFE_NAME.match(text) else default


def _safe_output(output):
    """One output, with only what the templates show safely (None: nothing left)."""
    if output.get("output_type") not in ("display_data", "execute_result"):
        return output  # stream and error: plain text, escaped by the templates
    data, kept = output.get("data", {}), {}
    for mime, value in data.items():
        text = "".join(value) if isinstance(value, list) else value
        if not isinstance(text, str):
            continue
        if mime in _KEPT_AS_IS:
            kept[mime] = text
        elif mime in _CLEANED:
            kept[mime] = clean(text)
        elif mime in ("image/png", "image/jpeg") and _BASE64.match(text):
            kept[mime] = text
        elif mime == "image/svg+xml" and "text/html" not in data:
            kept["text/html"] = svg_as_picture(text)
    if not kept:
        return None
    output.data = NotebookNode(kept)
    output.metadata = NotebookNode()  # sizes would be written into attributes unescaped
    return output
