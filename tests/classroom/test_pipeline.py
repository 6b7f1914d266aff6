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
from pathlib import Path

import nbformat
import pytest
from system_parts import require

from classroom import autograde as grader
from classroom import course as course_dir
from classroom import pipeline as instructor
from classroom import plugins as nbgrader_plugins
from classroom.sandbox import bwrap_problem

pytest.importorskip("nbgrader")
ROOT = Path(__file__).resolve().parents[2]
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


def snapshot(folder: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def submit(course, student: str, notebook: dict | str) -> None:
    folder = course / "submitted" / student / TOY
    folder.mkdir(parents=True, exist_ok=True)
    text = notebook if isinstance(notebook, str) else json.dumps(notebook)
    (folder / f"{TOY}.ipynb").write_text(text)


# A student who knows where the instructor's course is, and tries everything there.
TAMPER = """
import pathlib, shutil, sqlite3, os, subprocess
root = pathlib.Path(COURSE)
found = {p: p.exists() for p in (root / "gradebook.db", root / "solutions", root / "submitted")}
print("found", found)
for attempt in (
    lambda: sqlite3.connect(root / "gradebook.db").execute("update grade set auto_score = 0"),
    lambda: shutil.rmtree(root / "submitted" / "alice"),
    lambda: (root / "nbgrader_config.py").write_text("c = get_config()"),
    lambda: pathlib.Path.home().joinpath(".ipython/profile_default/startup/x.py").write_text(
        "raise SystemExit"),
    lambda: subprocess.Popen(["sleep", "1000"]),
):
    try:
        attempt()
    except Exception as error:
        print("refused:", type(error).__name__)
def square(x):
    return x * x
"""


# An answer cell that turns every later assert into `pass`.
FORGE = """
import ast
class Pass(ast.NodeTransformer):
    def visit_Assert(self, node):
        return ast.Pass()
get_ipython().ast_transformers.append(Pass())
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
    cases["mallory"]["cells"][2]["source"] = TAMPER.replace("COURSE", repr(str(course)))
    cases["trudy"] = answered(course, cube="return 0")  # wrong, and hides it:
    cases["trudy"]["cells"][2]["source"] = FORGE
    for student, notebook in cases.items():
        submit(course, student, notebook)
    submitted_before = snapshot(course / "submitted")
    try:
        outcomes = grader.autograde(course, TOY, student_timeout=300, jobs=2)
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
        ("erin", 5, "was deleted: it was put back"),  # emptied and deleted tests come back
        ("frank", 5, ""),  # unknown kernel name: graded on python3
        ("ivan", 2, ""),  # a test cell replaced by `pass` is put back
        ("nora", 3, "ran out of time"),  # a loop in C that holds the GIL
        ("pete", 5, "appears twice: the first copy was graded"),  # an answer pasted twice
        ("quinn", 2, "cube_test' was deleted: it was put back"),  # answer and test deleted
        ("rita", 5, ""),  # prints the kernel's input history (see the feedback test)
        ("sam", 5, ""),  # correct code that writes to stderr keeps its points
    ],
)
def test_each_submission_is_graded(graded, student, score, note):
    outcome = graded[0][student]
    assert outcome.status == "graded"
    assert (outcome.score, outcome.max_score) == (score, 6)
    assert note in outcome.note


def test_answers_that_change_how_tests_run_score_nothing_there(graded, course):
    outcome = graded[0]["trudy"]
    assert (outcome.status, outcome.score) == ("tampering", 0)
    assert "an AST transformer was added (Pass)" in outcome.note


def test_broken_notebook_is_reported_and_kept(graded, course):
    outcome = graded[0]["gina"]
    assert outcome.status == "invalid notebook"
    assert "not a valid notebook" in outcome.note
    kept = (course / "submitted" / "gina" / TOY / f"{TOY}.ipynb").read_text()
    assert kept == '{"cells": [ this is not JSON'


def test_the_sandbox_keeps_the_course_out_of_reach(graded, course):
    """Mallory's answer cell goes for the gradebook, the submissions, the configuration
    and the instructor's home: in the sandbox none of them is there to find."""
    outcomes, submitted_before = graded
    assert outcomes["mallory"].status == "graded"
    assert outcomes["mallory"].score == 5  # her answers are right, and nothing else happened
    assert snapshot(course / "submitted") == submitted_before
    assert "ReplayExecuted" in (course / "nbgrader_config.py").read_text()
    assert grader._score(course, TOY, "alice") == (5, 6)
    executed = course / "grading" / "executed" / TOY / "mallory" / f"{TOY}.ipynb"
    printed = "".join(out.get("text", "") for out in nbformat.read(executed, 4).cells[2].outputs)
    assert "found {" in printed and "True" not in printed  # nothing of the course exists


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
    # ivan's cube fails a test: the grader says so, in its own words
    assert "[grader] failed: AssertionError" in pages["ivan"]
    assert "[grader] passed" in pages["alice"] and "[grader] failed" not in pages["alice"]
    assert "secret" not in pages["rita"]  # she printed every cell's source, hidden tests too


def test_grades_csv_and_histogram(graded, course):
    table = instructor.grades(course)
    rows = {row.split(",")[3]: row.split(",") for row in table.read_text().splitlines()[1:]}
    assert float(rows["alice"][-2]) == 5 and float(rows["carol"][-2]) == 3
    assert float(rows["bob"][-1]) == 6
    assert (course / "grading" / f"{TOY}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_regrading_skips_what_is_graded(graded, course):
    assert grader.autograde(course, TOY, student="alice") == []
    again = grader.autograde(course, TOY, student="alice", force=True)
    assert [(o.student, o.score) for o in again] == [("alice", 5)]
    # what grading again replaced is kept, not deleted
    kept = list((course / "grading" / "backups" / TOY).glob(f"*/autograded/alice/{TOY}.ipynb"))
    assert kept and (course / "autograded" / "alice" / TOY / f"{TOY}.ipynb").exists()
    instructor.feedback(course, TOY)
    instructor.feedback(course, TOY)  # again: the first one is kept
    assert list((course / "grading" / "backups" / TOY).glob(f"*/feedback/alice/{TOY}.html"))


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
        # going for the course: the gradebook, files, processes, the kernel's startup
        "sqlite3.connect('/srv/course/gradebook.db').execute('UPDATE grade SET auto_score = 9')",
        "shutil.rmtree('/srv/course/submitted', ignore_errors=True)",
        "subprocess.Popen(['sh', '-c', 'sleep 2; rm -f ../x'])",
        "if os.fork() == 0:\n    os.execv('/bin/sh', ['sh'])",
        "pathlib.Path.home().joinpath('.ipython/profile_default/startup/x.py').touch()",
    ],
)
def test_more_tricks_are_flagged(course, tmp_path, trick):
    notebook = answered(course)
    notebook["cells"][2]["source"] += "\n" + trick
    (tmp_path / "n.ipynb").write_text(json.dumps(notebook))
    assert len(grader._suspicious(tmp_path)) == 1


