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
import tempfile
import time
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePath, PurePosixPath

import nbformat
from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbgrader.plugins.zipcollect import FileNameCollectorPlugin
from nbgrader.preprocessors import Execute, NbGraderPreprocessor, OverwriteCells

GRADING_DIR = "grading"  # reports, logs and backups (git-ignored)


# --- nbgrader plug-ins (named in nbgrader_config.py) --------------------------------


class ResilientExecute(Execute):
    """nbgrader's Execute, surviving a dead or stuck kernel.

    When a student's cell kills the kernel (``os._exit``, ``exit()``, a segfault,
    running out of memory), nbgrader would drop the whole notebook; when a cell runs
    past its time and ignores the interrupt (or loops inside C, holding the GIL),
    every later cell would wait out its own time-out, or nbclient gives up. Here such
    a cell gets an error output saying what happened, the kernel restarts, the earlier
    cells run again (all but the ones that crashed or hung), and grading goes on: the
    student loses the points that depend on that cell, not the assignment.

    A warning printed to stderr by correct code (NumPy's "divide by zero", say) does
    not fail a test cell: in grade cells, stderr is relabelled stdout. Only an error
    fails a test.
    """

    def preprocess_cell(self, cell, resources, index):
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except (DeadKernelError, CellTimeoutError) as error:
            cell.outputs.append(_error_output(type(error).__name__, _STOPPED))
        else:
            _stderr_is_not_failure(cell)
            outputs = cell.get("outputs", [])
            if not any(out.get("ename") == "CellTimeoutError" for out in outputs):
                return cell, resources
        self.log.warning("Cell %d crashed or ran out of time: restarting the kernel", index)
        cell.metadata["autodiff_skipped"] = True
        self._restart_and_replay(index)
        return cell, self.resources

    def _restart_and_replay(self, index: int) -> None:
        """A fresh kernel with the state of the cells before ``index`` (bar skipped ones).

        A replayed cell that kills the kernel again is skipped too, and the replay
        starts over, so later cells still see the setup cells' imports.
        """
        while True:
            run_sync(self.km.restart_kernel)(now=True)
            run_sync(self.kc.wait_for_ready)(timeout=self.startup_timeout)
            if self._replay(index):
                return

    def _replay(self, index: int) -> bool:
        for earlier, cell in enumerate(self.nb.cells[:index]):
            if cell.cell_type != "code" or cell.metadata.get("autodiff_skipped"):
                continue
            replay = nbformat.from_dict(json.loads(json.dumps(cell)))
            try:
                self.execute_cell(replay, earlier, store_history=False)
            except (DeadKernelError, CellTimeoutError):
                cell.metadata["autodiff_skipped"] = True
                cell.outputs.append(_error_output("KernelDied", "(again, on replay) " + _STOPPED))
                return False
            finally:
                self.nb.cells[earlier] = cell  # execute_cell stored the replay there
        return True


_STOPPED = (
    "the kernel stopped or stopped answering while running this cell (exit(), a crash, "
    "running out of memory, or a loop that ignores interrupts)"
)


def _error_output(name: str, message: str):
    text = f"{name}: {message}. Grading went on in a fresh kernel without this cell."
    return nbformat.v4.new_output("error", ename=name, evalue=message, traceback=[text])


def _stderr_is_not_failure(cell) -> None:
    if cell.metadata.get("nbgrader", {}).get("grade"):
        for output in cell.get("outputs", []):
            if output.output_type == "stream" and output.name == "stderr":
                output.name = "stdout"


