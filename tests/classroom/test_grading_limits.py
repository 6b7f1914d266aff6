"""Grading at its limits costs what the rules say, and the student is told why.

Each notebook here runs as ``make autograde`` runs it (``execute.execute``, in the
bubblewrap sandbox) or as a student validates it (``python -m classroom
validate``), and its feedback is made as ``make feedback`` makes it
(``plugins.GraderFeedback``). Too much output costs the output, never the verdicts;
a cell stopped by a limit is named, with the limit, next to each test it made fail.
"""

import nbformat
import pytest
from system_parts import require

from classroom import plugins
from classroom import sandbox as sandboxing
from classroom.execute import execute

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module", autouse=True)
def bubblewrap():
    require(sandboxing.bwrap_problem(), "apt install bubblewrap (Debian/Ubuntu)")


def _meta(grade_id: str, test: bool = False):
    nbgrader = {"grade_id": grade_id, "locked": test, "schema_version": 3}
    nbgrader.update(grade=test, solution=not test, task=False)
    if test:
        nbgrader["points"] = 1
    return {"nbgrader": nbgrader}


def notebook(*cells: tuple[str, str, bool]):
    """Cells as (grade_id, source, is_test)."""
    made = nbformat.v4.new_notebook()
    for grade_id, source, test in cells:
        made.cells.append(nbformat.v4.new_code_cell(source, metadata=_meta(grade_id, test)))
    return made


def graded(tmp_path, made, limits=None):
    """The notebook run for grading; its feedback's notes and each cell's verdict line."""
    nbformat.write(made, tmp_path / "nb.ipynb")
    (tmp_path / "student").mkdir(exist_ok=True)
    box = sandboxing.Sandbox("bwrap", limits or sandboxing.Limits())
    ran = execute(tmp_path / "nb.ipynb", tmp_path / "student", tmp_path / "out.ipynb", box)
    shown, _ = plugins.GraderFeedback().preprocess(nbformat.from_dict(ran), {})
    lines = {
        cell.metadata["nbgrader"]["grade_id"]: cell.outputs[0].text.strip()
        for cell in shown.cells[1:]
        if cell.outputs
    }
    return ran, shown.cells[0].source, lines


# 17 x 1024 lines of 1,023 characters and a newline: 17 MB, past the notebook's 16
SEVENTEEN_MB = "for _ in range(17 * 1024):\n    print('x' * 1023)"


def test_a_notebook_that_prints_17_mb_keeps_its_verdicts(tmp_path, capsys, monkeypatch):
    """The issue's case, as a student validates it: the test passes, and the report
    names the output limit (it said "tampered: the grader's check got no answer")."""
    from classroom import __main__ as grading_main

    made = notebook(("chatty", SEVENTEEN_MB, False), ("sums", "assert 1 + 1 == 2", True))
    nbformat.write(made, tmp_path / "mine.ipynb")
    monkeypatch.chdir(tmp_path)
    assert grading_main.main(["validate", "mine.ipynb"]) == 0, capsys.readouterr().out
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == ["sums", "passed"], printed
    assert any(line.startswith("limit hit: the output limit") for line in printed), printed


def test_output_past_the_limits_costs_output_not_points(tmp_path):
    """17 MB in an answer, and a test whose own call prints 2 MB: both tests pass, no
    finding of tampering, and the feedback says which cells' output was dropped."""
    made = notebook(
        ("chatty", SEVENTEEN_MB, False),
        ("sums", "assert 1 + 1 == 2", True),
        ("loud_test", "for _ in range(2048):\n    print('y' * 1023)\nassert 2 * 2 == 4", True),
    )
    ran, notes, lines = graded(tmp_path, made)
    assert lines == {"sums": "[grader] passed", "loud_test": "[grader] passed"}, lines
    assert ran.metadata["autodiff"]["tampering"] == []
    assert "printed more than 16 MB" in notes, notes
    assert "limit hit: the output limit" in notes, notes


def test_a_time_out_is_told_next_to_the_tests_it_affected(tmp_path, monkeypatch):
    """An answer cell that loops past the time limit: the test that uses what it
    defines fails, and says the cell ran too long; a test that does not use it passes;
    a test that itself runs too long says so; the notes list each."""
    monkeypatch.setenv("GRADING_CELL_TIMEOUT", "3")
    made = notebook(
        (
            "forward_difference",
            "def forward_difference(f, x):\n    return 0\nwhile True:\n    pass",
            False,
        ),
        ("test_forward", "assert forward_difference(abs, 1.0) == 0", True),
        ("test_other", "assert 1 + 1 == 2", True),
        ("test_slow", "while True:\n    pass", True),
    )
    ran, notes, lines = graded(tmp_path, made)
    stopped = "your cell `forward_difference` ran longer than 3 s and was stopped"
    assert lines["test_forward"].startswith("[grader] failed: NameError"), lines
    assert f"{stopped}, so this test could not use it" in lines["test_forward"], lines
    assert lines["test_other"] == "[grader] passed"
    assert lines["test_slow"] == "[grader] failed: this test ran longer than 3 s and was stopped"
    page = notes.replace("\\", "")  # the notes are Markdown with everything escaped
    assert f"{stopped}, so the tests that use it could not run: `test_forward`" in page, page
    assert "limit hit: the time limit (3 s a cell)" in page, page


def test_a_limit_an_error_names_is_told_next_to_its_test(tmp_path):
    """A test whose call opens more files than allowed fails with the limit named."""
    made = notebook(
        ("opener", "def open_many():\n    return [open(f'f{i}', 'w') for i in range(200)]", False),
        ("test_open", "assert len(open_many()) == 200", True),
    )
    _, notes, lines = graded(tmp_path, made, sandboxing.Limits(open_files=64))
    assert lines["test_open"] == "[grader] failed: this test hit the open-files limit (64)"
    assert "limit hit: the open-files limit (64)" in notes.replace("\\", "")
