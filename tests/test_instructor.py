"""The grading pipeline end to end on a small assignment, with the real nbgrader.

A tiny assignment (two functions, two test cells with hidden tests, one written
answer) goes through release, collect, autograde, feedback and grades in a
temporary course directory, with one submission for each way a student can break
grading: an infinite loop, a crash, emptied and deleted tests, an unknown kernel,
a file that is not a notebook, tampering with tests, with the gradebook and with
other students' files.
"""

import json
import shutil
import zipfile
from pathlib import Path

import nbformat
import pytest

from autodiff.grading import __main__ as grading_main
from autodiff.grading import collect as collecting
from autodiff.grading import course as course_dir
from autodiff.grading import pipeline as instructor
from autodiff.grading import plugins as nbgrader_plugins

pytest.importorskip("nbgrader")
ROOT = Path(__file__).resolve().parent.parent
TOY = "toy"


def _meta(**fields):
    nbgrader = {"grade": False, "locked": False, "schema_version": 3, "solution": False}
    nbgrader["task"] = False
    return {"nbgrader": {**nbgrader, **fields}}


def toy_source() -> nbformat.NotebookNode:
    new_code, new_md = nbformat.v4.new_code_cell, nbformat.v4.new_markdown_cell
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    notebook.cells = [
        new_md("# A toy assignment"),
        new_code("import math", metadata=_meta(grade_id="setup", locked=True)),
        new_code(
            "def square(x):\n    ### BEGIN SOLUTION\n    return x * x\n    ### END SOLUTION",
            metadata=_meta(grade_id="square", solution=True),
        ),
        new_code(
            "assert square(3) == 9, 'square(3) should be 9'\n"
            "### BEGIN HIDDEN TESTS\nassert square(-2) == 4, 'negative numbers'\n"
            "### END HIDDEN TESTS",
            metadata=_meta(grade_id="square_test", grade=True, locked=True, points=2),
        ),
        new_code(
            "def cube(x):\n    ### BEGIN SOLUTION\n    return x ** 3\n    ### END SOLUTION",
            metadata=_meta(grade_id="cube", solution=True),
        ),
        new_code(
            "assert cube(2) == 8\n### BEGIN HIDDEN TESTS\n"
            "assert cube(-1) == -1, 'secret hidden message'\n### END HIDDEN TESTS",
            metadata=_meta(grade_id="cube_test", grade=True, locked=True, points=3),
        ),
        new_md(
            "Why square?\n\nModel answer: because.",
            metadata=_meta(grade_id="why", grade=True, solution=True, points=1),
        ),
    ]
    return notebook


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", root)
    (root / "solutions" / TOY).mkdir(parents=True)
    nbformat.write(toy_source(), root / "solutions" / TOY / f"{TOY}.ipynb")
    instructor.release(root)
    return root


def released(course) -> dict:
    return json.loads((course / "assignments" / TOY / f"{TOY}.ipynb").read_text())


def answered(course, square="return x * x", cube="return x ** 3") -> dict:
    notebook = released(course)
    notebook["cells"][2]["source"] = f"def square(x):\n    {square}"
    notebook["cells"][4]["source"] = f"def cube(x):\n    {cube}"
    return notebook


def submit(course, student: str, notebook: dict | str) -> None:
    folder = course / "submitted" / student / TOY
    folder.mkdir(parents=True, exist_ok=True)
    text = notebook if isinstance(notebook, str) else json.dumps(notebook)
    (folder / f"{TOY}.ipynb").write_text(text)


TAMPER = """
import pathlib, shutil, sqlite3
root = pathlib.Path.cwd()
while not (root / "nbgrader_config.py").exists():
    root = root.parent
db = sqlite3.connect(root / "gradebook.db")
db.execute("update grade set auto_score = 0")
db.commit()
shutil.rmtree(root / "submitted" / "alice")
forged = root / "submitted" / "zed" / "toy"
forged.mkdir(parents=True)
(forged / "toy.ipynb").write_text("{}")
with open(root / "nbgrader_config.py", "a") as config:
    config.write("\\nc.GenerateFeedback.preprocessors = []\\n")
def square(x):
    return x * x
"""


