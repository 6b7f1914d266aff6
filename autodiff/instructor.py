"""The instructor's side of the course: release, collect, autograde, feedback, grades.

The Makefile's grading targets call this module (``python -m autodiff.instructor``),
which drives nbgrader (configured in ``nbgrader_config.py``) and adds what a course
with real students needs around it:

* ``collect`` takes the zip an LMS hands out (Canvas, Moodle, or one folder per
  student) and keeps a copy of every earlier submission before replacing it;
* ``autograde`` grades each student in a separate process with a time limit, so an
  infinite loop, a crashed kernel or a broken notebook costs that student's points
  and nobody else's, and checks afterwards that the run did not touch other
  students' grades or submissions;
* ``feedback`` writes HTML without the hidden tests (their source and tracebacks);
* ``grades`` exports a CSV and a histogram per assignment.

Everything writes a line per student to ``grading/`` so an instructor can see
what happened without reading nbgrader's logs.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import nbformat
from nbclient.exceptions import DeadKernelError
from nbgrader.plugins.zipcollect import FileNameCollectorPlugin
from nbgrader.preprocessors import Execute, NbGraderPreprocessor

GRADING_DIR = "grading"  # reports, logs and backups (git-ignored)


# --- nbgrader plug-ins (named in nbgrader_config.py) --------------------------------


class ResilientExecute(Execute):
    """nbgrader's Execute, surviving a dead or stuck kernel.

    When a student's cell kills the kernel (``os._exit``, a segfault, running out of
    memory), nbgrader would drop the whole notebook; when a cell runs past its time
    and ignores the interrupt, every later cell would wait out its own time-out. Here
    such a cell gets an error output saying what happened, the kernel restarts, the
    earlier cells run again (all but the ones that crashed or hung), and grading goes
    on: the student loses the points that depend on that cell, not the assignment.
    """

    def preprocess_cell(self, cell, resources, index):
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            cell.outputs.append(
                _error_output(
                    "KernelDied",
                    "the kernel stopped while running "
                    "this cell (os._exit, a crash, or out of memory)",
                )
            )
        else:
            timed_out = any(
                out.get("ename") == "CellTimeoutError" for out in cell.get("outputs", [])
            )
            if not timed_out:
                return cell, resources
        self.log.warning("Cell %d crashed or ran out of time: restarting the kernel", index)
        cell.metadata["autodiff_skipped"] = True
        self._restart_and_replay(index)
        return cell, self.resources

    def _restart_and_replay(self, index: int) -> None:
        from jupyter_core.utils import run_sync

        run_sync(self.km.restart_kernel)(now=True)
        run_sync(self.kc.wait_for_ready)(timeout=self.startup_timeout)
        for earlier, cell in enumerate(self.nb.cells[:index]):
            if cell.cell_type == "code" and not cell.metadata.get("autodiff_skipped"):
                replay = nbformat.from_dict(json.loads(json.dumps(cell)))
                try:
                    self.execute_cell(replay, earlier, store_history=False)
                except DeadKernelError:  # dies again: go on without the state it had
                    run_sync(self.km.restart_kernel)(now=True)
                    run_sync(self.kc.wait_for_ready)(timeout=self.startup_timeout)
                self.nb.cells[earlier] = cell  # execute_cell stored the replay there


def _error_output(name: str, message: str):
    text = f"{name}: {message}. Grading went on in a fresh kernel without this cell."
    return nbformat.v4.new_output("error", ename=name, evalue=message, traceback=[text])


class RedactHiddenTests(NbGraderPreprocessor):
    """Feedback without the hidden tests: neither their source nor their tracebacks.

    nbgrader's feedback shows the whole autograded notebook, hidden tests included,
    and a failing test's traceback quotes the lines around it. This keeps the visible
    part of each test cell; in its tracebacks, a frame in the test cell shows only
    the failing line when it is visible, and "in the hidden tests" otherwise. Frames
    in the student's own code are kept: they help.
    """

    begin = "### BEGIN HIDDEN TESTS"
    end = "### END HIDDEN TESTS"

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code" or self.begin not in cell.source:
            return cell, resources
        lines = cell.source.splitlines()
        hidden, hiding = set(), False
        for number, line in enumerate(lines, start=1):
            if line.strip() == self.begin:
                hiding = True
            if hiding:
                hidden.add(number)
            if line.strip() == self.end:
                hiding = False
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                output.traceback = [
                    self._redact(entry, cell.execution_count, lines, hidden)
                    for entry in output.traceback
                ]
        kept = [line for number, line in enumerate(lines, start=1) if number not in hidden]
        cell.source = "\n".join(kept).rstrip()
        return cell, resources

    @staticmethod
    def _redact(entry: str, count, lines: list[str], hidden: set[int]) -> str:
        frame = re.match(rf"Cell In\[{count}\], line (\d+)", _ANSI.sub("", entry))
        if frame is None:
            return entry
        number = int(frame[1])
        if number in hidden or number > len(lines):
            return f"Cell In[{count}]: in the hidden tests\n"
        return f"Cell In[{count}], line {number}\n----> {number} {lines[number - 1]}\n"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class LMSCollector(FileNameCollectorPlugin):
    """Read the student id and notebook from the file names an LMS download uses.

    * Canvas: ``<student>_[late_]<id>_<id>_<notebook>[-<n>].ipynb``
    * Moodle: ``<Full Name>_<id>_assignsubmission_file_/<notebook>.ipynb`` (the id
      is the student id)
    * plain: ``<student>/<notebook>.ipynb``

    A notebook renamed by the student or the browser (``a1 (1).ipynb``) is taken as
    the assignment's notebook when the assignment has only one.
    """

    canvas = re.compile(r"^(?P<student_id>[^_]+)_(?:late_)?\d+_\d+_(?P<file_id>.+)\.ipynb$", re.I)
    moodle = re.compile(r"^.+_(?P<student_id>\d+)_assignsubmission_file_$")

    def collect(self, submitted_file: str) -> dict | None:
        path = Path(submitted_file)
        if path.suffix != ".ipynb" or path.name.startswith("."):
            return None
        if match := self.canvas.match(path.name):
            student, notebook = match["student_id"], match["file_id"]
        elif match := self.moodle.match(path.parent.name):
            student, notebook = match["student_id"], path.stem
        elif path.parent.name not in ("extracted", "") and "_" not in path.parent.name:
            student, notebook = path.parent.name, path.stem
        else:
            self.log.warning("Cannot tell whose submission this is: %s", path.name)
            return None
        return {"student_id": student.lower(), "file_id": self._notebook(notebook) + ".ipynb"}

    def _notebook(self, name: str) -> str:
        name = re.sub(r"(-\d+| \(\d+\))$", "", name)
        released = _released_notebooks(Path.cwd(), self.parent.coursedir.assignment_id)
        if name not in released and len(released) == 1:
            self.log.warning("Notebook %r taken as %r", name, released[0])
            return released[0]
        return name


def _released_notebooks(root: Path, assignment: str) -> list[str]:
    return sorted(p.stem for p in (root / "assignments" / assignment).glob("*.ipynb"))


# --- running nbgrader ---------------------------------------------------------------


def nbgrader(root: Path, *args: str, timeout: float | None = None, log: Path | None = None):
    """Run one nbgrader command in the course root; returns (exit code, output).

    The command runs in its own process group, so a time-out stops the kernels it
    started too. nbgrader finds ``alembic`` on PATH, hence the venv's bin first.
    """
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    command = [sys.executable, "-m", "nbgrader", *args]
    process = subprocess.Popen(
        command,
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        code = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        code = None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"$ nbgrader {' '.join(args)}\n{output}")
    return code, output


def assignments(root: Path) -> list[str]:
    """The assignments: folders of ``solutions/`` holding a notebook."""
    return sorted(p.parent.name for p in (root / "solutions").glob("*/*.ipynb"))


def _check_assignment(root: Path, assignment: str) -> None:
    if assignment not in assignments(root):
        known = ", ".join(assignments(root)) or "none"
        raise SystemExit(f"error: no assignment {assignment!r} in solutions/ (there are: {known})")


# --- release ------------------------------------------------------------------------


def release(root: Path) -> None:
    """Write the student version of every assignment into ``assignments/``."""
    for assignment in assignments(root):
        log = root / GRADING_DIR / "logs" / f"release-{assignment}.log"
        code, output = nbgrader(root, "generate_assignment", assignment, "--force", log=log)
        if code != 0:
            raise SystemExit(f"error: releasing {assignment} failed; see {log}\n{output[-2000:]}")
        print(f"released {assignment} -> assignments/{assignment}/")


# --- collect ------------------------------------------------------------------------


def collect(root: Path, zip_path: Path, assignment: str | None = None) -> None:
    """Take an LMS download (a zip of notebooks) into ``submitted/<student>/<assignment>/``.

    The assignment is read from the notebooks' names when not given. Earlier
    submissions of the students in the zip are copied to ``grading/backups/``
    first: a resubmission replaces, nothing is lost.
    """
    if not zipfile.is_zipfile(zip_path):
        raise SystemExit(f"error: {zip_path} is not a zip file (ZIP=path/to/download.zip)")
    assignment = assignment or _assignment_in_zip(root, zip_path)
    _check_assignment(root, assignment)
    if not (root / "assignments" / assignment).is_dir():
        raise SystemExit(f"error: {assignment} is not released yet: run `make release` first")
    backup = _backup_submissions(root, assignment)
    archive = root / "downloaded" / assignment / "archive"
    archive.mkdir(parents=True, exist_ok=True)
    for old in archive.iterdir():  # keep earlier downloads, but collect only this one
        old.rename(root / "downloaded" / assignment / f"{old.name}.{_stamp()}")
    shutil.copy(zip_path, archive / zip_path.name)
    log = root / GRADING_DIR / "logs" / f"collect-{assignment}-{_stamp()}.log"
    code, output = nbgrader(root, "zip_collect", assignment, "--force", log=log)
    if code != 0:
        raise SystemExit(f"error: collecting failed; see {log}\n{output[-2000:]}")
    skipped = [line for line in output.splitlines() if "Cannot tell whose" in line]
    students = sorted(p.parent.name for p in (root / "submitted").glob(f"*/{assignment}"))
    print(f"collected {assignment}: {len(students)} students in submitted/")
    if backup:
        print(f"earlier submissions kept in {backup.relative_to(root)}")
    for line in skipped:
        print("skipped:", line.split("whose submission this is: ")[-1])


def _assignment_in_zip(root: Path, zip_path: Path) -> str:
    with zipfile.ZipFile(zip_path) as archive:
        names = " ".join(archive.namelist())
    found = [name for name in assignments(root) if name in names]
    if len(found) != 1:
        seen = ", ".join(found) or "none of them"
        raise SystemExit(
            f"error: cannot tell the assignment from the file names in {zip_path} ({seen}); "
            "say which: make collect ZIP=... ASSIGNMENT=<name>"
        )
    return found[0]


def _backup_submissions(root: Path, assignment: str) -> Path | None:
    existing = list((root / "submitted").glob(f"*/{assignment}"))
    if not existing:
        return None
    backup = root / GRADING_DIR / "backups" / assignment / _stamp()
    for folder in existing:
        shutil.copytree(folder, backup / folder.parent.name)
    return backup


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")


# --- autograde ----------------------------------------------------------------------


@dataclass
class Outcome:
    student: str
    status: str  # graded, invalid notebook, timed out, failed, tampering
    score: float | None = None
    max_score: float | None = None
    seconds: float = 0.0
    note: str = ""


def autograde(
    root: Path,
    assignment: str,
    student: str | None = None,
    force: bool = False,
    student_timeout: float = 900.0,
) -> list[Outcome]:
    """Grade every submission of ``assignment`` (or one student's), one process each."""
    _check_assignment(root, assignment)
    students = sorted(p.parent.name for p in (root / "submitted").glob(f"*/{assignment}"))
    if student is not None:
        if student not in students:
            raise SystemExit(f"error: no submission submitted/{student}/{assignment}/")
        students = [student]
    if not students:
        raise SystemExit(f"error: nothing submitted for {assignment} (make collect ZIP=...)")
    outcomes = []
    for name in students:
        if not force and _already_graded(root, name, assignment):
            continue
        outcome = _grade_one(root, assignment, name, student_timeout)
        if outcome.status == "graded":
            stamp = _stamp_file(root, name, assignment)
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(_digest(root, name, assignment))
        print(_describe(outcome))
        outcomes.append(outcome)
    _write_report(root, assignment, outcomes)
    return outcomes


def _already_graded(root: Path, student: str, assignment: str) -> bool:
    """Graded before, from exactly the files submitted now."""
    graded = root / "autograded" / student / assignment
    stamp = _stamp_file(root, student, assignment)
    return (
        graded.is_dir()
        and stamp.exists()
        and stamp.read_text() == _digest(root, student, assignment)
    )


def _stamp_file(root: Path, student: str, assignment: str) -> Path:
    return root / GRADING_DIR / "graded" / assignment / f"{student}.sha256"


def _digest(root: Path, student: str, assignment: str) -> str:
    digest = hashlib.sha256()
    for path in sorted((root / "submitted" / student / assignment).rglob("*")):
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def _grade_one(root: Path, assignment: str, student: str, timeout: float) -> Outcome:
    started = time.perf_counter()
    submitted = root / "submitted" / student / assignment
    problem = _unreadable_notebook(submitted)
    if problem:
        return Outcome(student, "invalid notebook", note=problem + "; kept as submitted")
    others_before = _grades(root, assignment, exclude=student)
    files_before = _snapshot(root / "submitted")
    database = _database_file(root)
    saved = database.read_bytes() if database and database.exists() else None
    log = root / GRADING_DIR / "logs" / assignment / f"{student}.log"
    code, output = nbgrader(
        root, "autograde", assignment, "--student", student, "--force", timeout=timeout, log=log
    )
    seconds = time.perf_counter() - started
    tampered = []
    if _grades(root, assignment, exclude=student) != others_before:
        tampered.append("other students' grades changed (gradebook restored)")
        if saved is not None and database is not None:
            database.write_bytes(saved)
    if _restore(root / "submitted", files_before):
        tampered.append("files in submitted/ changed (restored)")
    if tampered:  # its grades are gone with the restore; so is what it graded
        shutil.rmtree(root / "autograded" / student / assignment, ignore_errors=True)
        return Outcome(student, "tampering", seconds=seconds, note="; ".join(tampered))
    if code is None:
        note = f"stopped after {timeout:.0f} s; see {log.relative_to(root)}"
        return Outcome(student, "timed out", seconds=seconds, note=note)
    score, max_score = _score(root, assignment, student)
    if code != 0 or score is None:
        return Outcome(student, "failed", seconds=seconds, note=f"see {log.relative_to(root)}")
    notes = []
    if "crashed or ran out of time" in output:
        notes.append("a cell crashed or ran out of time (graded without it)")
    if "Missing grade cell" in output:
        notes.append("deleted test cells were restored")
    return Outcome(student, "graded", score, max_score, seconds, "; ".join(notes))


def _unreadable_notebook(folder: Path) -> str:
    for path in sorted(folder.glob("*.ipynb")):
        try:
            nbformat.read(path, as_version=4)
        except Exception as error:  # JSON or schema errors: report, don't crash the run
            return f"{path.name} is not a valid notebook ({type(error).__name__}: {error})"[:300]
    return ""


def _database_file(root: Path) -> Path | None:
    url = os.environ.get("NBGRADER_DB_URL", f"sqlite:///{root / 'gradebook.db'}")
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


def _gradebook(root: Path):
    from nbgrader.api import Gradebook

    url = os.environ.get("NBGRADER_DB_URL", f"sqlite:///{root / 'gradebook.db'}")
    return Gradebook(url, "autodiff")


def _grades(root: Path, assignment: str, exclude: str) -> dict:
    """Every other student's cell grades for the assignment, to notice tampering."""
    grades = {}
    with _gradebook(root) as gradebook:
        for submission in gradebook.assignment_submissions(assignment):
            if submission.student_id == exclude:
                continue
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    key = (submission.student_id, notebook.name, grade.name)
                    grades[key] = (grade.auto_score, grade.manual_score, grade.extra_credit)
    return grades


def _snapshot(folder: Path) -> dict[Path, bytes]:
    """Every submitted file's bytes (notebooks are small), to undo what a run changes."""
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def _restore(folder: Path, snapshot: dict[Path, bytes]) -> list[Path]:
    """Put back any file a run changed or deleted; returns those paths."""
    changed = []
    for path, content in snapshot.items():
        if not path.is_file() or path.read_bytes() != content:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            changed.append(path)
    return changed


def _score(root: Path, assignment: str, student: str) -> tuple[float | None, float | None]:
    from nbgrader.api import MissingEntry

    with _gradebook(root) as gradebook:
        try:
            submission = gradebook.find_submission(assignment, student)
        except MissingEntry:
            return None, None
        if any(
            g.auto_score is None and g.needs_manual_grade and g.cell_type == "code"
            for nb in submission.notebooks
            for g in nb.grades
        ):
            return None, submission.max_score
        return submission.score, submission.max_score


def _describe(outcome: Outcome) -> str:
    score = "" if outcome.score is None else f"{outcome.score:g}/{outcome.max_score:g}"
    note = f"  ({outcome.note})" if outcome.note else ""
    return f"{outcome.student:<20} {outcome.status:<16} {score:>9} {outcome.seconds:6.1f} s{note}"


def _write_report(root: Path, assignment: str, outcomes: list[Outcome]) -> None:
    path = root / GRADING_DIR / f"autograde-{assignment}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = not path.exists()
    with path.open("a", newline="") as file:
        writer = csv.writer(file)
        if fresh:
            writer.writerow(["time", "student", "status", "score", "max_score", "seconds", "note"])
        for o in outcomes:
            row = [_stamp(), o.student, o.status, o.score, o.max_score, f"{o.seconds:.1f}", o.note]
            writer.writerow(row)


# --- feedback and grades ------------------------------------------------------------


def feedback(root: Path, assignment: str | None = None) -> None:
    """HTML feedback for every autograded submission, in ``feedback/<student>/<assignment>/``.

    A submission whose feedback fails is named; the others still get theirs.
    """
    for name in [assignment] if assignment else assignments(root):
        if not list((root / "autograded").glob(f"*/{name}")):
            continue
        log = root / GRADING_DIR / "logs" / f"feedback-{name}.log"
        code, output = nbgrader(root, "generate_feedback", name, "--force", log=log)
        failed = re.findall(rf"error processing assignment '{name}' for student '([^']+)'", output)
        count = len(list((root / "feedback").glob(f"*/{name}/*.html")))
        print(f"feedback for {name}: {count} HTML files in feedback/*/{name}/")
        if failed:
            print(f"no feedback for {', '.join(failed)}: see {log.relative_to(root)}")
        elif code != 0:
            raise SystemExit(f"error: feedback for {name} failed; see {log}\n{output[-2000:]}")


def grades(root: Path) -> Path:
    """Export ``grading/grades.csv`` and a histogram per assignment (``grading/<a>.png``)."""
    out = root / GRADING_DIR
    out.mkdir(exist_ok=True)
    table = out / "grades.csv"
    log = out / "logs" / "export.log"
    code, output = nbgrader(root, "export", f"--CsvExportPlugin.to={table}", log=log)
    if code != 0:
        raise SystemExit(f"error: exporting grades failed; see {log}\n{output[-2000:]}")
    with table.open() as file:
        rows = list(csv.DictReader(file))
    for name in sorted({row["assignment"] for row in rows}):
        scores = [float(row["score"]) for row in rows if row["assignment"] == name]
        max_score = max(float(row["max_score"]) for row in rows if row["assignment"] == name)
        _histogram(scores, max_score, name, out / f"{name}.png")
        print(
            f"{name}: {len(scores)} students, median {sorted(scores)[len(scores) // 2]:g}"
            f"/{max_score:g} -> {GRADING_DIR}/{name}.png"
        )
    print(f"grades: {table.relative_to(root)}")
    return table


def _histogram(scores: list[float], max_score: float, name: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 3.5))
    bins = max(1, min(20, int(max_score) + 1))
    axes.hist(scores, bins=bins, range=(0, max_score), color="#4c72b0", edgecolor="white")
    axes.set_xlabel(f"score (points, out of {max_score:g})")
    axes.set_ylabel("students")
    axes.set_title(f"{name}: {len(scores)} submissions")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