class RestoreCells(OverwriteCells):
    """nbgrader's OverwriteCells, robust to what students do to cells.

    Tests come back from the source when emptied, edited or deleted. nbgrader 0.9.6
    crashes on two common cases, a copy-pasted answer cell (a duplicate id leaves an
    empty ``nbgrader`` entry) and a deleted test whose neighbour is deleted too; here
    leftover entries are dropped, and a missing cell goes after the nearest earlier
    source cell that is still there (or first).
    """

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            if "nbgrader" in cell.metadata and "grade_id" not in cell.metadata.nbgrader:
                del cell.metadata["nbgrader"]
        return super().preprocess(nb, resources)

    def add_missing_grade_cells(self, nb, resources):
        source = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        order = [cell.name for cell in source.source_cells]
        by_name = {cell.name: cell for cell in source.source_cells}
        solutions = {cell.name for cell in source.solution_cells}
        for grade_cell in source.grade_cells:
            present = {_grade_id(cell): i for i, cell in enumerate(nb.cells) if _grade_id(cell)}
            if grade_cell.name in present:
                continue
            self.log.warning("Missing grade cell %s: adding it back", grade_cell.name)
            earlier = order[: order.index(grade_cell.name)]
            position = max((present[name] + 1 for name in earlier if name in present), default=0)
            cell = self.missing_cell_transform(
                by_name[grade_cell.name],
                grade_cell.max_score,
                is_solution=grade_cell.name in solutions,
            )
            nb.cells.insert(position, cell)
        return nb, resources


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


class RedactHiddenTests(NbGraderPreprocessor):
    """Feedback without the hidden tests: not their source, and not a line of it anywhere.

    nbgrader's feedback shows the whole autograded notebook, hidden tests included.
    Here the hidden part of each test cell is removed; in tracebacks, a frame in a test
    cell shows only the failing line when it is visible, and "in the hidden tests"
    otherwise; and any output line of any cell that quotes a hidden line (a student
    printing ``In``, ``inspect.getsource`` of the caller, a warning pointing at the
    test) is replaced. Frames in the student's own code are kept: they help.
    """

    begin = "BEGIN HIDDEN TESTS"  # matched as nbgrader matches it: anywhere in the line
    end = "END HIDDEN TESTS"

    def preprocess(self, nb, resources):
        self._secrets, shown = set(), set()
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            lines = cell.source.splitlines()
            hidden = self._hidden_lines(lines) if self.begin in cell.source else set()
            self._secrets |= {lines[n - 1].strip() for n in hidden}
            if not cell.metadata.get("nbgrader", {}).get("solution", False):
                # The instructor's visible lines (a setup cell, say) are no secret, even
                # when a hidden test repeats one. Answer cells do not count: pasting a
                # guessed line there must not reveal whether the hidden tests have it.
                shown |= {line.strip() for n, line in enumerate(lines, 1) if n not in hidden}
        self._secrets = {line for line in self._secrets - shown if len(line) >= 6}
        return super().preprocess(nb, resources)

    def _hidden_lines(self, lines: list[str]) -> set[int]:
        hidden, hiding = set(), False
        for number, line in enumerate(lines, start=1):
            if self.begin in line:
                hiding = True
            if hiding:
                hidden.add(number)
            if self.end in line:
                hiding = False
        return hidden

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        lines = cell.source.splitlines()
        hidden = self._hidden_lines(lines) if self.begin in cell.source else set()
        for output in cell.get("outputs", []):
            if output.output_type == "error" and hidden:
                output.traceback = [
                    self._redact(entry, cell.execution_count, lines, hidden)
                    for entry in output.traceback
                ]
            self._scrub(output)
        if hidden:
            kept = [line for number, line in enumerate(lines, start=1) if number not in hidden]
            cell.source = "\n".join(kept).rstrip()
        return cell, resources

    def _scrub(self, output) -> None:
        """Replace every output line that quotes a hidden line."""
        if output.output_type == "stream":
            output.text = self._clean(output.text)
        elif output.output_type == "error":
            output.evalue = self._clean(output.evalue)
            output.traceback = [self._clean(entry) for entry in output.traceback]
        else:
            for kind, data in output.get("data", {}).items():
                if isinstance(data, str) and kind.startswith("text/"):
                    output.data[kind] = self._clean(data)

    def _clean(self, text: str) -> str:
        plain = _ANSI.sub("", text)
        if not any(secret in plain for secret in self._secrets):
            return text
        return "\n".join(
            "[a line of a hidden test, not shown]"
            if any(secret in _ANSI.sub("", line) for secret in self._secrets)
            else line
            for line in text.split("\n")
        )

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


_CANVAS = re.compile(r"^(?P<student>[^_]+)_(?:late_)?\d+_\d+_(?P<notebook>.+)\.ipynb$", re.I)
_MOODLE = re.compile(r"^.+_(?P<student>\d+)_assignsubmission_file_$")


