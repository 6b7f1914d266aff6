"""A class through the nbgrader exchange, on one machine.

Students are simulated as nbgrader sees them: each has a HOME of their own (nbgrader's
submission cache is ``~/.local/share/jupyter/nbgrader_cache``), a folder to work in
with a student's ``nbgrader_config.py``, and ``JUPYTERHUB_USER``/``USER``/``LOGNAME``
set to their name; they run nbgrader's student commands (fetch_assignment, submit,
fetch_feedback, list) against a temporary exchange (``NBGRADER_EXCHANGE``). The
instructor runs ``python -m classroom`` as the Makefile does, in a temporary
course holding the smallest assignment (a2 runs in about 4 s).

The class: release; alice and bob fetch; alice submits her answers; bob submits twice
(the latest wins); release again (a typo fixed) keeps the submissions; collect; autograde;
feedback; each student fetches feedback with their own score. Then each bad input of a
collection, in a second course: a newer submission, a late one, one of an assignment
never released, odd entries, and an exchange with wrong permissions, checking the
message and that nothing was lost. Last, a student's Jupyter server: the Assignment
List's REST API lists the course and fetches and submits.
"""

from __future__ import annotations

import csv
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nbformat
import pytest
from servers import free_port, serving

from classroom import sandbox as sandboxing
from classroom.exchange import ACCOUNTS_FILE
from classroom.hub_setup import write_accounts

pytest.importorskip("nbgrader")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
ROOT = Path(__file__).resolve().parents[2]
A2 = "a2_forward_mode"
NOTEBOOK = f"{A2}.ipynb"
SANDBOX = "none" if sandboxing.bwrap_problem() else "auto"  # the sandbox is not tested here

# What a student's folder holds: the student kit's config, whose submit leaves the
# submission's folder writable by its student only. nbgrader names a student by their
# login, or by JUPYTERHUB_USER when the login is "jovyan" (JupyterHub's images); the
# kit's config takes JUPYTERHUB_USER, so the test's students, who share one login, are
# told apart.
STUDENT_CONFIG = (ROOT / "deploy" / "student-kit" / "nbgrader_config.py").read_text()


# --- the people -------------------------------------------------------------------------


