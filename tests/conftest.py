"""Shared test settings: hypothesis profiles (CI is derandomised, so a run is repeatable),
and, with ``AUTODIFF_FAKE_GPU=1``, a CuPy double in place of CuPy (fakecupy.py), so that
``pytest -m gpu`` runs the GPU tests' code paths on a machine without a GPU."""

import os
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=30,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=30)
settings.register_profile("thorough", deadline=None, max_examples=300)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

# Tests release into temporary courses, whose nbgrader_config.py would publish to the
# exchange NBGRADER_EXCHANGE names: never a real class's (each test names its own).
os.environ.pop("NBGRADER_EXCHANGE", None)

if os.environ.get("AUTODIFF_FAKE_GPU") == "1":
    import fakecupy

    sys.modules["cupy"] = fakecupy


@pytest.fixture(scope="session")
def released_course(tmp_path_factory):
    """A copy of the course (its solutions, nbgrader_config.py) released once, with its
    own gradebook and exchange: the graded tests submit into it, each student their own."""
    from classroom import pipeline

    root = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", root)
    shutil.copytree(ROOT / "solutions", root / "solutions")
    pipeline.release(root)
    return root
