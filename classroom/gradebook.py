"""Keeping the gradebook safe while students' code is graded.

nbgrader keeps every grade and comment in one SQLite file (``gradebook.db``), and a
grading run executes code that students wrote. So each run is treated as something
that may go wrong, and everything it could break can be put back:

* ``backup``: a consistent, checked copy (SQLite's online backup API) in
  ``grading/backups/gradebook/``; the last 20 are kept (``GRADING_KEEP_BACKUPS``);
* ``RunLock``: one grading run at a time (``grading/autograde.lock``);
* ``guard``: around a run: the lock, a copy, and afterwards the proof that only the
  graded students' grades changed; if not, the copy goes back in place;
* ``restore`` (``make restore``): a kept copy back in place, after keeping the
  gradebook it replaces (``folders.py`` does the same for ``submitted/`` and others).

The pipeline guards a run like this::

    with gradebook.guard(root, set(students), wait=wait):
        outcomes = _grade(root, assignment, students, ...)
"""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import re
import shutil
import socket
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, ClassVar

from .course import GRADING_DIR, database_url, stamp

BACKUPS = Path(GRADING_DIR) / "backups"  # under the course root
COPIES = BACKUPS / "gradebook"
KEEP = 20  # copies of each kind kept, unless GRADING_KEEP_BACKUPS says otherwise
# What each kind of copy is; "rejected" ones are evidence and never deleted automatically.
KINDS = {
    "gradebook": "before a grading run",
    "before-restore": "before a `make restore`",
    "rejected": "what a run changed wrongly (kept for you to look at)",
}
STAMP_PATTERN = r"\d{8}T\d{12}Z"  # course.stamp(): 20261124T195501123456Z, sorts by time


# --- where the gradebook is, and whether it is sound --------------------------------


def gradebook_file(root: Path) -> Path | None:
    """The gradebook's file, or None when ``NBGRADER_DB_URL`` names another database.

    Read the way ``nbgrader_config.py`` reads it, so that both agree on the file.
    """
    url = database_url(Path(root))
    if not url.startswith("sqlite:///"):
        return None
    path = Path(url.removeprefix("sqlite:///").split("?")[0])
    return path if path.is_absolute() else Path(root) / path


def integrity(root: Path) -> str | None:
    """What is wrong with the gradebook, or None when SQLite finds it sound.

    Parameters
    ----------
    root : the course root.

    Returns
    -------
    None when ``PRAGMA integrity_check`` says ``ok`` (or there is no SQLite gradebook
    yet), else SQLite's complaint, e.g. ``"not a readable SQLite database (file is not
    a database)"``.
    """
    path = gradebook_file(root)
    if path is None or not path.exists():
        return None
    return _problem(path)