@dataclass
class Instructor:
    root: Path
    exchange: Path

    def run(self, *args: str) -> subprocess.CompletedProcess:
        """``python -m classroom ...`` in the course root."""
        return subprocess.run(
            [sys.executable, "-m", "classroom", *args],
            cwd=self.root,
            env=dict(os.environ, NBGRADER_EXCHANGE=str(self.exchange)),
            capture_output=True,
            text=True,
            timeout=600,
        )

    def ok(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    @property
    def inbound(self) -> Path:
        return self.exchange / "autodiff" / "inbound"


@dataclass
class Student:
    name: str
    base: Path  # holds home/ and work/
    exchange: Path

    @property
    def work(self) -> Path:
        return self.base / "work"

    @property
    def notebook(self) -> Path:
        return self.work / A2 / NOTEBOOK

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
        names = dict(JUPYTERHUB_USER=self.name, USER=self.name, LOGNAME=self.name)
        env.update(names, HOME=str(self.base / "home"), NBGRADER_EXCHANGE=str(self.exchange))
        return env

    def nbgrader(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "nbgrader", *args],
            cwd=self.work,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{self.name}: nbgrader {args}:\n{done.stdout}{done.stderr}"
        return done.stdout + done.stderr


def new_student(name: str, tmp: Path, exchange: Path) -> Student:
    student = Student(name, tmp / name, exchange)
    (student.base / "home").mkdir(parents=True)
    student.work.mkdir()
    (student.work / "nbgrader_config.py").write_text(STUDENT_CONFIG)
    return student


def new_course(tmp: Path) -> Instructor:
    root = tmp / "course"
    (root / "solutions").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", root)
    shutil.copytree(ROOT / "solutions" / A2, root / "solutions" / A2)
    return Instructor(root, tmp / "exchange")


def answer(student: Student, root: Path, only: set[str] | None = None) -> None:
    """Fill the student's answer cells (those named in ``only``) from solutions/."""
    solved = nbformat.read(root / "solutions" / A2 / NOTEBOOK, as_version=4)
    model = {_grade_id(cell): cell.source for cell in solved.cells}
    notebook = nbformat.read(student.notebook, as_version=4)
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if (
            cell.cell_type == "code"
            and meta.get("solution")
            and (only is None or _grade_id(cell) in only)
        ):
            cell.source = model[_grade_id(cell)]
    nbformat.write(notebook, student.notebook)


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def entries(instructor: Instructor, student: str) -> list[Path]:
    """A student's submissions in inbound, oldest first."""
    return sorted(instructor.inbound.glob(f"{student}+{A2}+*"), key=lambda p: p.name.split("+")[2])


def nbgrader_time(moment: datetime) -> str:
    """A time as nbgrader names submissions and writes timestamp.txt (UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def set_due_date(teacher: Instructor, due: datetime) -> None:
    command = ["db", "assignment", "add", A2, f"--duedate={nbgrader_time(due)}"]
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", *command],
        cwd=teacher.root,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def report_rows(root: Path) -> dict[str, dict[str, str]]:
    """The latest collect report of a2: entry -> row."""
    latest = sorted((root / "grading").glob(f"collect-{A2}-*.csv"))[-1]
    with latest.open(newline="") as rows:
        return {row["entry"]: row for row in csv.DictReader(rows)}


# --- the class --------------------------------------------------------------------------


@dataclass
class Run:
    instructor: Instructor
    students: dict[str, Student]
    out: dict[str, str] = field(default_factory=dict)  # step -> what it printed
    sent: dict[str, list[bytes]] = field(default_factory=dict)  # each submission's notebook
    inbound_before_release: dict[str, bytes] = field(default_factory=dict)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    tmp = tmp_path_factory.mktemp("exchange-class")
    teacher = new_course(tmp)
    students = {name: new_student(name, tmp, teacher.exchange) for name in ("alice", "bob")}
    result = Run(teacher, students)
    result.out["release"] = teacher.ok("release")
    for student in students.values():
        result.out[f"fetch {student.name}"] = student.nbgrader("fetch_assignment", A2)
    alice, bob = students["alice"], students["bob"]
    answer(alice, teacher.root)
    _submit(result, alice)
    _submit(result, bob)  # the release as fetched: nothing answered
    answer(bob, teacher.root, only={"dual_class"})
    _submit(result, bob)
    result.inbound_before_release = files(teacher.inbound)
    result.out["release again"] = teacher.ok("release")
    result.out["collect"] = teacher.ok("collect")
    result.out["autograde"] = teacher.ok("autograde", A2, "--sandbox", SANDBOX)
    result.out["feedback"] = teacher.ok("feedback", A2)
    for student in students.values():
        result.out[f"feedback {student.name}"] = student.nbgrader("fetch_feedback", A2)
        result.out[f"list {student.name}"] = student.nbgrader("list", "--cached")
    return result


def _submit(run: Run, student: Student) -> None:
    run.out[f"submit {student.name}"] = student.nbgrader("submit", A2)
    run.sent.setdefault(student.name, []).append(student.notebook.read_bytes())


def test_release_publishes_to_the_exchange(run):
    outbound = run.instructor.exchange / "autodiff" / "outbound" / A2
    assert f"published {A2} to {outbound}/" in run.out["release"]
    released = run.instructor.root / "assignments" / A2 / NOTEBOOK
    assert (outbound / NOTEBOOK).read_bytes() == released.read_bytes()
    modes = {
        "": 0o1777,
        "autodiff": 0o755,
        "autodiff/outbound": 0o755,
        "autodiff/inbound": 0o2733,
        "autodiff/feedback": 0o711,
    }
    for folder, mode in modes.items():
        path = run.instructor.exchange / folder
        assert stat.S_IMODE(path.stat().st_mode) == mode, f"{path}: {oct(path.stat().st_mode)}"


def test_releasing_again_says_so_and_keeps_the_submissions(run):
    assert f"published {A2} again" in run.out["release again"]
    assert "submissions in the exchange stay" in run.out["release again"]
    assert run.inbound_before_release  # three submissions were there to keep
    now = files(run.instructor.inbound)
    assert {k: v for k, v in now.items() if k in run.inbound_before_release} == (
        run.inbound_before_release
    )


def test_each_student_fetched_the_release(run):
    for name in run.students:
        assert f"Fetched as: autodiff {A2}" in run.out[f"fetch {name}"]
    released = (run.instructor.root / "assignments" / A2 / NOTEBOOK).read_bytes()
    assert run.sent["bob"][0] == released  # bob handed in what he fetched


def test_the_kits_submit_leaves_each_submission_writable_by_its_student_only(run):
    """nbgrader's submit leaves the folder 0777, where a classmate could add or replace
    files; the student kit's leaves it for the instructor to read and no one else to change."""
    for name in run.students:
        for entry in entries(run.instructor, name):
            mode = stat.S_IMODE(entry.stat().st_mode)
            assert mode in (0o755, 0o2755), f"{entry}: {mode:04o}"  # setgid: as inbound gives
            for path in entry.rglob("*"):
                assert not path.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH), path