def whose(path: PurePath) -> tuple[str, str] | None:
    """(student, notebook name) read from a file's path in an LMS download, or None.

    * Canvas: ``<student>_[late_]<id>_<id>_<notebook>[-<n>].ipynb``
    * Moodle: ``<Full Name>_<id>_assignsubmission_file_/<notebook>.ipynb`` (the id is
      Moodle's participant id, which Moodle numbers per assignment: prefer Canvas or
      folders named by student id when you can)
    * plain: ``<student>/<notebook>.ipynb``

    A browser's or LMS's copy suffix (``a1 (1)``, ``a1-2``) is dropped.
    """
    if path.suffix != ".ipynb" or path.name.startswith("."):
        return None
    if match := _CANVAS.match(path.name):
        student, notebook = match["student"], match["notebook"]
    elif match := _MOODLE.match(path.parent.name):
        student, notebook = match["student"], path.stem
    elif path.parent.name not in ("extracted", ""):
        student, notebook = path.parent.name, path.stem
    else:
        return None
    return student.lower(), re.sub(r"(-\d+| \(\d+\))$", "", notebook)


class LMSCollector(FileNameCollectorPlugin):
    """nbgrader's zip_collect reading names with ``whose``. A notebook renamed by the
    student is taken as the assignment's notebook when the assignment has only one."""

    def collect(self, submitted_file: str) -> dict | None:
        found = whose(Path(submitted_file))
        if found is None:
            self.log.warning("Cannot tell whose submission this is: %s", submitted_file)
            return None
        student, notebook = found
        return {"student_id": student, "file_id": self._notebook(notebook) + ".ipynb"}

    def _notebook(self, name: str) -> str:
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

    Output goes to a temporary file, not a pipe, so a kernel that outlives nbgrader
    cannot block the reading. On a time-out, nbgrader and every process it started
    (kernels start their own sessions, so they are found by parentage) are killed.
    nbgrader finds ``alembic`` on PATH, hence the venv's bin first.
    """
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    command = [sys.executable, "-m", "nbgrader", *args]
    with tempfile.TemporaryFile("w+") as sink:
        process = subprocess.Popen(
            command, cwd=root, env=env, stdout=sink, stderr=subprocess.STDOUT
        )
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_tree(process.pid)
            process.wait()
            code = None
        sink.seek(0)
        output = sink.read()
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"$ nbgrader {' '.join(args)}\n{output}")
    return code, output


def _kill_tree(pid: int) -> None:
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

    The assignment is read from the notebooks' names when not given. Nothing is lost:
    earlier submissions of the students in the zip are copied to ``grading/backups/``
    first, and so is every file of the zip that is not collected (a second file of the
    same student, a notebook of another assignment), each named in the output.
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
    set_aside = root / GRADING_DIR / "backups" / assignment / f"not-collected-{_stamp()}"
    notes = _one_notebook_per_student(
        root, zip_path, assignment, archive / zip_path.name, set_aside
    )
    log = root / GRADING_DIR / "logs" / f"collect-{assignment}-{_stamp()}.log"
    code, output = nbgrader(root, "zip_collect", assignment, "--force", log=log)
    if code != 0:
        raise SystemExit(f"error: collecting failed; see {log}\n{output[-2000:]}")
    students = sorted(p.parent.name for p in (root / "submitted").glob(f"*/{assignment}"))
    print(f"collected {assignment}: {len(students)} students in submitted/")
    if backup:
        print(f"earlier submissions kept in {backup.relative_to(root)}")
    for line in output.splitlines():
        if "taken as" in line:
            print("renamed:", line.split("] ")[-1])
    for note in notes:
        print(note)


def _one_notebook_per_student(
    root: Path, zip_path: Path, assignment: str, out: Path, set_aside: Path
) -> list[str]:
    """Copy the zip to ``out`` with one notebook per student, the newest by the zip's
    dates (then by name: Canvas's ``late`` and ``-2`` copies sort later). What is left
    out goes to ``set_aside``; returns a line per file left out."""
    others = [name for name in assignments(root) if name != assignment]
    single = len(_released_notebooks(root, assignment)) == 1
    notes: list[str] = []
    keep: dict[object, zipfile.ZipInfo] = {}
    with zipfile.ZipFile(zip_path) as archive:
        entries = [e for e in archive.infolist() if not e.is_dir()]
        for entry in sorted(entries, key=lambda e: (e.date_time, e.filename)):
            found = whose(PurePosixPath(entry.filename))
            if found is None:
                reason = "cannot tell whose it is"
            elif found[1] in others:
                reason = f"a notebook of {found[1]}, not {assignment}"
            else:
                key = found[0] if single else found
                earlier = keep.get(key)
                keep[key] = entry
                if earlier is None:
                    continue
                entry, reason = earlier, f"{found[0]} sent a newer file"
            notes.append(f"not collected: {entry.filename} ({reason})")
            target = set_aside / _safe_name(entry.filename)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(entry))
        with zipfile.ZipFile(out, "w") as kept:
            for entry in keep.values():
                kept.writestr(_safe_name(entry.filename), archive.read(entry))
    if notes:
        notes.append(f"(files not collected are kept in {set_aside.relative_to(root)})")
    return notes


def _safe_name(name: str) -> str:
    """A zip entry's name without ``..`` or a leading ``/``: it stays where it is put."""
    parts = [part for part in PurePosixPath(name).parts if part not in ("..", "/")]
    return "/".join(parts) or "unnamed"


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
    """Grade one submission; any outcome but "graded" leaves no stale grade behind."""
    outcome = _run_one(root, assignment, student, timeout)
    if outcome.status != "graded":
        _forget(root, assignment, student)
    return outcome


def _run_one(root: Path, assignment: str, student: str, timeout: float) -> Outcome:
    started = time.perf_counter()
    submitted = root / "submitted" / student / assignment
    problem = _unreadable_notebook(submitted)
    if problem:
        return Outcome(student, "invalid notebook", note=problem + "; kept as submitted")
    others_before = _grades(root, exclude=student)
    files_before = _snapshot(root / "submitted") | _snapshot_code(root)
    database = _database_file(root)
    saved = database.read_bytes() if database and database.exists() else None
    log = root / GRADING_DIR / "logs" / assignment / f"{student}.log"
    code, output = nbgrader(
        root, "autograde", assignment, "--student", student, "--force", timeout=timeout, log=log
    )
    seconds = time.perf_counter() - started
    tampered = []
    if _grades(root, exclude=student) != others_before:
        tampered.append("other students' grades changed (gradebook restored)")
        if saved is not None and database is not None:
            database.write_bytes(saved)
    changed = _restore(root, files_before, watched=[root / "submitted"])
    if changed:
        names = ", ".join(str(path.relative_to(root)) for path in changed[:3])
        tampered.append(f"files changed: {names} (restored; new files in grading/quarantine)")
    if tampered:
        return Outcome(student, "tampering", seconds=seconds, note="; ".join(tampered))
    if code is None:
        note = f"stopped after {timeout:.0f} s; see {log.relative_to(root)}"
        return Outcome(student, "timed out", seconds=seconds, note=note)
    score, max_score = _score(root, assignment, student)
    if code != 0 or score is None:
        return Outcome(student, "failed", seconds=seconds, note=f"see {log.relative_to(root)}")
    notes = _suspicious(submitted)
    if "crashed or ran out of time" in output:
        notes.append("a cell crashed or ran out of time (graded without it)")
    if "Missing grade cell" in output:
        notes.append("deleted test cells were restored")
    return Outcome(student, "graded", score, max_score, seconds, "; ".join(notes))


# Names that honest answers have no use for, and that tricks to pass tests do use.
_TRICKS = re.compile(
    r"get_ipython|input_transformers|setprofile|settrace|forbid_calls|sys\.modules|"
    r"__code__|_getframe|linecache|\bIn\[|_ih\b|threading|concurrent\.futures|gc\.get_|"
    # patching what the tests use, reading their globals or frames, faking comparisons
    r"\b(?:np|numpy|ad|autodiff|math|tracemalloc|builtins)(?:\.\w+)+\s*=(?!=)|"
    r"tracemalloc\.(?:stop|reset_peak|clear_traces)|globals\(|f_back|currentframe|"
    r"inspect\.stack|__(?:eq|ne|lt|le|gt|ge)__|__array_function__|__class__\s*=|"
    r"\bexec\(|\beval\(|__getattr__|__closure__|(?m:^\s*(?:np|numpy|ad|autodiff)\s*=)|"
    r"getsource|multiprocessing|\bimport sys\b"
)


def _suspicious(folder: Path) -> list[str]:
    """A note for the instructor when answer cells use names that tricks use."""
    found: set[str] = set()
    for path in folder.glob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
                found |= set(_TRICKS.findall(cell.source))
    return [f"look at this one: answers use {', '.join(sorted(found))}"] if found else []


def _forget(root: Path, assignment: str, student: str) -> None:
    """No grade, autograded copy or feedback left from an earlier submission."""
    from nbgrader.api import MissingEntry

    for folder in ("autograded", "feedback"):
        shutil.rmtree(root / folder / student / assignment, ignore_errors=True)
    _stamp_file(root, student, assignment).unlink(missing_ok=True)
    with _gradebook(root) as gradebook:
        try:
            gradebook.remove_submission(assignment, student)
        except MissingEntry:
            pass


def _unreadable_notebook(folder: Path) -> str:
    for path in sorted(folder.glob("*.ipynb")):
        try:
            nbformat.read(path, as_version=4)
        except Exception as error:  # JSON or schema errors: report, don't crash the run
            return f"{path.name} is not a valid notebook ({type(error).__name__}: {error})"[:300]
    return ""


def _database_url(root: Path) -> str:
    """The gradebook's URL, as nbgrader_config.py sets it."""
    return os.environ.get("NBGRADER_DB_URL", f"sqlite:///{root / 'gradebook.db'}")


def _database_file(root: Path) -> Path | None:
    url = _database_url(root)
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


def _gradebook(root: Path):
    from nbgrader.api import Gradebook

    return Gradebook(_database_url(root), "autodiff")


def _grades(root: Path, exclude: str) -> dict:
    """Every other student's cell grades, in every assignment, to notice tampering."""
    grades = {}
    with _gradebook(root) as gradebook:
        for assignment in gradebook.assignments:
            for submission in gradebook.assignment_submissions(assignment.name):
                if submission.student_id == exclude:
                    continue
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        key = (assignment.name, submission.student_id, notebook.name, grade.name)
                        grades[key] = (grade.auto_score, grade.manual_score, grade.extra_credit)
    return grades


def _snapshot(folder: Path) -> dict[Path, bytes]:
    """Every file's bytes (notebooks are small), to undo what a run changes."""
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def _snapshot_code(root: Path) -> dict[Path, bytes]:
    """What grading runs on: the configuration, the sources, the kit's own code."""
    files = _snapshot(root / "solutions") | _snapshot(Path(__file__).parent)
    files = {path: data for path, data in files.items() if "__pycache__" not in path.parts}
    config = root / "nbgrader_config.py"
    return files | {config: config.read_bytes()}


def _restore(root: Path, snapshot: dict[Path, bytes], watched: list[Path]) -> list[Path]:
    """Put back every file a run changed or deleted, and move files it added to
    ``watched`` folders into ``grading/quarantine/``; returns the paths touched."""
    touched = []
    for path, content in snapshot.items():
        if not path.is_file() or path.read_bytes() != content:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            touched.append(path)
    for folder in watched:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path not in snapshot:
                target = root / GRADING_DIR / "quarantine" / _stamp() / path.relative_to(root)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(path, target)
                touched.append(path)
        for path in sorted(folder.rglob("*"), reverse=True):  # what the moves left empty
            if path.is_dir() and not any(path.iterdir()):
                path.rmdir()
    return touched


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
        # Only students who submitted: the gradebook lists everyone it has ever seen.
        submitted = {p.parent.name for p in (root / "submitted").glob(f"*/{name}")}
        mine = [row for row in rows if row["assignment"] == name]
        scores = [float(row["score"]) for row in mine if row["student_id"] in submitted]
        max_score = max(float(row["max_score"]) for row in mine)
        if not scores:
            continue
        _histogram(scores, max_score, name, out / f"{name}.png")
        median = sorted(scores)[len(scores) // 2]
        print(
            f"{name}: {len(scores)} submissions graded, median {median:g}/{max_score:g}"
            f" -> {GRADING_DIR}/{name}.png"
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
