"""Tests that need a part of the system (bubblewrap, Chromium, Node) skip without it,
with the reason printed; under ``CI=true`` the same absence is a failure, so CI never
hides a test by not installing what it needs (``.ci/run`` installs them)."""

import os
import shutil

import pytest


def require(problem: str | None, install: str) -> None:
    """Skip (or, in CI, fail) when ``problem`` says a system part is missing."""
    if problem is None:
        return
    message = f"{problem}; install it with: {install}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run this test: {message}")
    pytest.skip(message)


def chromium():
    """Debian's Chromium driven by Playwright, for a module's ``browser`` fixture to
    ``yield from`` (Playwright's own browser download is not used)."""
    from lab_pages import CHROMIUM_FLAGS

    path = shutil.which("chromium") or shutil.which("chromium-browser")
    require(None if path else "Chromium is not installed", "apt install chromium")
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


def require_dot() -> None:
    """Graphviz's ``dot``: drawings use it when it is on PATH, so its path is tested too."""
    problem = None if shutil.which("dot") else "Graphviz's `dot` is not on PATH"
    require(problem, "apt install graphviz (or brew / conda install graphviz)")
