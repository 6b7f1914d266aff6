"""Autograding a class: every submission in its own sandbox, one writer to the gradebook.

``make autograde [ASSIGNMENT=a] [STUDENT=s] [JOBS=N] [SANDBOX=none] [FORCE=1]`` runs

1. **stage**: each submission is rebuilt on the released notebook's cells (by grade
   id, ``normalize.py``), so a copied, reordered, renamed or deleted cell costs what
   it must and no more; the instructor's test cells, hidden tests included, come
   from the gradebook. The damage is listed for the student and the instructor.
2. **execute**: ``JOBS`` submissions at a time, each by its own grader process
   (``execute.py``) whose kernel runs in the sandbox (``sandbox.py``) with a private
   copy of the student's folder, and a time limit for the whole notebook.
3. **record**: one nbgrader run takes the executed notebooks (``ReplayExecuted`` in
   ``plugins.py``) and writes the grades: only this process writes the gradebook.

Around it, ``gradebook.guard`` keeps a checked copy of the gradebook, refuses a
second run at the same time, and restores the copy if a grade of a student not
being graded changed. Submissions are never changed; earlier autograded copies and
feedback are kept in ``grading/backups/`` before they are replaced.
"""

from __future__ import annotations

import csv
import hashlib
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from . import gradebook
from .course import (
    GRADING_DIR,
    check_assignment,
    kill_tree,
    nbgrader,
    open_gradebook,
    released_notebooks,
    stamp,
)
from .folders import keep_copies
from .normalize import normalize
from .sandbox import choose, remove_stale_cgroups


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
    jobs: int = 1,
    sandbox: str = "auto",
    wait: bool = False,
) -> list[Outcome]:
    """Grade every submission of ``assignment`` (or one student's); returns the outcomes.

    ``jobs`` submissions run at once, each in its own sandbox (``sandbox="none"``
    runs student code as you: only for trusted students). ``wait`` makes a second
    run wait for the one going instead of stopping.
    """
    check_assignment(root, assignment)
    students = _submitted(root, assignment, student)
    box = choose(sandbox)
    print(("WARNING: " if box.kind == "none" else "") + box.describe())
    todo = [name for name in students if force or not _already_graded(root, name, assignment)]
    if not todo:
        print(f"{assignment}: every submission is graded already (FORCE=1 grades again)")
        return []
    with gradebook.guard(root, set(todo), wait=wait):
        outcomes = _grade(root, assignment, todo, student_timeout, jobs, box.kind)
    # Once the gradebook is known to be kept, not before: these files are done, whatever
    # came of them (a time-out would cost its 15 minutes again on every run); FORCE=1
    # grades them again.
    for outcome in outcomes:
        stamp_file = _stamp_file(root, outcome.student, assignment)
        stamp_file.parent.mkdir(parents=True, exist_ok=True)
        stamp_file.write_text(_digest(root, outcome.student, assignment))
    _write_report(root, assignment, outcomes)
    return outcomes


def _submitted(root: Path, assignment: str, student: str | None) -> list[str]:
    students = sorted(p.parent.name for p in (root / "submitted").glob(f"*/{assignment}"))
    if student is not None:
        if student not in students:
            raise SystemExit(f"error: no submission submitted/{student}/{assignment}/")
        return [student]
    if not students:
        raise SystemExit(f"error: nothing submitted for {assignment} (make collect ZIP=...)")
    return students


