"""A Content-Security-Policy for the Formgrader's submission pages (a Jupyter server
extension, enabled where the Formgrader runs: ``deploy/instructor/``).

A submission page is nbgrader's template around the student's notebook. The notebook
is cleaned first (``sanitize.py``); this is the second layer, for whatever cleaning
missed. The page gets, as the first thing in its ``<head>``, a policy that lets run
only the scripts nbgrader's template itself writes for this page: the page is made
once more around an empty notebook, with the same grader's details, and the hash of
every inline script and event handler in that one is allowed, nothing else. A script
a student smuggled in has no allowed hash, so the browser does not run it.
"""

from __future__ import annotations

import base64
import copy
import hashlib
from html.parser import HTMLParser
from urllib.parse import urlsplit

import nbformat


class _Scripts(HTMLParser):
    """The inline scripts, event handlers and script addresses of a page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.inline: list[str] = []
        self.handlers: list[str] = []
        self.sources: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name.startswith("on") and value is not None:
                self.handlers.append(value)
        if tag == "script":
            source = dict(attrs).get("src")
            if source:
                self.sources.append(source)
            else:
                self._in_script = True
                self.inline.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.inline[-1] += data


def _hash(text: str) -> str:
    digest = hashlib.sha256(text.encode()).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


def policy(trusted_page: str) -> str:
    """The policy that allows the scripts of ``trusted_page`` (and those loaded from
    the same places), and no other script."""
    scripts = _Scripts()
    scripts.feed(trusted_page)
    allowed = ["'self'"]
    for source in scripts.sources:
        parts = urlsplit(source)
        if parts.scheme in ("http", "https"):  # MathJax from its CDN: that folder only
            allowed.append(f"{parts.scheme}://{parts.netloc}{parts.path.rsplit('/', 1)[0]}/")
    hashes = sorted({_hash(text) for text in scripts.inline + scripts.handlers})
    if scripts.handlers:
        allowed.append("'unsafe-hashes'")
    rules = [
        "default-src 'self'",
        "script-src " + " ".join(dict.fromkeys(allowed + hashes)),
        "style-src 'self' 'unsafe-inline' https:",  # nbconvert's inline styles; no script
        "img-src 'self' data: https:",
        "font-src 'self' data: https:",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
    ]
    return "; ".join(rules)


def with_policy(page: str, rules: str) -> str:
    """``page`` with ``rules`` as a ``<meta>`` policy first in its ``<head>`` (a meta
    policy covers what comes after it, which is all of the page)."""
    meta = f'<meta http-equiv="Content-Security-Policy" content="{rules}">'
    start = page.lower().find("<head>")
    if start < 0:
        return meta + page
    start += len("<head>")
    return page[:start] + meta + page[start:]


class GuardedExporter:
    """nbgrader's HTML exporter for submissions, with the policy added to each page."""

    def __init__(self, exporter):
        self.exporter = exporter

    def __getattr__(self, name):
        return getattr(self.exporter, name)

    def from_filename(self, filename, resources=None, **kw):
        page, made = self.exporter.from_filename(filename, resources=copy.deepcopy(resources))
        empty = nbformat.read(filename, as_version=4)
        empty.cells = []
        trusted, _ = self.exporter.from_notebook_node(empty, resources=copy.deepcopy(resources))
        return with_policy(page, policy(trusted)), made


def _jupyter_server_extension_points():
    return [{"module": "classroom.formgrader_guard"}]


def _load_jupyter_server_extension(serverapp) -> None:
    """Wrap the Formgrader's exporter: now, if nbgrader's extension is loaded, else as
    soon as it sets its exporter up (extensions load in an order of the server's)."""
    from nbgrader.server_extensions.formgrader.formgrader import FormgradeExtension

    if _guard(serverapp.web_app.settings, serverapp.log):
        return
    set_up = FormgradeExtension.init_tornado_settings

    def init_tornado_settings(self, webapp):
        set_up(self, webapp)
        _guard(webapp.settings, serverapp.log)

    FormgradeExtension.init_tornado_settings = init_tornado_settings


def _guard(settings: dict, log) -> bool:
    exporter = settings.get("nbgrader_exporter")
    if exporter is None:
        return False
    if not isinstance(exporter, GuardedExporter):
        settings["nbgrader_exporter"] = GuardedExporter(exporter)
        log.info("Formgrader pages carry a Content-Security-Policy")
    return True
