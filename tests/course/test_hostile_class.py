"""A hostile class through the real pipeline, in the sandbox (``hostile_class.py`` has
the class: 31 submissions over the five assignments).

In a temporary course, as the Makefile does it: ``release``; ``collect`` of one LMS zip
per assignment; ``autograde a5 --jobs 2`` while a second ``autograde a1`` is refused
the lock, then a third waits for it (``--wait``); ``autograde --jobs 2`` for the rest;
a regrade of one student (``--student cid --force``); ``feedback``. Checked: each
student's status, score and every test cell's points; that no run changed the grades
of students it was not grading; that nothing was lost (submissions byte for byte, the
downloaded zips, the gradebook's copies, what collect did not take); that the hostile
students' files and processes left nothing behind; that feedback shows no hidden test
in any encoding. The module prints a table of every student (``pytest -s``).
"""

from __future__ import annotations

import base64
import codecs
import csv
import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
from hostile_class import (
    A1,
    A2,
    A3,
    A4,
    A5,
    ASSIGNMENTS,
    CASES,
    MARKER,
    Course,
    expected_collection,
    hidden_lines,
    marker_processes,
    write_zip,
)
from system_parts import require

from classroom import gradebook
from classroom import sandbox as sandboxing

pytest.importorskip("nbgrader")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
ROOT = Path(__file__).resolve().parents[2]
FAST_CELLS = {"GRADING_CELL_TIMEOUT": "10"}  # for the runs with loops (a1, a5)
LOCKED = "another grading run is going"


@pytest.fixture(scope="module", autouse=True)
def bubblewrap():
    require(sandboxing.bwrap_problem(), "apt install bubblewrap (Debian/Ubuntu)")