def _grade(
    root: Path, assignment: str, students: list[str], timeout: float, jobs: int, sandbox: str
) -> list[Outcome]:
    outcomes: dict[str, Outcome] = {}
    staged: dict[str, list[str]] = {}
    sources = _source_cells(root, assignment)
    releases = {  # read once a run, not once a student
        name: nbformat.read(root / "assignments" / assignment / f"{name}.ipynb", as_version=4)
        for name in released_notebooks(root, assignment)
    }
    remove_stale_cgroups()
    staging = _fresh(root / GRADING_DIR / "staging" / assignment)
    executed = _fresh(root / GRADING_DIR / "executed" / assignment)
    for name in students:
        problem, notes = _stage(root, assignment, name, releases, sources, staging)
        if problem:
            outcomes[name] = Outcome(name, "invalid notebook", note=problem + "; kept as submitted")
        else:
            staged[name] = notes
    runs = _execute_all(root, assignment, list(staged), staging, executed, timeout, jobs, sandbox)
    for name, (problem, _) in runs.items():
        if problem:
            status = "timed out" if problem.startswith("stopped after") else "failed"
            outcomes[name] = Outcome(name, status, note=problem)
            shutil.rmtree(staging / name, ignore_errors=True)
    ready = [name for name in staged if not runs[name][0]]
    if ready:
        started = time.perf_counter()
        _record(root, assignment, ready, staging, executed)
        print(f"recorded {len(ready)} grades in {time.perf_counter() - started:.1f} s")
    for name in ready:
        outcomes[name] = _outcome(root, assignment, name, staged[name], executed)
    for name in students:
        outcome = outcomes[name]
        outcome.seconds = runs[name][1] if name in runs else 0.0  # its run in the sandbox
        if outcome.status not in ("graded", "tampering"):
            _forget(root, assignment, name)
        print(_describe(outcome))
    return [outcomes[name] for name in students]


