"""The code reads one way: ruff's lint rules and formatter, and mypy on the packages
(STYLE.md, point 13)."""

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PATHS = ["autodiff", "classroom", "tests", "benchmarks"]


def tool(name, *args):
    executable = shutil.which(name, path=str(pathlib.Path(sys.executable).parent))
    if executable is None:
        pytest.skip(f"{name} is not installed (it comes with the dev extra: pip install -e .[dev])")
    return subprocess.run([executable, *args], cwd=ROOT, capture_output=True, text=True)


def ruff(*args):
    return tool("ruff", *args, *PATHS)


def test_ruff_check_is_clean():
    result = ruff("check", "--output-format", "concise")
    assert result.returncode == 0, result.stdout + result.stderr


def test_code_is_ruff_formatted():
    result = ruff("format", "--check")
    assert result.returncode == 0, "run `make format`:\n" + result.stdout


def test_the_package_type_checks():
    result = tool("mypy")  # settings in pyproject.toml: both packages
    assert result.returncode == 0, result.stdout + result.stderr