@pytest.fixture(scope="module")
def graded(course):
    """One autograde run over every kind of submission; returns {student: Outcome}."""
    patch = pytest.MonkeyPatch()
    patch.setenv("GRADING_CELL_TIMEOUT", "5")  # read by nbgrader_config.py: 5 s a cell
    ignore_interrupts = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    cases = {
        "alice": answered(course),
        "bob": released(course),
        "carol": answered(course, square="while True:\n        pass"),
        "jack": answered(course, square="while True:\n        pass"),
        "dave": answered(course),
        "erin": answered(course),
        "frank": answered(course),
        "gina": '{"cells": [ this is not JSON',
        "ivan": answered(course, cube="return 0"),
        "mallory": answered(course),
        "nora": answered(course, square="return sum(itertools.count())"),
        "pete": answered(course),
        "quinn": answered(course),
        "rita": answered(course),
        "sam": answered(course, square="print('careful', file=sys.stderr)\n    return x * x"),
    }
    cases["nora"]["cells"][2]["source"] = "import itertools\n" + cases["nora"]["cells"][2]["source"]
    cases["pete"]["cells"].insert(3, json.loads(json.dumps(cases["pete"]["cells"][2])))  # pasted
    del cases["quinn"]["cells"][4:6]  # an answer and its test, both deleted
    cases["rita"]["cells"][4]["source"] += "\nprint(*In, sep='\\n')"  # leaks hidden tests?
    cases["sam"]["cells"][2]["source"] = "import sys\n" + cases["sam"]["cells"][2]["source"]
    cases["jack"]["cells"][2]["source"] = ignore_interrupts + cases["jack"]["cells"][2]["source"]
    cases["dave"]["cells"][2]["source"] = "import os\nos._exit(1)"
    cases["erin"]["cells"][3]["source"] = ""  # a test emptied ...
    del cases["erin"]["cells"][5]  # ... and one deleted
    cases["frank"]["metadata"]["kernelspec"] = {"name": "julia-1.9", "display_name": "Julia"}
    cases["ivan"]["cells"][5]["source"] = "pass  # tests? what tests?"
    cases["mallory"]["cells"][2]["source"] = TAMPER
    for student, notebook in cases.items():
        submit(course, student, notebook)
    submitted_before = instructor._snapshot(course / "submitted")
    try:
        outcomes = instructor.autograde(course, TOY, student_timeout=300)
    finally:
        patch.undo()
    return {o.student: o for o in outcomes}, submitted_before


def test_release_hides_solutions_and_hidden_tests(course):
    text = (course / "assignments" / TOY / f"{TOY}.ipynb").read_text()
    assert "raise NotImplementedError()" in text
    for secret in ("BEGIN SOLUTION", "return x * x", "HIDDEN", "negative numbers", "because"):
        assert secret not in text


@pytest.mark.parametrize(
    "student, score, note",
    [
        ("alice", 5, ""),  # all tests pass; the written answer is left for a person
        ("bob", 0, ""),  # the release as handed out
        ("carol", 3, "ran out of time"),  # infinite loop: that test earns nothing
        ("jack", 3, "ran out of time"),  # ... even when it ignores the interrupt
        ("dave", 3, "crashed"),  # os._exit kills the kernel in the square cell
        ("erin", 5, "restored"),  # emptied and deleted tests come back
        ("frank", 5, ""),  # unknown kernel name: graded on python3
        ("ivan", 2, ""),  # a test cell replaced by `pass` is put back
        ("nora", 3, "ran out of time"),  # a loop in C that holds the GIL
        ("pete", 5, ""),  # an answer cell pasted twice
        ("quinn", 2, "restored"),  # an answer and its test deleted: the test comes back
        ("rita", 5, ""),  # prints the kernel's input history (see the feedback test)
        ("sam", 5, ""),  # correct code that writes to stderr keeps its points
    ],
)
def test_each_submission_is_graded(graded, student, score, note):
    outcome = graded[0][student]
    assert outcome.status == "graded"
    assert (outcome.score, outcome.max_score) == (score, 6)
    assert note in outcome.note


def test_broken_notebook_is_reported_and_kept(graded, course):
    outcome = graded[0]["gina"]
    assert outcome.status == "invalid notebook"
    assert "not a valid notebook" in outcome.note
    kept = (course / "submitted" / "gina" / TOY / f"{TOY}.ipynb").read_text()
    assert kept == '{"cells": [ this is not JSON'


def test_tampering_is_caught_and_undone(graded, course):
    outcomes, submitted_before = graded
    assert outcomes["mallory"].status == "tampering"
    assert not (course / "autograded" / "mallory" / TOY).exists()  # left for a person
    assert "grades changed" in outcomes["mallory"].note
    assert instructor._snapshot(course / "submitted") == submitted_before  # alice's file is back
    assert not (course / "submitted" / "zed").exists()  # a forged submission is moved out
    assert list((course / "grading" / "quarantine").rglob("zed/toy/toy.ipynb"))
    assert "preprocessors = []" not in (course / "nbgrader_config.py").read_text()
    assert instructor._score(course, TOY, "alice") == (5, 6)  # and her grades


def test_report_lists_every_student(graded, course):
    lines = (course / "grading" / f"autograde-{TOY}.csv").read_text().splitlines()
    students = {line.split(",")[1] for line in lines[1:]}
    assert students == set(graded[0])


