"""The notebooks: every lecture runs top to bottom, and every notebook is stored clean.

Running a lecture starts a Jupyter kernel and takes seconds, so those tests carry the
``notebooks`` marker: ``pytest -m notebooks`` runs only them, ``pytest -m "not
notebooks"`` leaves them out. The checks on stored notebooks are fast and unmarked.
"""

import os
import pathlib
import re

import pytest

from strategies import requires_gpu

ROOT = pathlib.Path(__file__).resolve().parents[2]
COURSE = ROOT / "course"
LECTURES = sorted(COURSE.glob("*.ipynb"))
EXPECTED_LECTURES = [
    "01_computation_graphs",
    "02_four_ways_to_differentiate",
    "03_reverse_mode_autodiff",
    "04_training_on_the_gpu",
    "05_system_components",
]
# Every notebook committed to the course, the nbgrader source and the release.
STORED = sorted(
    path
    for folder in ("course", "solutions", "assignments")
    for path in (ROOT / folder).rglob("*.ipynb")
    if ".ipynb_checkpoints" not in path.parts
)
# Made by running things, never by a notebook: left out of the leftover-file check.
SKIP_DIRS = {
    ".git",
    ".venv",
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
    ".ruff_cache",
    ".mypy_cache",
    ".ipynb_checkpoints",
}
CELL_TIMEOUT = 120  # seconds per cell


def relative(path):
    return str(path.relative_to(ROOT))


def repository_files():
    found = set()
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        found.update(pathlib.Path(folder, name) for name in files)
    return found


def failing_cell(notebook):
    """'cell 7:' with its source and error, for the first cell whose output is an error."""
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                return (
                    f"cell {index}:\n{cell.source}\n\n{output.get('ename')}: {output.get('evalue')}"
                )
    return None


def test_every_lecture_exists():
    assert [path.stem for path in LECTURES] == EXPECTED_LECTURES


def run_notebook(path, first_cell=None):
    """Run a notebook in a fresh kernel and return it with its outputs; fail the test,
    naming the cell, if a cell raises, runs over time or writes into the repository.
    ``first_cell``: code run before the notebook's own cells."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(path, as_version=4)
    if first_cell:
        notebook.cells.insert(0, nbformat.v4.new_code_cell(first_cell))
    before = repository_files()
    client = nbclient.NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(COURSE)}},  # the kernel's working directory
    )
    failure = None
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as error:
        failure = f"{path.name} failed in {failing_cell(notebook) or error}"
    except nbclient.exceptions.CellTimeoutError as error:
        failure = f"{path.name}: a cell ran over {CELL_TIMEOUT} s:\n{error}"
    if failure:  # failed outside the except block: no chained traceback to read past
        pytest.fail(failure, pytrace=False)
    left_behind = sorted(relative(p) for p in repository_files() - before)
    assert not left_behind, (
        f"{path.name} wrote files into the repository: {left_behind}. "
        f"Write figures for slides to a temporary directory instead."
    )
    return notebook


@pytest.mark.notebooks
@pytest.mark.parametrize("path", LECTURES, ids=lambda path: path.stem)
def test_lecture_runs_top_to_bottom(path):
    run_notebook(path)


def gpu_first_cell() -> str | None:
    """On the CuPy double (AUTODIFF_FAKE_GPU=1), code that gives the kernel the double as
    ``cupy``; on a real GPU, nothing."""
    if os.environ.get("AUTODIFF_FAKE_GPU") != "1":
        return None
    shared = str(pathlib.Path(__file__).parents[1] / "shared")
    return (
        f"import sys\nsys.path.insert(0, {shared!r})\n"
        "import fakecupy\nsys.modules['cupy'] = fakecupy"
    )


def printed(notebook) -> str:
    """What the notebook's code cells printed or showed as text or Markdown."""
    outputs = [
        output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    ]
    return "\n".join(
        str(output.get("text", "")) + str(output.get("data", {}).get("text/markdown", ""))
        for output in outputs
    )


@pytest.mark.notebooks
@requires_gpu
def test_assignment_6_trains_its_network_on_the_gpu_when_there_is_one():
    """a6's instructor notebook, hidden tests included, with the network on the GPU."""
    solution = ROOT / "solutions" / "a6_convolution" / "a6_convolution.ipynb"
    text = printed(run_notebook(solution, gpu_first_cell()))
    assert "DEVICE = 'gpu'" in text and "No GPU" not in text


@pytest.mark.notebooks
@requires_gpu
def test_lecture_4_shows_the_gpu_when_there_is_one():
    """The GPU branches of lecture 4: the memory-pool plot, the CPU vs GPU table and the
    CNN trained on the GPU. On
    the CuPy double (AUTODIFF_FAKE_GPU=1) the kernel is given the double as ``cupy``."""
    notebook = run_notebook(COURSE / "04_training_on_the_gpu.ipynb", gpu_first_cell())
    text = printed(notebook)
    assert "'gpu'" in text and "No GPU" not in text
    table = re.findall(r"\| (\d+) \| [\d.]+ \| [\d.]+ \| [\d.]+x \|", text)
    assert table == ["16", "64", "256", "512", "1024", "2048", "4096"]
    assert re.search(r"\| GPU \| \d+ \| \d+ \|", text), "the CNN's GPU row is missing"
    captured = re.findall(r"\| (\d+) \| [\d.]+ ms \| [\d.]+ ms \| [\d.]+x \|", text)
    assert captured == ["64", "512", "4096"], "the compiled vs captured table"
    assert "replay(s)" in text and "not captured" not in text, "the capture report"
    pool_plot = [c for c in notebook.cells if c.cell_type == "code" and "memory_info()" in c.source]
    assert pool_plot and any("image/png" in o.get("data", {}) for o in pool_plot[0].outputs)


@pytest.mark.parametrize("path", STORED, ids=relative)
def test_notebook_is_stored_without_outputs(path):
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(path, as_version=4)
    kernel = notebook.metadata.get("kernelspec", {}).get("name")
    assert kernel == "python3", f"{relative(path)}: kernelspec {kernel!r}, not 'python3'"
    assert "widgets" not in notebook.metadata, f"{relative(path)}: saved widget state"
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        where = f"{relative(path)}, cell {index}"
        assert not cell.outputs, f"{where} has outputs: clear them before committing"
        assert cell.execution_count is None, f"{where} has an execution count"


@pytest.mark.parametrize("path", LECTURES, ids=lambda path: path.stem)
def test_lecture_code_lines_are_short(path):
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(path, as_version=4)
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            for line in cell.source.splitlines():
                assert len(line) <= 80, f"{path.name}, cell {index}: {line!r}"


def test_readme_lists_every_lecture():
    readme = (ROOT / "README.md").read_text()
    assert "## Lectures" in readme, "README.md needs a '## Lectures' section"
    section = readme.split("## Lectures", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"course/([\w-]+\.ipynb)", section)
    for path in LECTURES:
        assert listed.count(path.name) == 1, f"README's Lectures should list {path.name} once"
    missing = sorted(name for name in listed if not (COURSE / name).exists())
    assert not missing, f"README's Lectures section lists notebooks that do not exist: {missing}"
