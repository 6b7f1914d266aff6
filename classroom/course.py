"""What the grading modules share: the course's folders, and running nbgrader in them."""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

GRADING_DIR = "grading"  # reports, logs and backups (git-ignored)
_STUDENT_ID = re.compile(r"[a-z0-9._@-]+")  # ids are lower-cased first


# --- running nbgrader ---------------------------------------------------------------


def nbgrader(root: Path, *args: str, timeout: float | None = None, log: Path | None = None):
    """Run one nbgrader command in the course root; returns (exit code, output), the
    code None after a time-out. nbgrader finds ``alembic`` on PATH, hence the venv's
    bin first."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    code, output = run_captured([sys.executable, "-m", "nbgrader", *args], root, env, timeout)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"$ nbgrader {' '.join(args)}\n{output}")
    return code, output


def run_captured(
    command: list[str], cwd: Path | None = None, env=None, timeout: float | None = None
) -> tuple[int | None, str]:
    """Run ``command``; returns (exit code, or None after ``timeout`` s; output).

    Output goes to a temporary file, not a pipe, so a kernel that outlives the command
    cannot block the reading. On a time-out, the command and every process it started
    (kernels start their own sessions, so they are found by parentage) are killed.
    """
    with tempfile.TemporaryFile("w+", errors="replace") as sink:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            code: int | None = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(process.pid)
            process.wait()
            code = None
        sink.seek(0)
        return code, sink.read()


def kill_tree(pid: int) -> None:
    """Kill ``pid`` and its descendants (Linux: read from /proc; elsewhere just ``pid``)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    doomed, todo = [], [pid]
    while todo:
        current = todo.pop()
        doomed.append(current)
        todo.extend(children.get(current, []))
    for victim in doomed:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass


def assignments(root: Path) -> list[str]:
    """The assignments: folders of ``solutions/`` holding a notebook."""
    return sorted(p.parent.name for p in (root / "solutions").glob("*/*.ipynb"))


def check_assignment(root: Path, assignment: str) -> None:
    if assignment not in assignments(root):
        known = ", ".join(assignments(root)) or "none"
        raise SystemExit(f"error: no assignment {assignment!r} in solutions/ (there are: {known})")


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def released_notebooks(root: Path, assignment: str) -> list[str]:
    return sorted(p.stem for p in (root / "assignments" / assignment).glob("*.ipynb"))


def database_url(root: Path) -> str:
    """The gradebook's URL, as nbgrader_config.py sets it."""
    return os.environ.get("NBGRADER_DB_URL", f"sqlite:///{root / 'gradebook.db'}")


def open_gradebook(root: Path):
    """nbgrader's Gradebook of the course (a context manager)."""
    from nbgrader.api import Gradebook

    return Gradebook(database_url(root), "autodiff")


def is_test(cell) -> bool:
    """A test cell: graded code the student does not write (nbgrader's metadata)."""
    meta = cell.metadata.get("nbgrader", {})
    graded = cell.cell_type == "code" and meta.get("grade", False)
    return bool(graded) and not meta.get("solution", False)


# --- what collecting prints ---------------------------------------------------------


def usable_id(student: str) -> bool:
    """A safe folder name on any system: ASCII letters, digits and ``._-@``, and not
    hidden (nor ``..``)."""
    return bool(_STUDENT_ID.fullmatch(student)) and not student.startswith(".")


def counted(n: int, one: str, many: str = "") -> str:
    """``1 student``, ``2 students``, ``3 entries`` (with ``many="entries"``)."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def shown(name: str) -> str:
    """A name as it can be printed: a name with control characters is quoted, so it
    cannot move the cursor or recolour the instructor's terminal."""
    return name if name.isprintable() else repr(name)


def write_collect_report(root: Path, assignment: str, run: str, rows: list[tuple]) -> Path:
    """``grading/collect-<assignment>-<run>.csv``: one row (entry, status, student,
    reason) per thing a collection looked at, collected or not."""
    report = root / GRADING_DIR / f"collect-{assignment}-{run}.csv"
    report.parent.mkdir(parents=True, exist_ok=True)
    with report.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["entry", "status", "student", "reason"])
        writer.writerows(rows)
    return report
