"""The gradebook's safety net: copies, integrity, the run lock, guard and restore.

Every test works on a real nbgrader gradebook (made once with nbgrader's API, then
copied into each test's course root), read and changed with plain SQL.
"""

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import warnings
from contextlib import closing
from pathlib import Path

import pytest

from classroom import __main__ as grading_main
from classroom import folders
from classroom import gradebook as gb

pytest.importorskip("nbgrader")

# (assignment, student, notebook, cell): (auto_score, manual_score, extra_credit)
SCORES = {
    ("a1", "alice", "nb", "t1"): (2.0, None, None),
    ("a1", "alice", "nb", "t2"): (3.0, None, None),
    ("a1", "alice", "nb", "why"): (None, 1.0, 0.5),
    ("a1", "bob", "nb", "t1"): (1.0, None, None),
    ("a1", "bob", "nb", "t2"): (0.0, None, None),
    ("a1", "bob", "nb", "why"): (None, 0.0, None),
    ("a1", "carol", "nb", "t1"): (2.0, None, None),
    ("a1", "carol", "nb", "t2"): (1.0, 2.5, None),
    ("a1", "carol", "nb", "why"): (None, None, None),
    ("a2", "bob", "nb2", "u1"): (4.0, None, None),
}
# Every answer cell gets a comment row, written or not.
COMMENTS = {
    ("a1", "alice", "nb", "why"): None,
    ("a1", "bob", "nb", "why"): "see me",
    ("a1", "carol", "nb", "why"): None,
}


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A gradebook as nbgrader makes it: 2 assignments, 3 students, scores, comments."""
    from nbgrader.api import Gradebook

    path = tmp_path_factory.mktemp("template") / "gradebook.db"
    with pytest.MonkeyPatch.context() as patch:  # nbgrader runs `alembic` from PATH
        patch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        with Gradebook(f"sqlite:///{path}", "autodiff") as book, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SQLAlchemy's notes on nbgrader's add_submission
            _fill(book)
    return path


def _fill(book) -> None:
    book.add_assignment("a1")
    book.add_notebook("nb", "a1")
    book.add_grade_cell("t1", "nb", "a1", max_score=2, cell_type="code")
    book.add_grade_cell("t2", "nb", "a1", max_score=3, cell_type="code")
    book.add_grade_cell("why", "nb", "a1", max_score=1, cell_type="markdown")
    book.add_solution_cell("why", "nb", "a1")
    book.add_assignment("a2")
    book.add_notebook("nb2", "a2")
    book.add_grade_cell("u1", "nb2", "a2", max_score=4, cell_type="code")
    for student in ("alice", "bob", "carol"):
        book.add_student(student)
        book.add_submission("a1", student)
    book.add_submission("a2", "bob")
    for (assignment, student, notebook, cell), scores in SCORES.items():
        grade = book.find_grade(cell, notebook, assignment, student)
        grade.auto_score, grade.manual_score, grade.extra_credit = scores
    for (assignment, student, notebook, cell), text in COMMENTS.items():
        book.find_comment(cell, notebook, assignment, student).manual_comment = text
    book.db.commit()


@pytest.fixture
def root(tmp_path, template, monkeypatch) -> Path:
    """A course root with a copy of the gradebook; no environment settings leak in."""
    monkeypatch.delenv("NBGRADER_DB_URL", raising=False)
    monkeypatch.delenv("GRADING_KEEP_BACKUPS", raising=False)
    shutil.copy(template, tmp_path / "gradebook.db")
    return tmp_path


def expected(exclude=()) -> dict:
    marks = {(*key, "grade"): value for key, value in SCORES.items() if key[1] not in exclude}
    for key, text in COMMENTS.items():
        if key[1] not in exclude:
            marks[(*key, "comment")] = text
    return marks


def set_score(database: Path, student: str, cell: str, score: float) -> None:
    """What a grading run (or a student's code inside one) does to the gradebook."""
    with closing(sqlite3.connect(database)) as db:
        changed = db.execute(
            "UPDATE grade SET auto_score = ? WHERE cell_id IN "
            "(SELECT id FROM base_cell WHERE name = ? AND type = 'GradeCell') AND notebook_id IN "
            "(SELECT submitted_notebook.id FROM submitted_notebook JOIN submitted_assignment"
            " ON submitted_notebook.assignment_id = submitted_assignment.id"
            " WHERE student_id = ?)",
            (score, cell, student),
        ).rowcount
        db.commit()
    assert changed == 1


def score(database: Path, student: str, cell: str) -> float:
    with closing(sqlite3.connect(database)) as db:
        (value,) = db.execute(
            "SELECT grade.auto_score FROM grade JOIN base_cell ON grade.cell_id = base_cell.id"
            " JOIN submitted_notebook ON grade.notebook_id = submitted_notebook.id"
            " JOIN submitted_assignment ON submitted_notebook.assignment_id"
            " = submitted_assignment.id WHERE student_id = ? AND base_cell.name = ?",
            (student, cell),
        ).fetchone()
    return value


def damage(path: Path) -> None:
    """Garbage over every page but the first: SQLite still opens it, then chokes."""
    data = bytearray(path.read_bytes())
    data[4096:] = b"\xde\xad\xbe\xef" * ((len(data) - 4096) // 4)
    path.write_bytes(bytes(data))


# --- backup and integrity -----------------------------------------------------------


def test_backup_copies_the_gradebook_and_keeps_the_newest(root, monkeypatch):
    made = [gb.backup(root, keep=2) for _ in range(4)]
    folder = root / "grading" / "backups" / "gradebook"
    assert sorted(folder.iterdir()) == made[2:]
    assert re.fullmatch(r"gradebook-\d{8}T\d{12}Z\.db", made[-1].name)
    assert gb.integrity(root) is None
    monkeypatch.setenv("NBGRADER_DB_URL", f"sqlite:///{made[-1]}")  # read the copy
    assert gb.grades_of_others(root, set()) == expected()


def test_backup_keeps_as_many_as_the_environment_says(root, monkeypatch):
    monkeypatch.setenv("GRADING_KEEP_BACKUPS", "3")
    made = [gb.backup(root) for _ in range(5)]
    assert gb.kept_copies(root) == made[:1:-1]
    monkeypatch.setenv("GRADING_KEEP_BACKUPS", "none")
    with pytest.raises(SystemExit, match="GRADING_KEEP_BACKUPS=20"):
        gb.backup(root)
    with pytest.raises(SystemExit, match="at least 1"):
        gb.backup(root, keep=0)


def test_no_gradebook_yet_means_no_copy(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("NBGRADER_DB_URL", raising=False)
    assert gb.backup(tmp_path) is None
    assert gb.integrity(tmp_path) is None
    assert gb.grades_of_others(tmp_path, set()) == {}
    monkeypatch.setenv("NBGRADER_DB_URL", "postgresql://grader@db/autodiff")
    assert gb.backup(tmp_path) is None
    assert capsys.readouterr().out == (
        "note: no copy of the gradebook made: postgresql://grader@db/autodiff is not a "
        "SQLite file; back it up with the database's own tools\n"
    )


def test_integrity_names_what_is_wrong(root):
    assert gb.integrity(root) is None
    (root / "gradebook.db").write_bytes(b"this is not a database" * 500)
    assert gb.integrity(root) == "not a readable SQLite database (file is not a database)"


def test_a_damaged_gradebook_is_not_copied_over_good_copies(root):
    good = gb.backup(root)
    damage(root / "gradebook.db")
    assert gb.integrity(root) is not None
    message = f"the gradebook {root / 'gradebook.db'} is damaged .*`make restore`"
    with pytest.raises(SystemExit, match=message):
        gb.backup(root)
    assert gb.kept_copies(root) == [good]


# --- grades of others ---------------------------------------------------------------


def test_grades_of_others_leaves_out_the_graded_students(root):
    assert gb.grades_of_others(root, set()) == expected()
    others = gb.grades_of_others(root, {"alice", "carol"})
    assert others == expected(exclude=("alice", "carol"))
    assert others[("a1", "bob", "nb", "why", "comment")] == "see me"
    assert others[("a2", "bob", "nb2", "u1", "grade")] == (4.0, None, None)
    assert len(others) == 5


# --- guard --------------------------------------------------------------------------


def test_guard_puts_the_gradebook_back_when_another_students_grade_changes(root):
    database = root / "gradebook.db"
    with pytest.raises(SystemExit) as stop:
        with gb.guard(root, {"alice"}) as check:
            set_score(database, "alice", "t1", 0.0)
            set_score(database, "bob", "t2", 3.0)
    assert check.changed == ["bob"]
    rejected = f"grading/backups/gradebook/{check.rejected.name}"
    assert str(stop.value) == (
        "error: the grading run changed grades of students it was not grading: bob. "
        "The gradebook is back as it was before the run, without this run's grades; "
        f"what it left is kept as {rejected}. Find out why, then grade again (FORCE=1)"
    )
    assert gb.grades_of_others(root, set()) == expected()  # alice's new grade goes too
    assert re.fullmatch(r"rejected-\d{8}T\d{12}Z\.db", check.rejected.name)
    assert score(check.rejected, "bob", "t2") == 3.0
    assert gb.kept_copies(root) == [check.rejected, check.backup]


def test_guard_keeps_the_grades_of_the_students_being_graded(root, capsys):
    with gb.guard(root, {"alice", "carol"}) as check:
        set_score(root / "gradebook.db", "alice", "t1", 0.0)
        set_score(root / "gradebook.db", "carol", "t2", 3.0)
    assert (check.problem, check.changed, check.rejected) == ("", [], None)
    assert score(root / "gradebook.db", "alice", "t1") == 0.0
    assert score(root / "gradebook.db", "carol", "t2") == 3.0
    assert gb.kept_copies(root) == [check.backup]
    assert score(check.backup, "alice", "t1") == 2.0
    assert capsys.readouterr() == ("", "")


def test_guard_checks_also_when_the_run_fails(root, capsys):
    with pytest.raises(RuntimeError, match="nbgrader crashed"):
        with gb.guard(root, {"alice"}) as check:
            set_score(root / "gradebook.db", "carol", "t1", 0.0)
            raise RuntimeError("nbgrader crashed")
    assert check.changed == ["carol"]
    assert score(root / "gradebook.db", "carol", "t1") == 2.0
    assert capsys.readouterr().err == f"error: {check.problem}\n"


def test_guard_puts_back_a_damaged_or_deleted_gradebook(root):
    with pytest.raises(
        SystemExit, match=r"left the gradebook damaged \(.*\)\. The gradebook is back"
    ):
        with gb.guard(root, {"alice"}) as check:
            damage(root / "gradebook.db")
    assert gb.grades_of_others(root, set()) == expected()
    assert check.rejected.read_bytes() != (root / "gradebook.db").read_bytes()
    with pytest.raises(SystemExit, match=r"damaged \(deleted\)\. The gradebook is back"):
        with gb.guard(root, {"alice"}) as check:
            (root / "gradebook.db").unlink()
    assert check.rejected is None
    assert gb.grades_of_others(root, set()) == expected()


def test_guard_on_a_first_run_and_on_a_database_server(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("NBGRADER_DB_URL", raising=False)
    with gb.guard(tmp_path, {"alice"}) as check:  # no gradebook yet, and none made
        pass
    assert check == gb.Check()
    monkeypatch.setenv("NBGRADER_DB_URL", "postgresql://grader@db/autodiff")
    with gb.guard(tmp_path, {"alice"}) as check:
        pass
    assert check == gb.Check()
    assert capsys.readouterr().out.startswith("note: no copy of the gradebook made: postgresql")


# --- the run lock -------------------------------------------------------------------

HOLD = """
import sys, time
from pathlib import Path
from classroom.gradebook import RunLock
with RunLock(Path(sys.argv[1]), wait=sys.argv[2] == "wait"):
    print("locked", flush=True)
    time.sleep(float(sys.argv[3]))
"""


def hold(root: Path, how: str = "stop", seconds: float = 120) -> subprocess.Popen:
    command = [sys.executable, "-c", HOLD, str(root), how, str(seconds)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_second_run_stops_and_says_who_runs(tmp_path):
    holder = hold(tmp_path)
    try:
        assert holder.stdout.readline() == "locked\n"
        second = hold(tmp_path, seconds=0)
        out, err = second.communicate(timeout=60)
    finally:
        holder.kill()
        holder.wait()
    assert (second.returncode, out) == (1, "")
    assert re.fullmatch(
        rf"error: another grading run is going \(pid {holder.pid}, started "
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC by user [^ ]+\): "
        r"wait for it to finish, or run again with WAIT=1\n",
        err,
    )


def test_a_killed_run_leaves_the_course_unlocked_and_a_waiting_run_goes_on(tmp_path):
    holder = hold(tmp_path)
    assert holder.stdout.readline() == "locked\n"
    waiting = hold(tmp_path, "wait", seconds=0)
    line = waiting.stdout.readline()
    assert line.startswith(f"waiting for the grading run of pid {holder.pid}, started ")
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    out, _ = waiting.communicate(timeout=60)
    assert (waiting.returncode, out) == (0, "locked\n")
    with gb.RunLock(tmp_path) as lock:
        assert lock.path.read_text().startswith(f'{{"pid": {os.getpid()}, ')
    assert lock.path.read_text() == ""


def test_the_lock_nests_in_one_process(tmp_path):
    with gb.RunLock(tmp_path) as outer:
        with gb.RunLock(tmp_path, wait=True) as inner:
            assert inner is outer
        second = hold(tmp_path, seconds=0)
        assert second.wait(timeout=60) == 1  # still held after the inner one ended


# --- restore ------------------------------------------------------------------------


def test_restore_puts_back_the_newest_copy_and_keeps_the_replaced_one(root, capsys):
    database = root / "gradebook.db"
    older = gb.backup(root)
    set_score(database, "bob", "t1", 2.0)
    newest = gb.backup(root)
    set_score(database, "bob", "t1", 0.0)
    assert gb.restore(root) == newest
    assert score(database, "bob", "t1") == 2.0
    saved = gb.kept_copies(root)[0]
    assert saved.name.startswith("before-restore-") and score(saved, "bob", "t1") == 0.0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"restored gradebook.db from grading/backups/gradebook/{newest.name}")
    assert (
        out[1]
        == f"the gradebook it replaced is kept: `make restore WHICH={saved.name}` undoes this"
    )
    assert gb.restore(root, older.name) == older
    assert score(database, "bob", "t1") == 1.0
    assert gb.restore(root, saved.name) == saved  # undo: as before the first restore
    assert score(database, "bob", "t1") == 0.0


def test_restore_list_and_by_number(root, capsys):
    older, newest = gb.backup(root), gb.backup(root)
    assert gb.restore(root, "list") is None
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "copies of the gradebook in grading/backups/gradebook/, newest first:"
    assert re.fullmatch(
        rf"   1  {newest.name} +\d{{4}}-.* UTC +0\.\d MB  before a grading run", lines[1]
    )
    assert lines[2].startswith(f"   2  {older.name} ")
    assert len(lines) == 4
    assert gb.restore(root, "2") == older


def test_restore_refuses_damaged_or_unknown_copies(root):
    with pytest.raises(SystemExit, match="no copy of the gradebook in grading/backups/gradebook"):
        gb.restore(root)
    copy = gb.backup(root)
    with pytest.raises(SystemExit, match="no kept copy 'gradebook-1.db'.*WHICH=list"):
        gb.restore(root, "gradebook-1.db")
    damage(copy)
    with pytest.raises(SystemExit, match=f"{copy.name} is damaged .*nothing was changed"):
        gb.restore(root)
    assert gb.grades_of_others(root, set()) == expected()


def test_restore_mends_a_damaged_gradebook(root, capsys):
    gb.backup(root)
    (root / "gradebook.db-journal").write_bytes(b"a journal of the damaged file")
    (root / "gradebook.db").write_bytes(b"garbage" * 1000)
    gb.restore(root)
    assert gb.grades_of_others(root, set()) == expected()
    assert not (root / "gradebook.db-journal").exists()
    assert gb.kept_copies(root)[0].read_bytes() == b"garbage" * 1000
    assert "note: the gradebook replaced was damaged (" in capsys.readouterr().out


# --- folders ------------------------------------------------------------------------


def test_restore_submissions_from_a_collect_copy(tmp_path):
    kept = tmp_path / "grading" / "backups" / "a1"
    (kept / "20261101T100000000000Z" / "alice").mkdir(parents=True)
    (kept / "20261101T100000000000Z" / "alice" / "a1.ipynb").write_text("first")
    (kept / "20261102T100000000000Z" / "alice").mkdir(parents=True)
    (kept / "20261102T100000000000Z" / "alice" / "a1.ipynb").write_text("second")
    (kept / "not-collected-20261102T100000000000Z" / "x").mkdir(parents=True)
    (tmp_path / "submitted" / "alice" / "a1").mkdir(parents=True)
    (tmp_path / "submitted" / "alice" / "a1" / "a1.ipynb").write_text("third")
    (tmp_path / "submitted" / "bob" / "a1").mkdir(parents=True)
    folders.restore_folder(tmp_path, "submissions", "a1")
    assert (tmp_path / "submitted" / "alice" / "a1" / "a1.ipynb").read_text() == "second"
    assert (tmp_path / "submitted" / "bob" / "a1").is_dir()
    copies = folders.folder_copies(tmp_path, "a1", "submitted")
    undo = list(copies)[-1]
    assert list(copies)[:2] == ["20261101T100000000000Z", "20261102T100000000000Z"]
    assert (copies[undo] / "alice" / "a1.ipynb").read_text() == "third"
    folders.restore_folder(tmp_path, "submitted", "a1", "20261101T100000000000Z")
    assert (tmp_path / "submitted" / "alice" / "a1" / "a1.ipynb").read_text() == "first"
    folders.restore_folder(tmp_path, "submitted", "a1", undo)
    assert (tmp_path / "submitted" / "alice" / "a1" / "a1.ipynb").read_text() == "third"


def test_restore_autograded_copies(tmp_path):
    copy = tmp_path / "grading" / "backups" / "a1" / "20261101T100000000000Z"
    (copy / "autograded" / "alice").mkdir(parents=True)
    (copy / "autograded" / "alice" / "a1.ipynb").write_text("graded")
    (copy / "alice").mkdir()  # the submission copied the same time
    assert folders.folder_copies(tmp_path, "a1", "feedback") == {}
    folders.restore_folder(tmp_path, "autograded", "a1")
    assert (tmp_path / "autograded" / "alice" / "a1" / "a1.ipynb").read_text() == "graded"
    with pytest.raises(SystemExit, match="no kept copy of feedback/ for a1"):
        folders.restore_folder(tmp_path, "feedback", "a1")
    with pytest.raises(SystemExit, match="ASSIGNMENT=<name>"):
        folders.restore_folder(tmp_path, "autograded", None)


# --- the command line ---------------------------------------------------------------


def test_command_line_restore(root, monkeypatch, capsys):
    (root / "nbgrader_config.py").write_text("")
    monkeypatch.chdir(root)
    copy = gb.backup(root)
    (root / "grading" / "backups" / "a1" / "20261101T100000000000Z" / "alice").mkdir(parents=True)
    assert grading_main.main(["restore", "list"]) == 0
    out = capsys.readouterr().out
    assert f"   1  {copy.name}" in out
    assert (
        "  a1                       submitted   20261101T100000000000Z                   1 students"
        in out
    )
    set_score(root / "gradebook.db", "bob", "t1", 0.0)
    assert grading_main.main(["restore"]) == 0
    assert score(root / "gradebook.db", "bob", "t1") == 1.0
    assert capsys.readouterr().out.startswith(
        f"restored gradebook.db from grading/backups/gradebook/{copy.name}"
    )


def test_makefile_has_a_restore_target():
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    assert re.search(r"^restore: .*\n\t\$\(GRADE\) restore \$\(WHICH\) ", makefile, re.MULTILINE)


def test_nothing_is_restored_during_a_grading_run(root):
    gb.backup(root)
    set_score(root / "gradebook.db", "bob", "t1", 0.0)
    holder = hold(root)
    try:
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(SystemExit, match=f"another grading run is going \\(pid {holder.pid},"):
            gb.restore(root)
    finally:
        holder.kill()
        holder.wait()
    assert score(root / "gradebook.db", "bob", "t1") == 0.0
    assert [p.name.split("-")[0] for p in gb.kept_copies(root)] == ["gradebook"]
