"""The project's own promises: the two commands, CI calling them, conda matching pip, the
Makefile's targets, what git ignores, and grading in a container."""

import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]


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