def _connect(path: Path) -> sqlite3.Connection:
    """An existing database (never a new empty one made by a typo), opened for writing:
    SQLite then rolls back a transaction left half done by a killed writer, where a
    read-only connection would report that as damage."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True)


def _problem(path: Path) -> str | None:
    try:
        with closing(_connect(path)) as db:
            rows = db.execute("PRAGMA integrity_check").fetchall()
    except sqlite3.Error as error:
        return f"not a readable SQLite database ({error})"
    messages = [str(row[0]) for row in rows]
    return None if messages == ["ok"] else "; ".join(messages[:5])


def _refuse_damaged(path: Path) -> None:
    problem = _problem(path)
    if problem:
        raise SystemExit(
            f"error: the gradebook {path} is damaged ({problem}); nothing was changed. "
            "Put back the last good copy with `make restore` "
            "(`make restore WHICH=list` shows the copies)."
        )


# --- copies -------------------------------------------------------------------------


def backup(root: Path, keep: int | None = None) -> Path | None:
    """Copy the gradebook to ``grading/backups/gradebook/gradebook-<UTC stamp>.db``.

    The copy is made with SQLite's backup API, so a grade written meanwhile is in
    it or not, never half; the gradebook is checked before and the copy after.
    Older copies beyond the newest ``keep`` are deleted.

    Parameters
    ----------
    root : the course root.
    keep : how many copies to keep; default ``GRADING_KEEP_BACKUPS``, else 20.

    Returns
    -------
    The copy, or None when there is no gradebook yet or it is not a SQLite file
    (``NBGRADER_DB_URL=postgresql://...``: back that up with the database's tools).

    Raises
    ------
    SystemExit : the gradebook is damaged (then ``make restore`` puts back a copy).

    Examples
    --------
    >>> backup(Path("/no/course/here")) is None
    True
    """
    path = gradebook_file(root)
    if path is None:
        print(
            f"note: no copy of the gradebook made: {os.environ['NBGRADER_DB_URL']} is not a "
            "SQLite file; back it up with the database's own tools"
        )
        return None
    if not path.exists():
        return None
    count = _keep(keep)
    _refuse_damaged(path)
    copy = Path(root) / COPIES / f"gradebook-{stamp()}.db"
    _copy(path, copy)
    _prune(copy.parent, "gradebook", count)
    return copy


def _keep(keep: int | None) -> int:
    text = os.environ.get("GRADING_KEEP_BACKUPS", str(KEEP)) if keep is None else str(keep)
    if not text.strip().isdigit() or int(text) < 1:
        raise SystemExit(
            f"error: cannot keep {text!r} copies of the gradebook: give a whole number "
            "of at least 1 (GRADING_KEEP_BACKUPS=20)"
        )
    return int(text)


def _copy(source: Path, target: Path) -> None:
    """Copy a live database; the copy gets its name only once it is whole and checked."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    with closing(_connect(source)) as db, closing(sqlite3.connect(partial)) as copy:
        db.backup(copy)  # one step: a read transaction over the whole file
    problem = _problem(partial)
    if problem:
        partial.unlink()
        raise SystemExit(
            f"error: the copy of {source} came out damaged ({problem}); "
            f"is the disk holding {target.parent} full or failing?"
        )
    partial.replace(target)


def _save(path: Path, target: Path) -> str | None:
    """Keep ``path`` as ``target`` as it is, also when it is damaged (byte for byte
    then: that is all there is to keep); returns what is wrong with it, if anything."""
    problem = _problem(path)
    if problem is None:
        _copy(path, target)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return problem


def _copies(folder: Path, kind: str) -> list[Path]:
    """The copies of one kind, oldest first (their stamps sort by time)."""
    pattern = re.compile(rf"{kind}-{STAMP_PATTERN}\.db")
    return sorted(p for p in folder.glob(f"{kind}-*.db") if pattern.fullmatch(p.name))


def _prune(folder: Path, kind: str, keep: int) -> None:
    for old in _copies(folder, kind)[:-keep]:
        old.unlink()


def kept_copies(root: Path) -> list[Path]:
    """Every kept copy of the gradebook, newest first (``make restore WHICH=list``)."""
    folder = Path(root) / COPIES
    copies = [path for kind in KINDS for path in _copies(folder, kind)]
    return sorted(copies, key=_stamp_of, reverse=True)


def _stamp_of(path: Path) -> str:
    found = re.search(STAMP_PATTERN, path.name)
    return found.group() if found else ""


def _when(stamp_text: str) -> str:
    try:
        made = datetime.strptime(stamp_text, "%Y%m%dT%H%M%S%fZ")
    except ValueError:
        return "?"
    return made.strftime("%Y-%m-%d %H:%M:%S UTC")


# --- what a run must not change -----------------------------------------------------

# One row per grade or comment, with the names a person reads (not nbgrader's ids):
# a row pointed elsewhere, or cut loose from its cell, shows up as a change.
_NAMES = """
    JOIN submitted_notebook ON {table}.notebook_id = submitted_notebook.id
    JOIN submitted_assignment ON submitted_notebook.assignment_id = submitted_assignment.id
    JOIN assignment ON submitted_assignment.assignment_id = assignment.id
    JOIN notebook ON submitted_notebook.notebook_id = notebook.id
    JOIN base_cell ON {table}.cell_id = base_cell.id
"""
_GRADES = (
    "SELECT assignment.name, submitted_assignment.student_id, notebook.name, base_cell.name,"
    " grade.auto_score, grade.manual_score, grade.extra_credit FROM grade"
    + _NAMES.format(table="grade")
)
_COMMENTS = (
    "SELECT assignment.name, submitted_assignment.student_id, notebook.name, base_cell.name,"
    " comment.manual_comment FROM comment" + _NAMES.format(table="comment")
)

Key = tuple[str, str, str, str, str]


def grades_of_others(root: Path, exclude: set[str]) -> dict[Key, object]:
    """Every grade and comment in the gradebook, except those of ``exclude``.

    Two SQL queries over nbgrader's tables: about 0.06 s for 500 students with 5
    assignments (``benchmarks/bench_gradebook.py``; nbgrader's ORM takes seconds), so
    it is cheap to take before and after every grading run.

    Parameters
    ----------
    root : the course root.
    exclude : the students whose grades may change (those being graded).

    Returns
    -------
    ``{(assignment, student, notebook, cell, "grade"): (auto_score, manual_score,
    extra_credit)}`` and ``{(assignment, student, notebook, cell, "comment"):
    manual_comment}``; empty when there is no SQLite gradebook (yet).
    """
    path = gradebook_file(root)
    if path is None or not path.exists():
        return {}
    marks: dict[Key, object] = {}
    with closing(_connect(path)) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        if not {"grade", "comment"} <= tables:
            return {}  # nbgrader has not set it up yet (or the tables were dropped)
        for assignment, student, notebook, cell, *scores in db.execute(_GRADES):
            if student not in exclude:
                marks[assignment, student, notebook, cell, "grade"] = tuple(scores)
        for assignment, student, notebook, cell, comment in db.execute(_COMMENTS):
            if student not in exclude:
                marks[assignment, student, notebook, cell, "comment"] = comment
    return marks


_ABSENT = object()  # a grade or comment that is not there (None is a value: not graded)


def _changed_students(before: dict[Key, object], after: dict[Key, object]) -> list[str]:
    changed = set()
    for key in before.keys() | after.keys():
        if before.get(key, _ABSENT) != after.get(key, _ABSENT):
            changed.add(key[1])
    return sorted(changed)


# --- one grading run at a time ------------------------------------------------------


class RunLock:
    """One grading run at a time: an exclusive ``flock`` on ``grading/autograde.lock``.

    The kernel drops the lock when its holder's process ends in any way, ``kill -9``
    included, so a crashed run never leaves the course locked. The file says who
    holds the lock, for the message the next run prints. Nesting in one process is
    free (the outermost ``with`` holds the lock): code that holds it may call code
    that takes it.

    Parameters
    ----------
    root : the course root.
    wait : when another run holds the lock, wait for it (True) or stop (False).

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as root, RunLock(Path(root)) as lock:
    ...     lock.path.name
    'autograde.lock'
    """

    _held: ClassVar[dict[Path, RunLock]] = {}  # by this process, outermost only

    def __init__(self, root: Path, wait: bool = False) -> None:
        self.path = (Path(root) / GRADING_DIR / "autograde.lock").resolve()
        self.wait = wait
        self._file: IO[str] | None = None

    def __enter__(self) -> RunLock:
        holder = RunLock._held.get(self.path)
        if holder is not None:
            return holder
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a+")  # Python opens it close-on-exec: kernels
        try:  # that nbgrader starts cannot inherit (and outlive us with) the lock
            self._acquire(self._file)
        except BaseException:
            self._file.close()
            raise
        self._file.truncate(0)
        self._file.write(json.dumps(_who()))
        self._file.flush()
        RunLock._held[self.path] = self
        return self

    def __exit__(self, *exc_info: object) -> None:
        if RunLock._held.get(self.path) is not self or self._file is None:
            return
        del RunLock._held[self.path]
        # Emptied, not deleted: a run waiting on this file would otherwise get a lock
        # on a deleted file while a third run locks a new one.
        self._file.truncate(0)
        self._file.close()  # drops the lock
        self._file = None

    def _acquire(self, file: IO[str]) -> None:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            holder = _holder(self.path)
        if not self.wait:
            raise SystemExit(
                f"error: another grading run is going ({holder}): "
                "wait for it to finish, or run again with WAIT=1"
            )
        print(f"waiting for the grading run of {holder} to finish ...", flush=True)
        fcntl.flock(file, fcntl.LOCK_EX)


def _who() -> dict[str, object]:
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # a container user without a name
        user = str(os.getuid())
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return {"pid": os.getpid(), "started": started, "user": user, "host": socket.gethostname()}


def _holder(path: Path) -> str:
    try:
        who = json.loads(path.read_text())
    except (OSError, ValueError):  # the holder is between taking the lock and writing
        return "pid unknown"
    host = "" if who.get("host") == socket.gethostname() else f" on {who.get('host')}"
    return f"pid {who.get('pid')}{host}, started {who.get('started')} by user {who.get('user')}"


# --- guarding a run -----------------------------------------------------------------


@dataclass
class Check:
    """What ``guard`` found once the run ended; ``problem`` is "" when all is well.

    ``backup`` is the copy made before the run (None without a SQLite gradebook);
    ``changed`` the students, not being graded, whose grades or comments changed;
    ``rejected`` the gradebook as the run left it, kept for a look.
    """

    backup: Path | None = None
    changed: list[str] = field(default_factory=list)
    problem: str = ""
    rejected: Path | None = None


@contextmanager
def guard(root: Path, graded: set[str], wait: bool = False) -> Iterator[Check]:
    """Around a grading run: only the grades of ``graded`` may change.

    Takes the ``RunLock``, makes a ``backup`` and notes everyone else's grades and
    comments. Afterwards (also after an exception) the gradebook must be sound and
    those grades unchanged. If not, the copy goes back in place, the gradebook as the
    run left it is kept as ``grading/backups/gradebook/rejected-<stamp>.db``, and
    ``SystemExit`` says what happened and whose grades changed (when the block raised,
    that exception goes on, and the same is printed).

    Parameters
    ----------
    root : the course root.
    graded : the students whose grades the run may change.
    wait : when another run holds the lock, wait for it (True) or stop (False).

    Yields
    ------
    A ``Check``, filled in when the block ends.

    Examples
    --------
    with guard(root, {"alice", "bob"}, wait=wait):
        code, output = nbgrader(root, "autograde", assignment)
    """
    root = Path(root)
    with RunLock(root, wait):
        check = Check(backup=backup(root))
        before = grades_of_others(root, graded)
        try:
            yield check
        except BaseException:
            _verify(root, graded, before, check)
            if check.problem:  # said here: the block's own exception goes on
                print(f"error: {check.problem}", file=sys.stderr, flush=True)
            raise
        _verify(root, graded, before, check)
        if check.problem:
            raise SystemExit(f"error: {check.problem}")


def _verify(root: Path, graded: set[str], before: dict[Key, object], check: Check) -> None:
    """Fill in ``check``; put the copy back when something is wrong."""
    path = gradebook_file(root)
    if path is None:
        return  # a database server: nothing here can read it
    if path.exists():
        damage = _problem(path)
    else:
        damage = "deleted" if check.backup else None  # no gradebook before, none after: fine
    if damage:
        check.problem = f"the grading run left the gradebook damaged ({damage})"
    else:
        check.changed = _changed_students(before, grades_of_others(root, graded))
        if not check.changed:
            return
        names = ", ".join(check.changed)
        check.problem = f"the grading run changed grades of students it was not grading: {names}"
    if path.exists():
        check.rejected = root / COPIES / f"rejected-{stamp()}.db"
        _save(path, check.rejected)
    _install(check.backup, path)
    kept = f"; what it left is kept as {check.rejected.relative_to(root)}" if check.rejected else ""
    check.problem += (
        f". The gradebook is back as it was before the run, without this run's grades{kept}. "
        "Find out why, then grade again (FORCE=1)"
    )


def _install(copy: Path | None, path: Path) -> None:
    """Put ``copy`` in place of the gradebook (None: there was no gradebook)."""
    if copy is not None and path.exists() and _problem(path) is None:
        # Written into the file as one transaction: an open formgrader sees the change.
        with closing(_connect(copy)) as source, closing(_connect(path)) as target:
            source.backup(target)
    else:
        for side in ("-journal", "-wal", "-shm"):  # they belong to the file replaced
            Path(f"{path}{side}").unlink(missing_ok=True)
        if copy is None:
            path.unlink(missing_ok=True)
        else:
            partial = path.with_name(path.name + ".partial")
            shutil.copyfile(copy, partial)
            partial.replace(path)
    if copy is not None:
        _refuse_damaged(path)


# --- make restore -------------------------------------------------------------------


def restore(root: Path, which: str | None = None, wait: bool = False) -> Path | None:
    """Put a kept copy of the gradebook back in place (``make restore``).

    The gradebook it replaces is kept first, as ``before-restore-<stamp>.db``, so a
    restore can be undone; the copy is checked before, the gradebook after. Takes the
    ``RunLock``: nothing is restored under a grading run.

    Parameters
    ----------
    root : the course root.
    which : None for the newest copy made before a grading run; ``"list"`` to print
        the copies; else a copy's name (or path), or its number in the list.
    wait : during a grading run, wait for its end (True) or stop (False).

    Returns
    -------
    The copy put back (None for ``"list"``).
    """
    root = Path(root)
    if which == "list":
        print_copies(root)
        return None
    path = gradebook_file(root)
    if path is None:
        raise SystemExit(
            f"error: {os.environ['NBGRADER_DB_URL']} is not a SQLite file: "
            "restore it with the database's own tools"
        )
    copy = _chosen(root, which)
    problem = _problem(copy)
    if problem:
        raise SystemExit(
            f"error: {copy.name} is damaged ({problem}); nothing was changed. "
            "Pick another copy: `make restore WHICH=list`"
        )
    with RunLock(root, wait):
        saved = _save_current(root, path)
        _install(copy, path)
    print(f"restored {path.name} from {_shown(root, copy)} (made {_when(_stamp_of(copy))})")
    if saved is not None:
        print(f"the gradebook it replaced is kept: `make restore WHICH={saved.name}` undoes this")
    return copy


def _chosen(root: Path, which: str | None) -> Path:
    folder = root / COPIES
    if which is None:
        copies = _copies(folder, "gradebook")
        if not copies:
            raise SystemExit(
                f"error: no copy of the gradebook in {COPIES}/ yet "
                "(one is made before every grading run)"
            )
        return copies[-1]
    if which.isdigit():
        listed = kept_copies(root)
        if 1 <= int(which) <= len(listed):
            return listed[int(which) - 1]
    for candidate in (folder / which, Path(which)):
        if candidate.is_file():
            return candidate
    raise SystemExit(
        f"error: no kept copy {which!r} in {COPIES}/: `make restore WHICH=list` shows them"
    )


def _save_current(root: Path, path: Path) -> Path | None:
    if not path.exists():
        return None
    saved = root / COPIES / f"before-restore-{stamp()}.db"
    problem = _save(path, saved)
    if problem:
        print(f"note: the gradebook replaced was damaged ({problem}); kept as it was")
    _prune(saved.parent, "before-restore", _keep(None))
    return saved


def print_copies(root: Path) -> None:
    """Print the kept copies of the gradebook, numbered for ``make restore WHICH=<n>``."""
    copies = kept_copies(root)
    if not copies:
        print(f"no copies of the gradebook in {COPIES}/ yet")
        return
    print(f"copies of the gradebook in {COPIES}/, newest first:")
    for number, copy in enumerate(copies, start=1):
        kind = copy.name.removesuffix(f"-{_stamp_of(copy)}.db")
        size = f"{copy.stat().st_size / 1e6:.1f} MB"
        print(f"{number:4}  {copy.name:<46} {_when(_stamp_of(copy))}  {size:>8}  {KINDS[kind]}")
    print(
        "make restore: the newest copy made before a grading run; WHICH=<number or name>: that one"
    )


def _shown(root: Path, path: Path) -> Path:
    return path.relative_to(root) if path.is_relative_to(root) else path