def test_feedback_never_shows_hidden_tests(graded, course):
    instructor.feedback(course, TOY)
    pages = {p.parts[-3]: p.read_text() for p in (course / "feedback").glob(f"*/{TOY}/*.html")}
    assert {"alice", "bob", "ivan", "rita"} <= set(pages)
    for page in pages.values():
        assert "HIDDEN" not in page and "secret hidden message" not in page
        assert "negative numbers" not in page
    # ivan's cube fails a visible test: the failing line is shown, nothing after it
    assert "assert cube(2) == 8" in pages["ivan"]


def test_grades_csv_and_histogram(graded, course):
    table = instructor.grades(course)
    rows = {row.split(",")[3]: row.split(",") for row in table.read_text().splitlines()[1:]}
    assert float(rows["alice"][-2]) == 5 and float(rows["carol"][-2]) == 3
    assert float(rows["bob"][-1]) == 6
    assert (course / "grading" / f"{TOY}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_regrading_skips_what_is_graded(graded, course):
    assert instructor.autograde(course, TOY, student="alice") == []
    again = instructor.autograde(course, TOY, student="alice", force=True)
    assert [(o.student, o.score) for o in again] == [("alice", 5)]


def make_zip(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


def test_collect_reads_lms_downloads_and_keeps_resubmissions(course, tmp_path):
    notebook = json.dumps(answered(course))
    canvas = make_zip(
        tmp_path / "submissions.zip",
        {
            f"kim_12345_67890_{TOY}.ipynb": notebook,
            f"lee_late_12346_67891_{TOY}-1.ipynb": notebook,
            "README.txt": "not a notebook",
        },
    )
    collecting.collect(course, canvas)  # the assignment is read from the file names
    moodle = make_zip(
        tmp_path / "moodle.zip",
        {
            f"Mo Salah_4711_assignsubmission_file_/{TOY}.ipynb": notebook,
            f"course/nina/{TOY} (1).ipynb": notebook,
            f"kim_12345_67890_{TOY}.ipynb": json.dumps(released(course)),  # a resubmission
        },
    )
    collecting.collect(course, moodle, TOY)
    for student in ("kim", "lee", "4711", "nina"):
        assert (course / "submitted" / student / TOY / f"{TOY}.ipynb").is_file()
    latest = (course / "submitted" / "kim" / TOY / f"{TOY}.ipynb").read_text()
    assert "return x * x" not in latest  # the resubmission replaced the first one ...
    backups = list((course / "grading" / "backups" / TOY).glob(f"*/kim/{TOY}.ipynb"))
    assert any("return x * x" in p.read_text() for p in backups)  # ... which is kept


def test_collect_refuses_what_it_cannot_read(course, tmp_path):
    not_zip = tmp_path / "grades.zip"
    not_zip.write_text("hello")
    with pytest.raises(SystemExit, match="not a zip file"):
        collecting.collect(course, not_zip)
    unnamed = make_zip(tmp_path / "x.zip", {"alice/notebook.ipynb": "{}"})
    with pytest.raises(SystemExit, match="ASSIGNMENT="):
        collecting.collect(course, unnamed)
    with pytest.raises(SystemExit, match="no assignment 'a9'"):
        collecting.collect(course, unnamed, "a9")


def test_command_line_needs_the_course_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="nbgrader_config.py"):
        grading_main.main(["grades"])


def test_collect_keeps_one_file_per_student_and_sets_the_rest_aside(course, tmp_path, capsys):
    first, second = json.dumps(answered(course)), json.dumps(answered(course, cube="return 1"))
    path = tmp_path / "twice.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(zipfile.ZipInfo(f"uma_1_2_{TOY}.ipynb", (2026, 11, 1, 9, 0, 0)), first)
        archive.writestr(
            zipfile.ZipInfo(f"uma_late_1_3_{TOY}-1.ipynb", (2026, 11, 2, 9, 0, 0)), second
        )
        archive.writestr(f"vic_4_5_{TOY}.ipynb", first)
        archive.writestr("../../escape/evil.ipynb", first)
    collecting.collect(course, path, TOY)
    printed = capsys.readouterr().out
    assert "return 1" in (course / "submitted" / "uma" / TOY / f"{TOY}.ipynb").read_text()
    assert (course / "submitted" / "vic" / TOY / f"{TOY}.ipynb").is_file()  # the others too
    assert f"not collected: uma_1_2_{TOY}.ipynb (uma sent a newer file)" in printed
    aside = list(
        (course / "grading" / "backups" / TOY).glob(f"not-collected-*/uma_1_2_{TOY}.ipynb")
    )
    assert aside and aside[0].read_text() == first  # nothing is lost
    assert not (course.parent / "escape").exists() and not (course / "escape").exists()


def test_whose_reads_the_lms_file_names():
    from pathlib import PurePosixPath as P

    assert collecting.whose(P("kim_12345_67890_a1.ipynb")) == ("kim", "a1")
    assert collecting.whose(P("Kim_late_1_2_a1-2.ipynb")) == ("kim", "a1")
    assert collecting.whose(P("Mo Salah_4711_assignsubmission_file_/a1 (1).ipynb")) == (
        "4711",
        "a1",
    )
    assert collecting.whose(P("course/frank_g/a1.ipynb")) == ("frank_g", "a1")
    assert collecting.whose(P("a1.ipynb")) is None
    assert collecting.whose(P("kim/notes.txt")) is None


def test_a_time_out_kills_the_kernels_too():
    import subprocess
    import time

    # A parent whose child starts its own session, as jupyter_client starts kernels.
    parent = subprocess.Popen(["sh", "-c", "setsid sleep 300 & wait"])
    time.sleep(0.5)
    children = [
        int(p.parent.name)
        for p in Path("/proc").glob("[0-9]*/stat")
        if p.read_text().rsplit(")", 1)[1].split()[1] == str(parent.pid)
    ]
    assert children, "the child did not start"
    course_dir.kill_tree(parent.pid)
    parent.wait(timeout=5)
    time.sleep(0.2)
    for child in children:
        state = Path(f"/proc/{child}/stat")
        assert not state.exists() or state.read_text().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.parametrize(
    "trick",
    [
        "np.allclose = lambda *a, **k: True",  # patching what the tests use
        "ad.memory.plan = None",
        "tracemalloc.stop()",  # switching the measurement off
        "want = globals()['_want']",  # reading the hidden tests' variables
        "class Equal(dict):\n    def __eq__(self, other): return True",
        "exec(inspect.getsource(ad.memory.liveness))",
        "class Small(float):\n    def __lt__(self, other): return True",
        "value.__class__ = Fake",
        "np = FakeNumpy()",  # rebinding a module the tests use
        "class Anything:\n    def __getattr__(self, name): return lambda *a: True",
    ],
)
def test_more_tricks_are_flagged(course, tmp_path, trick):
    notebook = answered(course)
    notebook["cells"][2]["source"] += "\n" + trick
    (tmp_path / "n.ipynb").write_text(json.dumps(notebook))
    assert len(instructor._suspicious(tmp_path)) == 1


def test_answers_using_tricks_are_flagged(course, tmp_path):
    notebook = answered(course, cube="return 8 if x == 2 else x ** 3")
    notebook["cells"][2]["source"] += "\nget_ipython().input_transformers_cleanup.clear()"
    (tmp_path / "n.ipynb").write_text(json.dumps(notebook))
    (note,) = instructor._suspicious(tmp_path)
    assert "get_ipython" in note and "input_transformers" in note
    (tmp_path / "n.ipynb").write_text(json.dumps(answered(course)))
    assert instructor._suspicious(tmp_path) == []


def test_feedback_shows_instructor_lines_that_a_hidden_test_repeats():
    """A hidden test may repeat a line of a visible setup cell (a layer's vjp, say): a
    traceback through that setup line must show it. A line an answer cell pastes from
    the hidden tests stays hidden: answer cells cannot turn a guess into a reveal."""
    new_code = nbformat.v4.new_code_cell
    setup = "def vjp(h, g):\n    return g * (1 - h * h)"
    hidden = (
        "assert True\n### BEGIN HIDDEN TESTS\ndef _vjp(h, g):\n    return g * (1 - h * h)\n"
        "assert _secret_check(1)\n### END HIDDEN TESTS"
    )
    answer = "def f():\n    assert _secret_check(1)"
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        new_code(setup, metadata=_meta(grade_id="setup", locked=True)),
        new_code(answer, metadata=_meta(grade_id="f", solution=True)),
        new_code(hidden, metadata=_meta(grade_id="t", grade=True, locked=True, points=1)),
    ]
    traceback = "Cell In[1], line 2\n----> 2     return g * (1 - h * h)\nassert _secret_check(1)"
    notebook.cells[1].outputs = [
        nbformat.v4.new_output("error", ename="E", evalue="", traceback=[traceback])
    ]
    redacted, _ = nbgrader_plugins.RedactHiddenTests().preprocess(notebook, {})
    shown = "\n".join(redacted.cells[1].outputs[0].traceback)
    assert "return g * (1 - h * h)" in shown  # the setup cell's line
    assert "_secret_check" not in shown  # only the hidden tests (and a paste) have it
    assert "_secret_check" not in redacted.cells[2].source