def _fresh(folder: Path) -> Path:
    """An empty folder of the grader's own (derived copies, made again each run)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


# --- stage ----------------------------------------------------------------------------


def _source_cells(root: Path, assignment: str) -> dict[str, dict[str, str]]:
    """The instructor's locked and test cells, hidden tests included, from the gradebook
    (what nbgrader puts back): notebook -> grade id -> source."""
    from nbgrader.api import MissingEntry

    cells: dict[str, dict[str, str]] = {}
    with open_gradebook(root) as book:
        try:
            found = book.find_assignment(assignment)
        except MissingEntry:
            raise SystemExit(
                f"error: {assignment} is not in the gradebook: run `make release` first"
            ) from None
        for notebook in found.notebooks:
            cells[notebook.name] = {cell.name: cell.source for cell in notebook.source_cells}
    return cells


def _stage(
    root: Path, assignment: str, student: str, releases: dict, sources: dict, staging: Path
) -> tuple[str, list[str]]:
    """Write the notebook to run: released cells, the student's answers, the tests.
    Returns (problem, damage notes); a problem means it cannot be graded."""
    submitted = root / "submitted" / student / assignment
    notebooks = sorted(submitted.glob("*.ipynb"))
    released = list(releases)
    folder = staging / student / assignment
    folder.mkdir(parents=True)
    for extra in submitted.iterdir():  # timestamp.txt and the student's other files
        if extra.is_file() and not extra.is_symlink() and extra.suffix != ".ipynb":
            shutil.copy(extra, folder / extra.name)
    notes: list[str] = []
    for name in released:
        path = submitted / f"{name}.ipynb"
        if not path.exists() and len(released) == 1 and len(notebooks) == 1:
            path = notebooks[0]  # renamed: the only notebook is the assignment's
        if not path.exists():
            notes.append(f"{name}.ipynb was not submitted: graded as unanswered")
        try:
            mine = nbformat.read(path, as_version=4) if path.exists() else None
        except Exception as error:  # not JSON, not a notebook: report, don't crash the run
            shutil.rmtree(staging / student)
            problem = f"{path.name} is not a valid notebook ({type(error).__name__}: {error})"
            return problem[:300], []
        release = releases[name]
        staged, damage = normalize(
            mine or release, release, submitted_name=path.name, released_name=f"{name}.ipynb"
        )
        notes += damage
        _put_tests_back(staged, sources.get(name, {}))
        staged.metadata["autodiff"] = {"notes": notes}
        nbformat.write(staged, folder / f"{name}.ipynb")
    return "", notes


def _put_tests_back(notebook, sources: dict[str, str]) -> None:
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        keep_students = meta.get("solution", False)
        if not keep_students and meta.get("grade_id") in sources:
            cell.source = sources[meta["grade_id"]]


# --- execute --------------------------------------------------------------------------


def _execute_all(
    root: Path,
    assignment: str,
    students: list[str],
    staging: Path,
    executed: Path,
    timeout: float,
    jobs: int,
    sandbox: str,
) -> dict[str, tuple[str, float]]:
    """Run every staged notebook, ``jobs`` at a time, each in its own grader process
    and sandbox; returns student -> (problem, "" when it ran; seconds it took)."""
    waiting = list(students)
    running: dict[str, tuple[subprocess.Popen, float]] = {}
    runs: dict[str, tuple[str, float]] = {}
    while waiting or running:
        while waiting and len(running) < max(1, jobs):
            name = waiting.pop(0)
            process = _start(root, assignment, name, staging, executed, sandbox)
            running[name] = (process, time.monotonic())
        for name, (process, since) in list(running.items()):
            seconds = time.monotonic() - since
            if process.poll() is None and seconds < timeout:
                continue
            log = _log(root, assignment, name)
            if process.poll() is None:
                kill_tree(process.pid)
                process.wait()
                runs[name] = (f"stopped after {timeout:.0f} s; see {log}", seconds)
            elif process.returncode != 0:
                runs[name] = (f"could not be run; see {log}", seconds)
            else:
                runs[name] = ("", seconds)
            del running[name]
        time.sleep(0.05)
    return runs


def _start(
    root: Path, assignment: str, student: str, staging: Path, executed: Path, sandbox: str
) -> subprocess.Popen:
    log = _log(root, assignment, student)
    log.parent.mkdir(parents=True, exist_ok=True)
    files = root / "submitted" / student / assignment
    command = [sys.executable, "-m", "classroom.execute"]
    for notebook in sorted((staging / student / assignment).glob("*.ipynb")):
        out = executed / student / notebook.name
        command += [str(notebook), str(files), str(out)]
    with log.open("w") as sink:
        return subprocess.Popen(
            [*command, "--sandbox", sandbox], stdout=sink, stderr=subprocess.STDOUT, cwd=root
        )


def _log(root: Path, assignment: str, student: str) -> Path:
    return root / GRADING_DIR / "logs" / assignment / f"{student}.log"


# --- record ---------------------------------------------------------------------------


def _record(root: Path, assignment: str, students: list[str], staging: Path, executed: Path):
    """One nbgrader run over the staged submissions, outputs taken from the executed
    notebooks: the gradebook's one writer."""
    _keep_earlier(root, assignment, students)
    log = root / GRADING_DIR / "logs" / f"autograde-{assignment}-{stamp()}.log"
    code, output = nbgrader(
        root,
        "autograde",
        assignment,
        "--force",
        f"--CourseDirectory.submitted_directory={staging.relative_to(root)}",
        f"--ReplayExecuted.folder={executed.parent}",
        timeout=600 + 10 * len(students),  # no kernel runs here: generous, not endless
        log=log,
    )
    if code is None:
        raise SystemExit(f"error: nbgrader did not finish; see {log}")


def _keep_earlier(root: Path, assignment: str, students: list[str]) -> None:
    """Earlier autograded notebooks and feedback, copied aside before they are replaced."""
    for folder in ("autograded", "feedback"):
        keep_copies(root, assignment, folder, students)


def _outcome(
    root: Path, assignment: str, student: str, notes: list[str], executed: Path
) -> Outcome:
    score, max_score = _score(root, assignment, student)
    if score is None:
        log = root / GRADING_DIR / "logs" / f"autograde-{assignment}-*.log"
        return Outcome(student, "failed", note=f"nbgrader could not grade it; see {log}")
    details = list(notes)
    for path in sorted((executed / student).glob("*.ipynb")):
        meta = nbformat.read(path, as_version=4).metadata.get("autodiff", {})
        details += [f"limit hit: {hit}" for hit in meta.get("limits_hit", [])]
        details += meta.get("cells", [])  # which cells the limits stopped, which tests failed
        if meta.get("skipped") and not meta.get("cells"):
            details.append("a cell crashed or ran out of time (graded without it)")
        found = meta.get("tampering", [])
        if found:
            details.append("tests not run (0 points): " + "; ".join(found))
    details += _suspicious(root / "submitted" / student / assignment)
    status = "tampering" if any(d.startswith("tests not run") for d in details) else "graded"
    return Outcome(student, status, score, max_score, note="; ".join(details))