def test_collect_reports_who_submitted(run):
    out = run.out["collect"]
    assert f"collected {A2} from the exchange: 2 students into submitted/" in out
    assert "the latest of 2 submissions; the earlier one stays in the exchange" in out
    rows = report_rows(run.instructor.root)
    bob_first, bob_latest = entries(run.instructor, "bob")
    assert rows[bob_latest.name]["status"] == "collected"
    assert rows[bob_first.name]["status"] == "not collected"
    assert rows[bob_first.name]["reason"].startswith("an earlier submission: the latest is")
    (alice,) = entries(run.instructor, "alice")
    assert rows[alice.name] == {
        "entry": alice.name,
        "status": "collected",
        "student": "alice",
        "reason": "",
    }


def test_what_is_collected_is_what_each_student_submitted(run):
    root = run.instructor.root
    for name in run.students:
        latest = entries(run.instructor, name)[-1]
        folder = root / "submitted" / name / A2
        assert (
            (folder / NOTEBOOK).read_bytes()
            == run.sent[name][-1]
            == (latest / NOTEBOOK).read_bytes()
        )
        assert (folder / "timestamp.txt").read_text() == latest.name.split("+")[2]
        assert (folder / "submission_secret.txt").read_bytes() == (
            latest / "submission_secret.txt"
        ).read_bytes()
    assert len(entries(run.instructor, "bob")) == 2, "bob's first submission stays in inbound"


def test_each_student_fetches_feedback_with_their_own_score(run):
    assert "returned through the exchange to alice, bob" in run.out["feedback"]
    pages = {}
    for name, student in run.students.items():
        found = list((student.work / A2 / "feedback").glob(f"*/{A2}.html"))
        assert len(found) == 1, run.out[f"feedback {name}"]
        pages[name] = found[0]
        written = run.instructor.root / "feedback" / name / A2 / f"{A2}.html"
        assert found[0].read_bytes() == written.read_bytes()
        assert found[0].parent.name == entries(run.instructor, name)[-1].name.split("+")[2]
    alice, bob = (pages[name].read_text() for name in ("alice", "bob"))
    assert f"{A2} (Score: 20.0 / 25.0)" in alice  # 5 points are a written answer
    assert f"{A2} (Score: 6.0 / 25.0)" in bob
    assert "Score: 6.0 / 25.0" not in alice and "Score: 20.0 / 25.0" not in bob
    assert "feedback already fetched" in run.out["list bob"]


def test_nbgrader_collect_collects_as_make_collect_does(run):
    """The formgrader's Collect button runs nbgrader's collect: the kit's, by config."""
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", "collect", A2],
        cwd=run.instructor.root,
        env=dict(os.environ, NBGRADER_EXCHANGE=str(run.instructor.exchange)),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "alice        already collected" in done.stderr
    assert "the latest of 2 submissions" in done.stderr


# --- each bad input of a collection ------------------------------------------------------


@pytest.fixture(scope="module")
def trouble(tmp_path_factory) -> Instructor:
    """A second course, released once, for collections that go wrong."""
    teacher = new_course(tmp_path_factory.mktemp("exchange-trouble"))
    teacher.ok("release")
    return teacher


def hand_in(
    teacher: Instructor, student: str, when: str, assignment: str = A2, text: str = ""
) -> Path:
    """A submission as nbgrader submit leaves it: the release, timestamp.txt, a secret."""
    entry = teacher.inbound / f"{student}+{assignment}+{when}+rAnd0m"
    entry.mkdir()
    released = teacher.root / "assignments" / A2 / NOTEBOOK
    (entry / f"{assignment}.ipynb").write_text(released.read_text() + text)
    (entry / "timestamp.txt").write_text(when)
    (entry / "submission_secret.txt").write_text(f"secret of {student} at {when}")
    return entry


