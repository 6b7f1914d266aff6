"""The wrong answers of tests/course/wrong_answers/, graded through the real pipeline.

Each ``tests/course/wrong_answers/<assignment>.toml`` lists plausible wrong answers, each a
small edit of one instructor answer (``cell``: the answer cell's grade id; ``old`` ->
``new``: text replaced once), the test cells that must lose their points (``tests``)
and whether a visible test catches it (``caught = "visible"``, so the student sees the
failure before submitting) or only a hidden one (``"hidden"``). Every wrong answer is
submitted as a student of its own and autograded (sandbox, nbgrader, gradebook) as a
class is: its score must be the full autograded points less exactly those cells'.

A test cell fails visibly when no frame of its error's traceback is in its
``_hidden_test()`` function (each hidden part is one). ``solutions/README.md`` holds
the same table (the last test checks it is in step; its failure prints the table).
"""

import re
import tomllib
from pathlib import Path

import nbformat
import pytest
from graded_course import ROOT, cells_by_id, notebook_path, solution, submission, test_points

from classroom import autograde as grader
from classroom import course as course_dir

pytest.importorskip("nbgrader")
FOLDER = Path(__file__).resolve().parent / "wrong_answers"
ASSIGNMENTS = sorted(p.stem for p in FOLDER.glob("*.toml"))
CAUGHT = ("visible", "hidden")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A frame of the hidden part in IPython's traceback: "Cell In[7], line 40, in _hidden_test()"
# (its source lines, also shown around a failing visible line, do not match).
HIDDEN_FRAME = re.compile(r"line \d+, in _hidden_test\(")


def wrong_answers(assignment: str) -> list[dict]:
    return tomllib.loads((FOLDER / f"{assignment}.toml").read_text())["wrong"]


def test_every_assignment_has_its_wrong_answers():
    assert ASSIGNMENTS == course_dir.assignments(ROOT)
    for assignment in ASSIGNMENTS:
        entries = wrong_answers(assignment)
        assert len(entries) >= 8, f"{assignment}: {len(entries)} wrong answers, want 8 or more"
        cells = cells_by_id(solution(assignment))
        for entry in entries:
            assert set(entry) == {"mistake", "cell", "old", "new", "tests", "caught"}, entry
            assert entry["caught"] in CAUGHT, entry["mistake"]
            cell = cells.get(entry["cell"])
            assert cell is not None and cell.metadata.nbgrader.get("solution"), entry["cell"]
            assert cell.source.count(entry["old"]) == 1, f"stale edit: {entry['mistake']}"
            for test in entry["tests"]:
                assert cells[test].metadata.nbgrader.get("grade"), test


@pytest.fixture(scope="module")
def graded(released_course):
    """Every wrong answer autograded: {(assignment, index): (outcome, autograded notebook)}."""
    course, results = released_course, {}
    for assignment in ASSIGNMENTS:
        for index, entry in enumerate(wrong_answers(assignment)):
            folder = course / "submitted" / f"wrong{index:02d}" / assignment
            folder.mkdir(parents=True)
            text = submission(course, assignment, edit=entry)
            (folder / f"{assignment}.ipynb").write_text(text)
        for outcome in grader.autograde(course, assignment, student_timeout=300, jobs=2):
            if not outcome.student.startswith("wrong"):
                continue  # test_assignments.py's students, when graded in the same run
            index = int(outcome.student.removeprefix("wrong"))
            path = notebook_path(course / "autograded" / outcome.student, assignment)
            results[assignment, index] = outcome, nbformat.read(path, as_version=4)
    return results


def failed_tests(notebook) -> dict[str, bool]:
    """The test cells that failed, each with whether it failed in its visible part."""
    failed = {}
    for grade_id, cell in cells_by_id(notebook).items():
        verdict = cell.metadata.get("autodiff", {}).get("verdict")
        if verdict is not None and verdict != "passed":
            errors = [out for out in cell.outputs if out.output_type == "error"]
            text = ANSI.sub("", "".join("".join(out.get("traceback", [])) for out in errors))
            failed[grade_id] = HIDDEN_FRAME.search(text) is None
    return failed


CASES = [(a, i) for a in ASSIGNMENTS for i in range(len(wrong_answers(a)))]


@pytest.mark.parametrize(("assignment", "index"), CASES, ids=[f"{a}-{i:02d}" for a, i in CASES])
def test_wrong_answer_loses_exactly_its_tests_points(graded, assignment, index):
    entry = wrong_answers(assignment)[index]
    outcome, notebook = graded[assignment, index]
    assert outcome.status == "graded", outcome.note
    failed = failed_tests(notebook)
    what = f"{entry['mistake']!r} failed {sorted(failed)}"
    assert sorted(failed) == sorted(entry["tests"]), what
    visible = any(failed.values())
    assert visible == (entry["caught"] == "visible"), f"{what}, visibly: {visible}"
    table = test_points(assignment)
    assert outcome.score == sum(table.values()) - sum(table[t] for t in failed)


def readme_table(assignment: str) -> str:
    rows = [
        "| wrong answer | cell | caught by |",
        "| --- | --- | --- |",
    ]
    for entry in wrong_answers(assignment):
        tests = ", ".join(f"`{t}`" for t in entry["tests"])
        rows.append(f"| {entry['mistake']} | `{entry['cell']}` | {entry['caught']}: {tests} |")
    visible = sum(entry["caught"] == "visible" for entry in wrong_answers(assignment))
    total = len(wrong_answers(assignment))
    return "\n".join([f"**{assignment}**: {visible} of {total} caught visibly.", "", *rows])


def test_solutions_readme_holds_the_table():
    text = (ROOT / "solutions" / "README.md").read_text()
    tables = "\n\n".join(readme_table(a) for a in ASSIGNMENTS)
    assert tables in text, f"solutions/README.md, 'Wrong answers', should read:\n\n{tables}"
