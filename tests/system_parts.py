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


def require_dot() -> None:
    """Graphviz's ``dot``: drawings use it when it is on PATH, so its path is tested too."""
    problem = None if shutil.which("dot") else "Graphviz's `dot` is not on PATH"
    require(problem, "apt install graphviz (or brew / conda install graphviz)")