# --- command line -------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m autodiff.instructor", description=__doc__.split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("release", help="write assignments/ from solutions/")
    p = commands.add_parser("collect", help="take an LMS zip into submitted/")
    p.add_argument("zip", type=Path)
    p.add_argument("assignment", nargs="?")
    p = commands.add_parser("autograde", help="grade submissions (each student apart)")
    p.add_argument("assignment", nargs="?")
    p.add_argument("--student")
    p.add_argument("--force", action="store_true", help="grade again what is graded")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per student")
    p = commands.add_parser("feedback", help="HTML feedback without hidden tests")
    p.add_argument("assignment", nargs="?")
    commands.add_parser("grades", help="CSV and histograms in grading/")
    args = parser.parse_args(argv)
    root = Path.cwd()
    if not (root / "nbgrader_config.py").exists():
        raise SystemExit("error: run this from the course root (where nbgrader_config.py is)")
    if args.command == "release":
        release(root)
    elif args.command == "collect":
        collect(root, args.zip, args.assignment)
    elif args.command == "autograde":
        names = [args.assignment] if args.assignment else _submitted_assignments(root)
        for name in names:
            print(f"autograding {name}")
            autograde(root, name, args.student, args.force, args.timeout)
    elif args.command == "feedback":
        feedback(root, args.assignment)
    elif args.command == "grades":
        grades(root)
    return 0


def _submitted_assignments(root: Path) -> list[str]:
    submitted = {p.name for p in (root / "submitted").glob("*/*") if p.is_dir()}
    return [name for name in assignments(root) if name in submitted]


if __name__ == "__main__":
    sys.exit(main())
