"""Student content on staff pages: the Formgrader's submission page and feedback show a
hostile notebook as text and pictures (``classroom/sanitize.py``), and the page's
Content-Security-Policy runs no script the template did not write, even when the
cleaning is switched off (``formgrader_guard.py``), checked in a real browser."""

import base64
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from nbconvert.exporters import HTMLExporter
from nbgrader.server_extensions.formgrader import handlers
from system_parts import chromium
from traitlets.config import Config, PyFileConfigLoader

from classroom.formgrader_guard import GuardedExporter, policy
from classroom.sanitize import clean, safe_markdown

ROOT = Path(__file__).resolve().parents[2]
PWN = "window.__pwned = (window.__pwned || 0) + 1"
ATTACKS = {
    "markdown image": f"<img src=x onerror='{PWN}'>",
    "markdown script": f"<script>{PWN}</script>",
    "markdown link": "[click](javascript:window.__pwned=1)",
    "markdown svg": f"<svg><script>{PWN}</script></svg>",
    "markdown iframe": f'<iframe srcdoc="<script>parent.{PWN}</script>"></iframe>',
    "markdown closing": f"</div></div></body><script>{PWN}</script>",
}


def hostile_notebook() -> nbformat.NotebookNode:
    """Every place of a notebook where a student can put HTML."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["title"] = f"</title><script>{PWN}</script>"
    nb.cells = [nbformat.v4.new_markdown_cell(text) for text in ATTACKS.values()]
    code = nbformat.v4.new_code_cell("x = 1")
    svg = f'<svg xmlns="http://www.w3.org/2000/svg"><script>{PWN}</script><circle r="4"/></svg>'
    code.outputs = [
        nbformat.v4.new_output("display_data", {"text/html": f"<img src=x onerror='{PWN}'>"}),
        nbformat.v4.new_output("display_data", {"application/javascript": PWN}),
        nbformat.v4.new_output("display_data", {"image/svg+xml": svg}),
        nbformat.v4.new_output("display_data", {"text/latex": f"<img src=x onerror='{PWN}'>"}),
        nbformat.v4.new_output("display_data", {"image/png": f'"><script>{PWN}</script>'}),
        nbformat.v4.new_output(
            "display_data",
            {"image/png": base64.b64encode(b"\x89PNG").decode()},
            metadata={"image/png": {"width": f'1 onerror="{PWN}"'}},
        ),
        nbformat.v4.new_output("stream", text=f"<script>{PWN}</script>"),
    ]
    code.metadata["nbgrader"] = {"grade_id": f'x"><script>{PWN}</script>', "grade": False}
    raw = nbformat.v4.new_raw_cell(f"<script>{PWN}</script>")
    raw.metadata["format"] = "text/html"
    nb.cells += [code, raw, nbformat.v4.new_markdown_cell("`x > 0` and $a < b$")]
    return nb


def course_config(sanitize: bool = True) -> Config:
    """The HTML exporter's settings as the course's nbgrader_config.py gives them, with
    the Formgrader's template; ``sanitize=False`` leaves the policy as the only layer."""
    loaded = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    config = Config()
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    if sanitize:
        config.HTMLExporter.preprocessors = loaded.HTMLExporter.preprocessors
        config.HTMLExporter.filters = loaded.HTMLExporter.filters
    return config


RESOURCES = {
    "assignment_id": "a1",
    "notebook_id": "a1",
    "submission_id": "abc123",
    "index": 0,
    "total": 1,
    "base_url": "",
    "student": "mallory",
    "last_name": "M",
    "first_name": "Mallory",
    "notebook_path": "autograded/mallory/a1/a1.ipynb",
}


def formgrader_page(tmp_path: Path, sanitize: bool = True) -> str:
    path = tmp_path / "a1.ipynb"
    nbformat.write(hostile_notebook(), path)
    exporter = GuardedExporter(HTMLExporter(config=course_config(sanitize)))
    page, _ = exporter.from_filename(str(path), resources=dict(RESOURCES))
    return page


class _Elements(HTMLParser):
    """What in a page a browser could run: script-like elements, event handlers,
    ``javascript:`` addresses."""

    def __init__(self):
        super().__init__()
        self.problems: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "iframe", "svg", "object", "embed"):
            self.problems.append(f"<{tag}>")
        for name, value in attrs:
            if name.startswith("on") or "javascript:" in (value or "").lower():
                self.problems.append(f"<{tag} {name}={value!r}>")


def runnable(html: str) -> list[str]:
    elements = _Elements()
    elements.feed(html)
    return elements.problems


def test_clean_keeps_formatting_and_drops_what_runs():
    assert clean("<b>bold</b> <i>it</i> <code>x</code>") == "<b>bold</b> <i>it</i> <code>x</code>"
    for hostile in ATTACKS.values():
        cleaned = safe_markdown(hostile)
        assert not runnable(cleaned), f"{hostile!r} became {cleaned!r}"
    assert "<code>x &gt; 0</code>" in safe_markdown("`x > 0`")  # shown as written
    picture = '<img src="data:image/png;base64,iVBORw0KGgo=">'
    assert clean(picture) == picture
    assert clean('<a href="data:text/html,hi">x</a>') == "<a>x</a>"
    assert clean('<img src="https://hub.example/hub/logout">') == "<img>"


def test_the_formgrader_page_shows_a_hostile_notebook_as_text(tmp_path):
    page = formgrader_page(tmp_path)
    empty = tmp_path / "empty.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), empty)
    exporter = HTMLExporter(config=course_config())
    template, _ = exporter.from_filename(str(empty), resources=dict(RESOURCES))
    extra = runnable(page)
    for found in runnable(template):  # the template's own scripts and handlers
        extra.remove(found)
    assert not extra, f"reached the page: {extra}"
    body = page.split("</head>", 1)[1]
    assert "data:image/svg+xml;base64," in body  # the drawing, as a picture
    assert "<code>x &gt; 0</code>" in body  # shown as written


@pytest.fixture(scope="module")
def browser():
    yield from chromium()


def run_in_browser(browser, page_html: str) -> tuple[int, list[str]]:
    """How often the student's script ran on the page, and the policy's refusals."""
    context = browser.new_context()
    tab = context.new_page()
    refused: list[str] = []
    tab.on("console", lambda m: refused.append(m.text) if "Content Security" in m.text else None)
    tab.route("**/*", lambda route: route.fulfill(status=404, body=""))  # no network
    tab.set_content(page_html, wait_until="load")
    tab.wait_for_timeout(300)
    ran = tab.evaluate("window.__pwned || 0")
    template_ran = tab.evaluate("typeof toggle_name === 'function'")
    context.close()
    assert template_ran, "the template's own inline script did not run"
    return ran, refused


@pytest.mark.parametrize("sanitize", [True, False], ids=["cleaned", "policy-only"])
def test_no_student_script_runs_on_the_formgrader_page(tmp_path, browser, sanitize):
    """With cleaning and the policy, and with the policy alone (as if the cleaning had
    a hole): the template's scripts run, the student's never do."""
    ran, refused = run_in_browser(browser, formgrader_page(tmp_path, sanitize))
    assert ran == 0, f"the student's script ran {ran} times on the Formgrader page"
    if not sanitize:
        assert refused, "the page ran no student script, but the policy refused none"


def test_the_policy_allows_exactly_the_templates_scripts():
    trusted = '<head><script>var a = 1;</script></head><span onclick="go()"></span>'
    rules = policy(trusted)
    assert "'unsafe-hashes'" in rules
    assert rules.count("'sha256-") == 2, rules
    assert "'unsafe-inline'" not in rules.split("script-src", 1)[1].split(";")[0]