def test_answers_using_tricks_are_flagged(course, tmp_path):
    notebook = answered(course, cube="return 8 if x == 2 else x ** 3")
    notebook["cells"][2]["source"] += "\nget_ipython().input_transformers_cleanup.clear()"
    (tmp_path / "n.ipynb").write_text(json.dumps(notebook))
    (note,) = grader._suspicious(tmp_path)
    assert "get_ipython" in note and "input_transformers" in note
    (tmp_path / "n.ipynb").write_text(json.dumps(answered(course)))
    assert grader._suspicious(tmp_path) == []


def test_feedback_shows_verdicts_not_what_the_kernel_printed():
    """Student code can print a hidden test in any encoding (here rot13): feedback
    keeps nothing a kernel printed. Test cells show the grader's verdict, hidden
    lines are gone from the source, and the grader's notes come first."""
    import codecs

    new_code = nbformat.v4.new_code_cell
    hidden = (
        "assert f() == 1\n### BEGIN HIDDEN TESTS\nassert _secret_check(1)\n### END HIDDEN TESTS"
    )
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["autodiff"] = {
        "notes": [
            "the test cell 't' was deleted: it was put back",
            "the cell '<img src=x onerror=alert(1)>' is not part of the assignment",
        ]
    }
    notebook.cells = [
        new_code("def f():\n    return 1", metadata=_meta(grade_id="f", solution=True)),
        new_code(hidden, metadata=_meta(grade_id="t", grade=True, locked=True, points=1)),
        new_code(hidden, metadata=_meta(grade_id="u", grade=True, locked=True, points=1)),
        new_code(hidden, metadata=_meta(grade_id="v", grade=True, locked=True, points=1)),
    ]
    leak = codecs.encode("assert _secret_check(1)", "rot13")
    for cell in notebook.cells:
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=leak)]
    notebook.cells[1].metadata["autodiff"] = {"verdict": "passed"}
    notebook.cells[2].metadata["autodiff"] = {"verdict": "failed", "error": "AssertionError"}
    notebook.cells[3].metadata["autodiff"] = {"verdict": "tampered", "findings": [leak]}
    shown, _ = nbgrader_plugins.GraderFeedback().preprocess(notebook, {})
    text = json.dumps(shown)
    assert leak not in text and "_secret_check" not in text
    assert "it was put back" in shown.cells[0].source
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    page = markdown2html_mistune(shown.cells[0].source)  # a name a student chose stays text
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert shown.cells[1].outputs == []
    verdicts = [cell.outputs[0].text for cell in shown.cells[2:]]
    assert verdicts[0] == "[grader] passed\n"
    assert verdicts[1].startswith("[grader] failed: AssertionError")
    assert verdicts[2].startswith("[grader] not run: your code changed how the tests run")
    assert shown.cells[2].source == "assert f() == 1"


def test_the_formgraders_autograde_runs_in_the_sandbox(graded, course):
    """The Formgrader's button runs plain ``nbgrader autograde`` in the server, with no
    executed notebook from ``make autograde``: ReplayExecuted runs it in the sandbox."""
    require(bwrap_problem(), "apt install bubblewrap")
    submit(course, "zoe", answered(course))
    submit(course, "yann", answered(course, cube="return 0"))
    yann = answered(course, cube="return 0")
    yann["cells"][2]["source"] = TAMPER.replace("COURSE", repr(str(course)))
    submit(course, "yann", yann)
    for student in ("zoe", "yann"):
        code, output = course_dir.nbgrader(course, "autograde", TOY, "--student", student)
        assert code == 0, output[-3000:]
    assert grader._score(course, TOY, "zoe") == (5, 6)
    assert grader._score(course, TOY, "yann") == (2, 6)  # cube is wrong: 2 of 5 test points
    autograded = nbformat.read(course / "autograded" / "yann" / TOY / f"{TOY}.ipynb", 4)
    printed = "".join(out.get("text", "") for out in autograded.cells[2].outputs)
    assert "found {" in printed and "True" not in printed  # the course is out of reach
    assert autograded.metadata["autodiff"]["sandbox"].startswith("bubblewrap sandbox")