def _already_graded(root: Path, student: str, assignment: str) -> bool:
    """Graded before, from exactly the files submitted now."""
    graded = root / "autograded" / student / assignment
    stamp_file = _stamp_file(root, student, assignment)
    return (
        graded.is_dir()
        and stamp_file.exists()
        and stamp_file.read_text() == _digest(root, student, assignment)
    )


def _stamp_file(root: Path, student: str, assignment: str) -> Path:
    return root / GRADING_DIR / "graded" / assignment / f"{student}.sha256"


def _digest(root: Path, student: str, assignment: str) -> str:
    digest = hashlib.sha256()
    for path in sorted((root / "submitted" / student / assignment).rglob("*")):
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


# Names that honest answers have no use for, and that tricks to pass tests do use.
_TRICKS = re.compile(
    r"get_ipython|input_transformers|setprofile|settrace|forbid_calls|sys\.modules|"
    r"__code__|_getframe|linecache|\bIn\[|_ih\b|threading|concurrent\.futures|gc\.get_|"
    # patching what the tests use, reading their globals or frames, faking comparisons
    r"\b(?:np|numpy|ad|autodiff|math|tracemalloc|builtins)(?:\.\w+)+\s*=(?!=)|"
    r"tracemalloc\.(?:stop|reset_peak|clear_traces)|globals\(|f_back|currentframe|"
    r"inspect\.stack|__(?:eq|ne|lt|le|gt|ge)__|__array_function__|__class__\s*=|"
    r"\bexec\(|\beval\(|__getattr__|__closure__|(?m:^\s*(?:np|numpy|ad|autodiff)\s*=)|"
    r"getsource|multiprocessing|\bimport sys\b|"
    # going for the course itself: the gradebook, files, processes, the kernel's startup
    r"gradebook|sqlite3|shutil\.rmtree|subprocess|os\.(?:fork|system|exec\w*|kill)|\.ipython"
)


def _suspicious(folder: Path) -> list[str]:
    """A note for the instructor when answer cells use names that tricks use."""
    found: set[str] = set()
    for path in folder.glob("*.ipynb"):
        try:
            cells = nbformat.read(path, as_version=4).cells
        except Exception:  # reported elsewhere as an invalid notebook
            continue
        for cell in cells:
            if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
                found |= set(_TRICKS.findall(cell.source))
    return [f"look at this one: answers use {', '.join(sorted(found))}"] if found else []


def _forget(root: Path, assignment: str, student: str) -> None:
    """No grade, autograded copy or feedback left from an earlier submission; the
    earlier autograded copy and feedback are kept in ``grading/backups/``."""
    from nbgrader.api import MissingEntry

    _keep_earlier(root, assignment, [student])
    for folder in ("autograded", "feedback"):
        shutil.rmtree(root / folder / student / assignment, ignore_errors=True)
    _stamp_file(root, student, assignment).unlink(missing_ok=True)
    with open_gradebook(root) as book:
        try:
            book.remove_submission(assignment, student)
        except MissingEntry:
            pass


def _score(root: Path, assignment: str, student: str) -> tuple[float | None, float | None]:
    from nbgrader.api import MissingEntry

    with open_gradebook(root) as book:
        try:
            submission = book.find_submission(assignment, student)
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
    # names a student chose (cells, files) must not drive the instructor's terminal
    printable = "".join(c if c.isprintable() else "?" for c in outcome.note)
    note = f"  ({printable})" if outcome.note else ""
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
            row = [stamp(), o.student, o.status, o.score, o.max_score, f"{o.seconds:.1f}", o.note]
            writer.writerow(row)


def submitted_assignments(root: Path) -> list[str]:
    from .course import assignments

    submitted = {p.name for p in (root / "submitted").glob("*/*") if p.is_dir()}
    return [name for name in assignments(root) if name in submitted]
