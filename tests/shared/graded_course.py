"""What the graded-assignment tests share (test_assignments.py, test_wrong_answers.py):
the notebooks' paths, their cells by grade id, the points of their tests, and a
submission made from the release and the instructor's answers."""

from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]


def notebook_path(folder: Path, assignment: str) -> Path:
    return folder / assignment / f"{assignment}.ipynb"


def solution(assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(notebook_path(ROOT / "solutions", assignment), as_version=4)


def cells_by_id(notebook) -> dict[str, nbformat.NotebookNode]:
    return {
        cell.metadata["nbgrader"]["grade_id"]: cell
        for cell in notebook.cells
        if "grade_id" in cell.metadata.get("nbgrader", {})
    }


def answers(notebook) -> dict[str, nbformat.NotebookNode]:
    """The answer cells students write code in."""
    return {
        grade_id: cell
        for grade_id, cell in cells_by_id(notebook).items()
        if cell.metadata.nbgrader.get("solution") and cell.cell_type == "code"
    }


def test_points(assignment: str) -> dict[str, float]:
    """The autograded points of each test cell."""
    return {
        grade_id: cell.metadata.nbgrader["points"]
        for grade_id, cell in cells_by_id(solution(assignment)).items()
        if cell.metadata.nbgrader.get("grade") and cell.cell_type == "code"
    }


test_points.__test__ = False  # a helper, not a test


def submission(
    course: Path, assignment: str, blank: list[str] = (), edit: dict | None = None
) -> str:
    """The released notebook with the instructor's answers filled in, except those in
    ``blank``, and ``edit`` (``cell``, ``old``, ``new``) made in one of them."""
    release = nbformat.read(notebook_path(course / "assignments", assignment), as_version=4)
    model = answers(solution(assignment))
    assert set(blank) <= set(model), f"unknown answer cells {blank}"
    for grade_id, cell in answers(release).items():
        if grade_id not in blank:
            cell.source = model[grade_id].source
            if edit is not None and grade_id == edit["cell"]:
                cell.source = cell.source.replace(edit["old"], edit["new"])
    return nbformat.writes(release)