def grading(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m classroom ...`` in the course root, as the Makefile runs it."""
    return subprocess.run(
        [sys.executable, "-m", "classroom", *args],
        cwd=root,
        env=dict(os.environ, **(env or {})),
        capture_output=True,
        text=True,
        timeout=600,
    )


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, f"{done.args[3:]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def started(root: Path, log: Path, *args: str, env: dict) -> subprocess.Popen:
    """``python -m classroom ...`` in the background, its output in ``log``."""
    with log.open("w") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "classroom", *args],
            cwd=root,
            env=dict(os.environ, **env),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


def wait_until(condition, what: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.1)


def lock_holder(root: Path) -> int | None:
    try:
        return json.loads((root / "grading" / "autograde.lock").read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None


def snapshot(*folders: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for folder in folders for p in folder.rglob("*") if p.is_file()}


def grades(root: Path) -> dict:
    """Every grade and comment in the gradebook: (assignment, student, ...) -> marks."""
    return gradebook.grades_of_others(root, set())


def changed(before: dict, after: dict, graded: set[tuple[str, str]]) -> list:
    """Marks of (assignment, student) pairs not in ``graded`` that differ."""
    keys = {k for k in before.keys() | after.keys() if (k[0], k[1]) not in graded}
    return sorted(k for k in keys if before.get(k) != after.get(k))


def pairs(*assignments: str) -> set[tuple[str, str]]:
    return {(c.assignment, c.student) for c in CASES if c.assignment in assignments}


def report(root: Path, assignment: str) -> dict[str, dict]:
    """The autograde report's last line for each student."""
    with (root / "grading" / f"autograde-{assignment}.csv").open(newline="") as rows:
        return {row["student"]: row for row in csv.DictReader(rows)}


def collect_report(root: Path, assignment: str) -> dict[str, tuple[str, str, str]]:
    (path,) = (root / "grading").glob(f"collect-{assignment}-*.csv")
    with path.open(newline="") as rows:
        return {r["entry"]: (r["status"], r["student"], r["reason"]) for r in csv.DictReader(rows)}


@dataclass
class Run:
    """What the fixture saw, for the tests to check."""

    course: Course
    zips: dict[str, Path] = field(default_factory=dict)
    submitted: dict[Path, bytes] = field(default_factory=dict)
    blocked: subprocess.CompletedProcess | None = None
    first_ran_through: bool = False  # the first run was still going after the refusal
    waited: str = ""  # the output of the run that waited
    changes: dict[str, list] = field(default_factory=dict)  # run -> grades it changed wrongly
    kept_through_b: bool = False  # a1/a5 autograded and feedback unchanged by run B
    leftovers: dict[str, list[int]] = field(default_factory=dict)  # run -> marker pids
    outputs: dict[str, str] = field(default_factory=dict)
    regraded: dict = field(default_factory=dict)  # cid's marks before, after
    seconds: dict[str, float] = field(default_factory=dict)
    printed_by_rot: str = ""  # what rot's kernel printed (later runs remove it)


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Course:
    root = tmp_path_factory.mktemp("hostile-course")
    shutil.copy(ROOT / "nbgrader_config.py", root)
    for folder in ("solutions", "assignments"):
        shutil.copytree(ROOT / folder, root / folder)
    ok(grading(root, "release"))
    return Course(root)


@pytest.fixture(scope="module")
def run(course, tmp_path_factory) -> Run:
    """The whole class, graded once; kills what a hostile student left running."""
    clock = time.perf_counter()
    result = Run(course)
    try:
        _grade_the_class(course.root, tmp_path_factory.mktemp("downloads"), result)
    finally:
        for pid in marker_processes():  # started by this test's students: end them
            os.kill(pid, signal.SIGKILL)
    result.seconds["all"] = time.perf_counter() - clock
    return result


def _grade_the_class(root: Path, downloads: Path, result: Run) -> None:
    clock = time.perf_counter()
    for assignment in ASSIGNMENTS:
        zip_path = write_zip(result.course, assignment, downloads / f"{assignment}.zip")
        result.zips[assignment] = zip_path
        named = [assignment] if assignment == A3 else []  # the others from the file names
        result.outputs[f"collect {assignment}"] = ok(
            grading(root, "collect", str(zip_path), *named)
        )
    result.submitted = snapshot(root / "submitted")
    result.seconds["collect"] = time.perf_counter() - clock

    clock = time.perf_counter()
    _run_a(root, downloads, result)
    result.seconds["run A (a5, a1 refused, a1 waiting)"] = time.perf_counter() - clock
    ok(grading(root, "feedback", A1))  # so that run B has feedback to go for
    kept = snapshot(*(root / f for f in ("autograded", "feedback")))

    clock = time.perf_counter()
    before = grades(root)
    result.outputs["run B"] = ok(grading(root, "autograde", "--jobs", "2"))
    result.changes["run B"] = changed(before, grades(root), pairs(A2, A3, A4))
    result.leftovers["run B"] = marker_processes()
    now = snapshot(*(root / f for f in ("autograded", "feedback")))
    result.kept_through_b = all(now.get(path) == data for path, data in kept.items())
    result.seconds["run B (a2, a3, a4)"] = time.perf_counter() - clock

    clock = time.perf_counter()
    before = grades(root)
    result.outputs["run C"] = ok(
        grading(root, "autograde", A3, "--student", "cid", "--force", "--jobs", "2")
    )
    after = grades(root)
    result.changes["run C"] = changed(before, after, {(A3, "cid")})
    result.regraded = {
        "before": {k: v for k, v in before.items() if k[:2] == (A3, "cid")},
        "after": {k: v for k, v in after.items() if k[:2] == (A3, "cid")},
    }
    result.seconds["run C (regrade cid)"] = time.perf_counter() - clock

    clock = time.perf_counter()
    result.outputs["feedback"] = ok(grading(root, "feedback"))
    result.seconds["feedback"] = time.perf_counter() - clock


def _run_a(root: Path, downloads: Path, result: Run) -> None:
    """a5 graded; meanwhile a second autograde (a1) is refused and a third waits."""
    before = grades(root)
    first = started(root, downloads / "a5.log", "autograde", A5, "--jobs", "2", env=FAST_CELLS)
    wait_until(lambda: lock_holder(root) == first.pid or first.poll() is not None, "the lock")
    result.blocked = grading(root, "autograde", A1, "--jobs", "2", env=FAST_CELLS)
    result.first_ran_through = first.poll() is None
    log = downloads / "a1.log"
    third = started(root, log, "autograde", A1, "--jobs", "2", "--wait", env=FAST_CELLS)
    wait_until(lambda: "waiting" in log.read_text() or third.poll() is not None, "--wait")
    result.first_ran_through &= first.poll() is None
    assert first.wait(timeout=600) == 0, (downloads / "a5.log").read_text()
    a5_graded = grades(root)
    assert third.wait(timeout=600) == 0, log.read_text()
    after = grades(root)
    result.outputs["run A a5"] = (downloads / "a5.log").read_text()
    result.waited = result.outputs["run A a1"] = log.read_text()
    result.changes["run A"] = changed(before, after, pairs(A1, A5))
    result.changes["run A: a1 on a5"] = changed(a5_graded, after, pairs(A1))
    result.leftovers["run A"] = marker_processes()
    executed = nbformat.read(root / "grading" / "executed" / A1 / "rot" / f"{A1}.ipynb", 4)
    outputs = [out for cell in executed.cells for out in cell.get("outputs", [])]
    result.printed_by_rot = "".join(out.get("text", "") for out in outputs)


# --- collect ---------------------------------------------------------------------------


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_zip_entry_is_collected_or_reported(run, assignment):
    root = run.course.root
    rows = collect_report(root, assignment)
    wanted = expected_collection(assignment)
    assert set(rows) == set(wanted)
    for entry, (status, student, reason) in wanted.items():
        got = rows[entry]
        assert got[:2] == (status, student), f"{entry}: {got}"
        assert reason == got[2] if status == "collected" else reason in got[2], got
    for case in CASES:
        if case.assignment == assignment:
            path = root / "submitted" / case.student / assignment / f"{assignment}.ipynb"
            assert path.read_bytes() == case.notebook_bytes(run.course), case.student
    kept = [p.name for p in (root / "grading" / "backups" / assignment).glob("not-collected-*/*")]
    assert len(kept) == sum(status != "collected" for status, _, _ in wanted.values())


# --- grades ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case.assignment[:2]}-{case.student}")
def test_each_student_gets_the_points_of_their_answers(run, case):
    course = run.course
    line = report(course.root, case.assignment)[case.student]
    expected = case.expected_score(course)
    assert line["status"] == case.status, line["note"]
    assert (float(line["score"]) if line["score"] else None) == expected, line["note"]
    for part in case.notes:
        assert part in line["note"]
    if case.kind in ("honest", "untouched", "partial"):
        assert line["note"] == "", "nothing to note in an ordinary submission"
    marks = {
        key[3]: value[0]
        for key, value in grades(course.root).items()
        if key[:2] == (case.assignment, case.student) and key[4] == "grade"
    }
    wanted = case.expected_cells(course)
    if wanted is None:
        assert marks == {}, "a submission that was not graded keeps no grades"
    else:
        assert {cell: marks.get(cell) for cell in wanted} == wanted


def test_a_second_run_stops_or_waits_for_the_first(run):
    assert run.blocked.returncode != 0
    assert LOCKED in run.blocked.stderr, run.blocked.stderr
    assert run.first_ran_through, "a5 ended before the other runs tried: nothing was tested"
    assert "waiting for the grading run of pid" in run.waited
    assert "autograding a1_numerical_symbolic" in run.waited


@pytest.mark.parametrize("name", ["run A", "run A: a1 on a5", "run B", "run C"])
def test_no_run_changes_the_grades_of_students_it_does_not_grade(run, name):
    assert run.changes[name] == []


def test_a_regrade_gives_the_same_grades(run):
    """cid handed in the release: had a hostile student rewritten the stored tests,
    the regrade after them would run those and give cid points."""
    assert run.regraded["before"] and run.regraded["after"] == run.regraded["before"]
    assert re.search(r"^cid +graded +0/", run.outputs["run C"], re.M), run.outputs["run C"]


# --- nothing lost, nothing left behind --------------------------------------------------


def test_nothing_is_lost(run):
    root = run.course.root
    assert snapshot(root / "submitted") == run.submitted
    for assignment, path in run.zips.items():
        archived = root / "downloaded" / assignment / "archive" / path.name
        assert archived.read_bytes() == path.read_bytes()
    copies = sorted((root / "grading" / "backups" / "gradebook").glob("gradebook-*.db"))
    assert copies, "no copy of the gradebook was kept"
    assert gradebook.integrity(root) is None
    assert run.kept_through_b, "a1's and a5's autograded notebooks or feedback changed"
    assert (root / "feedback" / "ada" / A1).is_dir() and (root / "solutions").is_dir()


def test_hostile_files_and_processes_leave_nothing_behind(run):
    root = run.course.root
    assert run.leftovers == {"run A": [], "run B": []}
    startup = Path.home() / ".ipython" / "profile_default" / "startup" / f"00-{MARKER}.py"
    assert not startup.exists()
    made = {p.name for p in root.iterdir()}
    assert made <= {
        "nbgrader_config.py",
        "solutions",
        "assignments",
        "submitted",
        "autograded",
        "feedback",
        "gradebook.db",
        "grading",
        "downloaded",
        ".exchange",
    }
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as book:
        for assignment in ASSIGNMENTS:
            for notebook in book.find_assignment(assignment).notebooks:
                for cell in notebook.source_cells:
                    assert cell.source.strip() != "pass", (assignment, cell.name)


# --- feedback --------------------------------------------------------------------------


def sources(notebook: Path) -> str:
    """Every cell's text of a submitted notebook, one string."""
    return "\n".join(cell.source for cell in nbformat.read(notebook.with_suffix(".ipynb"), 4).cells)


def encodings(line: str) -> list[str]:
    """The forms a student printed each line in (hostile_class.LEAK_IN_ROT13)."""
    return [
        line,
        codecs.encode(line, "rot13"),
        base64.b64encode(line.encode()).decode(),
        line[::-1],
    ]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_feedback_never_shows_a_hidden_test_in_any_encoding(run, assignment):
    """rot (a1) printed every line of the test cells the kernel had run in four forms;
    no feedback page of any assignment shows a hidden test's line in any of them."""
    root, course = run.course.root, run.course
    lines = hidden_lines(course, assignment)
    assert len(lines) > 20
    if assignment == A1:
        leaked = [line for line in lines if codecs.encode(line, "rot13") in run.printed_by_rot]
        assert len(leaked) == len(lines), "the student's leak did not run: nothing to hide"
    pages = list((root / "feedback").glob(f"*/{assignment}/*.html"))
    assert len(pages) == sum(
        c.assignment == assignment and c.expected_cells(course) is not None for c in CASES
    )
    for page in pages:
        raw = page.read_text()
        text = html.unescape(re.sub(r"<[^>]*>", "", raw))
        mine = sources(root / "submitted" / page.parts[-3] / assignment / page.name)
        for line in (line for line in lines if line not in mine):  # theirs to show
            for form in encodings(line):
                assert form not in text and form not in raw, f"{page}: {form!r} ({line!r})"


# --- the table for the issue note --------------------------------------------------------


def test_print_the_table(run, capsys):
    course = run.course
    rows = [("student", "assignment", "kind", "expected", "awarded", "status", "note")]
    for case in CASES:
        line = report(course.root, case.assignment)[case.student]
        expected = case.expected_score(course)
        awarded = f"{float(line['score']):g}" if line["score"] else "-"
        rows.append(
            (
                case.student,
                case.assignment,
                f"{case.kind}: {case.what}",
                "-" if expected is None else f"{expected:g}",
                awarded,
                line["status"],
                line["note"],
            )
        )
    with capsys.disabled():
        print()
        for row in rows:
            print(" | ".join(row))
        for stage, seconds in run.seconds.items():
            print(f"{stage}: {seconds:.0f} s")