def test_a_newer_submission_replaces_the_collected_one_which_is_kept(trouble):
    first = hand_in(trouble, "carol", nbgrader_time(datetime.now(UTC)), text="\n")
    trouble.ok("collect", A2)
    second = hand_in(trouble, "carol", nbgrader_time(datetime.now(UTC)), text="\n\n")
    out = trouble.ok("collect", A2)
    line = next(line for line in out.splitlines() if line.strip().startswith("carol"))
    assert "replaces the one collected before, kept in grading/backups/" in line
    kept = trouble.root / line.split("kept in ")[1].split("/ ")[0].rstrip("/")
    assert (kept / NOTEBOOK).read_bytes() == (first / NOTEBOOK).read_bytes()
    collected = trouble.root / "submitted" / "carol" / A2
    assert (collected / NOTEBOOK).read_bytes() == (second / NOTEBOOK).read_bytes()
    assert first.exists() and second.exists(), "the exchange keeps both"


def test_a_late_submission_is_collected_and_reported_late(trouble):
    now = datetime.now(UTC)  # the submission's name and files agree: made now
    due = now - timedelta(days=1, hours=3, minutes=4, seconds=30)
    set_due_date(trouble, due)
    hand_in(trouble, "dave", nbgrader_time(now))
    out = trouble.ok("collect", A2)
    assert f"late by 1 d 3 h 4 min (due {due:%Y-%m-%d %H:%M} UTC)" in out, out
    timestamp = trouble.root / "submitted" / "dave" / A2 / "timestamp.txt"
    assert timestamp.read_text() == nbgrader_time(now)  # autograde's late penalty reads it


def test_a_submission_of_an_assignment_never_released_stays(trouble):
    entry = hand_in(trouble, "erin", "2026-02-01 00:00:00.000000 UTC", assignment="a9_secret")
    out = trouble.ok("collect")
    assert f"not collected, left where they are in {trouble.inbound}/" in out
    assert f"{entry.name}: 'a9_secret' was never released" in out
    assert entry.is_dir() and not (trouble.root / "submitted" / "erin").exists()


def test_odd_entries_are_reported_and_left_alone(trouble, tmp_path):
    secret = tmp_path / "instructor-only.txt"
    secret.write_text("not for students")
    named_up = hand_in(trouble, "..", "2026-02-01 00:00:00.000000 UTC")
    no_time = hand_in(trouble, "gina", "yesterday-ish")
    linked = trouble.inbound / f"frank+{A2}+2026-02-01 00:00:00.000000 UTC+x"
    linked.symlink_to(tmp_path)
    heidi = hand_in(trouble, "heidi", "2026-02-01 00:00:00.000000 UTC")
    (heidi / "notes.txt").symlink_to(secret)
    out = trouble.ok("collect", A2)
    assert f"not collected: {named_up.name}: unusable student id: '..'" in out
    assert "unreadable time 'yesterday-ish' in its name" in out
    assert f"{linked.name}: a link or a file, not a submission's folder" in out
    assert "links not copied: notes.txt" in out
    collected = trouble.root / "submitted" / "heidi" / A2
    assert (collected / NOTEBOOK).is_file() and not (collected / "notes.txt").exists()
    assert not (trouble.root / A2).exists(), "'..' would have been filed beside submitted/"
    assert not (trouble.root / "submitted" / "gina").exists()
    assert not (trouble.root / "submitted" / "frank").exists()
    assert named_up.is_dir() and no_time.is_dir() and linked.is_symlink()


def test_on_a_hub_a_submission_under_another_students_id_is_refused(trouble):
    """On make hub, each student's server runs as their own account, and the exchange
    says how accounts are named: an entry for judy made by another account (a student
    who told nbgrader judy's id) is not collected; the account's own entry is."""
    me = pwd.getpwuid(os.getuid()).pw_name  # the account prefix "" + this id
    write_accounts(trouble.exchange, "")
    try:
        own = hand_in(trouble, me, "2026-03-01 00:00:00.000000 UTC")
        spoofed = hand_in(trouble, "judy", "2026-03-01 00:00:00.000000 UTC")
        out = trouble.ok("collect", A2)
        assert f"{spoofed.name}: made by the account {me}, not by judy" in out, out
        assert not (trouble.root / "submitted" / "judy").exists() and spoofed.is_dir()
        collected = trouble.root / "submitted" / me / A2 / NOTEBOOK
        assert collected.read_bytes() == (own / NOTEBOOK).read_bytes()
        # the declaration itself must be the hub's: one others could write says nothing
        (trouble.exchange / ACCOUNTS_FILE).chmod(0o666)
        done = trouble.run("collect", A2)
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert "it is not the hub's (root's, not writable by others)" in done.stderr
    finally:
        (trouble.exchange / ACCOUNTS_FILE).unlink()


def _chown_away(path: Path) -> None:
    os.chown(path, 65534, -1)  # nobody


