"""The project's own promises: the two commands, CI calling them, conda matching pip."""

import pathlib
import re
import tomllib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_readme_quickstart_starts_with_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1]
    first_block = quickstart.split("```", 2)[1]
    commands = [line.strip() for line in first_block.splitlines()[1:] if line.strip()]
    assert commands == ["make lab", "make test"]


def test_ci_runs_the_readme_test_command():
    script = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", script, re.MULTILINE)


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    environment = (ROOT / "environment.yml").read_text()
    python = project["requires-python"]  # ">=3.11"
    assert f"python{python}" in environment
    for requirement in project["dependencies"]:
        assert requirement in environment, f"{requirement} missing from environment.yml"
    assert "-e .[course]" in environment


def test_makefile_targets_exist():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("lab", "test", "bench"):
        assert re.search(rf"^{target}:", makefile, re.MULTILINE)


def test_generated_paths_are_ignored():
    ignored = (ROOT / ".gitignore").read_text().split()
    for path in (".venv/", "submitted/", "autograded/", "feedback/", "gradebook.db"):
        assert path in ignored


def run_example(page: str, section: str) -> dict:
    """Run the first python code block under ``## section`` of a page; its names."""
    text = (ROOT / page).read_text()
    code = text.split(f"## {section}", 1)[1].split("```python", 1)[1].split("```")[0]
    namespace: dict = {}
    exec(compile(code, f"{page} ({section})", "exec"), namespace)
    return namespace


def test_the_readme_tour_runs():
    namespace = run_example("README.md", "A tour of the API")
    assert float(namespace["dy"].value) == pytest.approx(0.0770037537)
    assert namespace["dw_value"].shape == (3, 2)


def test_the_four_ways_example_runs():
    namespace = run_example("docs/students.md", "The four ways to differentiate")
    assert str(namespace["simple"]) == "2*x*y"
    assert namespace["dual"].value == 42.0 and namespace["dual"].tangent == 24.0
    assert namespace["jac"].tolist() == [24.0, 10.0]
    assert namespace["counter"].passes == 2
    assert [float(g) for g in namespace["grads"]] == [24.0, 10.0]
    swell = namespace["swell"]
    assert swell["derivative"][-1] > 10 * swell["gradient_graph"][-1]


def test_the_training_example_runs():
    namespace = run_example("docs/students.md", "Training")
    assert (
        namespace["nn"].accuracy(namespace["model"], namespace["x_test"], namespace["y_test"])
        > 0.95
    )
    assert len(namespace["history"].epoch_loss) == 10


def test_the_memory_example_runs(capsys):
    namespace = run_example("docs/system.md", "Memory: planning, checkpointing, parallel levels")
    assert namespace["plain"].peak_bytes > 9 * namespace["planned"].peak_bytes
    assert "in place over step" in capsys.readouterr().out
    plain_value = namespace["ad"].evaluate(namespace["dx"], namespace["feed"])
    assert np.array_equal(namespace["grad"], plain_value)


def test_the_fusion_example_runs(capsys):
    namespace = run_example("docs/system.md", "Kernel fusion")
    report = namespace["report"]
    assert (report.nodes_before, report.nodes_after) == (27, 9)
    assert "2 groups of 18 ops" in capsys.readouterr().out
    ad, x = namespace["ad"], namespace["x"]
    feed = {x: np.linspace(-1, 1, 1000, dtype="float32")}
    plain = ad.Executor(namespace["outputs"]).run(feed)
    for got, want in zip([namespace["value"], namespace["dx"]], plain, strict=True):
        assert got.dtype == np.float32 and np.array_equal(got, want)
    assert namespace["tanh_grad"](2.0, 0.5).op.name == "fused"


def test_grading_in_a_container_is_the_same_grading_with_bubblewrap():
    """Without bubblewrap (macOS): `make autograde-container` builds an image with
    bubblewrap and the kit and runs the same autograde command in it, the course mounted."""
    dockerfile = (ROOT / "deploy" / "grading.Dockerfile").read_text()
    assert "bubblewrap" in dockerfile and 'pip install --no-cache-dir ".[course]"' in dockerfile
    assert "COPY autodiff ./autodiff\nCOPY classroom ./classroom\n" in dockerfile
    assert 'ENTRYPOINT ["python", "-m", "classroom"]' in dockerfile
    import subprocess

    printed = subprocess.run(
        ["make", "-n", "autograde-container", "ENGINE=podman", "ASSIGNMENT=a1", "JOBS=3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "podman build -t autodiff-grading -f deploy/grading.Dockerfile ." in printed
    run = next(line for line in printed.splitlines() if "podman run" in line)
    assert f'-v "{ROOT}":/course autodiff-grading autograde a1' in run
    assert "seccomp=unconfined" in run  # bubblewrap needs user namespaces in there
    assert "--jobs 3" in printed
