"""Tests that need a part of the system (bubblewrap, Chromium, Node) skip without it,
with the reason printed; under ``CI=true`` the same absence is a failure, so CI never
hides a test by not installing what it needs (``.ci/run`` installs them)."""

import os

import pytest


def require(problem: str | None, install: str) -> None:
    """Skip (or, in CI, fail) when ``problem`` says a system part is missing."""
    if problem is None:
        return
    message = f"{problem}; install it with: {install}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run this test: {message}")
    pytest.skip(message)