# folder (under the exchange), its mode or a change, what the message must say
PERMISSIONS = {
    "inbound closed to students": (
        "autodiff/inbound",
        0o700,
        "students cannot submit; fix: chmod 2733",
    ),
    "inbound open to students": (
        "autodiff/inbound",
        0o777,
        "list and copy the others' submissions",
    ),
    "inbound unreadable by you": (
        "autodiff/inbound",
        0o333,
        "you cannot read or write it; fix: chmod 2733",
    ),
    "outbound closed to students": (
        "autodiff/outbound",
        0o700,
        "students cannot fetch assignments; fix: chmod 755",
    ),
    "exchange not writable by students": (
        "",
        0o755,
        "students' nbgrader commands refuse an exchange they cannot write to; fix: chmod 1777",
    ),
    "course folder not yours": ("autodiff", _chown_away, "not you (root); fix: chown -R root"),
}


@pytest.mark.parametrize("case", PERMISSIONS, ids=PERMISSIONS)
def test_an_exchange_with_wrong_permissions_stops_collect_before_anything(trouble, case):
    folder, change, says = PERMISSIONS[case]
    if callable(change) and os.getuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    if not entries(trouble, "ivan"):  # something to collect, were the exchange sound
        hand_in(trouble, "ivan", "2026-02-02 00:00:00.000000 UTC")
    path = trouble.exchange / folder
    info = path.stat()
    before = files(trouble.root / "submitted"), sorted(p.name for p in trouble.inbound.iterdir())
    try:
        if callable(change):
            change(path)
        else:
            path.chmod(change)
        done = trouble.run("collect")
        message = done.stderr
    finally:
        os.chown(path, info.st_uid, info.st_gid)
        path.chmod(stat.S_IMODE(info.st_mode))
    assert done.returncode != 0 and "Traceback" not in message, message
    assert "error: nothing was collected: the exchange needs fixing first" in message
    assert f"{path} is d" in message and says in message, message
    assert "NBGRADER_EXCHANGE=/path points the course at another one" in message
    assert (
        files(trouble.root / "submitted"),
        sorted(p.name for p in trouble.inbound.iterdir()),
    ) == before


def test_an_exchange_where_nothing_was_released(trouble, tmp_path):
    empty = Instructor(trouble.root, tmp_path / "elsewhere")
    done = empty.run("collect")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert f"nothing is published in the exchange {tmp_path / 'elsewhere'}" in done.stderr


# --- the Assignment List in a student's Jupyter server -----------------------------------


TOKEN = "exchange-test-token"


def call(port: int, path: str, body: dict | None = None):
    """GET (or POST ``body`` as JSON) on the student's server; the decoded answer."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        return json.loads(answer.read())


@pytest.fixture
def student_server(run, tmp_path):
    """carol's Jupyter server (nbgrader's extensions as installed), in her folder."""
    carol = new_student("carol", tmp_path, run.instructor.exchange)
    port = free_port()
    env = dict(carol.env(), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    command = [sys.executable, "-m", "jupyter", "server", "--no-browser", "--ip=127.0.0.1"]
    command += [f"--port={port}", f"--ServerApp.token={TOKEN}"]
    command += ["--allow-root"] if os.getuid() == 0 else []
    with serving(command, carol.work, env, port, tmp_path / "server.log"):
        yield port, carol


def test_the_assignment_list_lists_fetches_and_submits(student_server, run):
    port, carol = student_server
    assert call(port, "/courses") == {"success": True, "value": ["autodiff"]}
    listed = call(port, "/assignments?course_id=autodiff")
    assert listed["success"], listed
    assert [(a["assignment_id"], a["status"]) for a in listed["value"]] == [(A2, "released")]
    fetched = call(port, "/assignments/fetch", {"course_id": "autodiff", "assignment_id": A2})
    assert [(a["assignment_id"], a["status"]) for a in fetched["value"]] == [(A2, "fetched")]
    assert carol.notebook.is_file()
    answer(carol, run.instructor.root, only={"dual_class"})
    submitted = call(port, "/assignments/submit", {"course_id": "autodiff", "assignment_id": A2})
    assert submitted["success"], submitted
    mine = [a for a in submitted["value"] if a["status"] == "submitted"]
    assert [(a["student_id"], len(a["submissions"])) for a in mine] == [("carol", 1)]
    (entry,) = entries(run.instructor, "carol")
    assert (entry / NOTEBOOK).read_bytes() == carol.notebook.read_bytes()
