"""The instructor's side of the course: release, collect, autograde, feedback, grades.

The Makefile's grading targets call this module (``python -m autodiff.grading``),
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

import csv
import hashlib
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from .course import GRADING_DIR, assignments, check_assignment, nbgrader, stamp

# --- release ------------------------------------------------------------------------


def release(root: Path) -> None:
    """Write the student version of every assignment into ``assignments/``."""
    for assignment in assignments(root):
        log = root / GRADING_DIR / "logs" / f"release-{assignment}.log"
        code, output = nbgrader(root, "generate_assignment", assignment, "--force", log=log)
        if code != 0:
            raise SystemExit(f"error: releasing {assignment} failed; see {log}\n{output[-2000:]}")
        print(f"released {assignment} -> assignments/{assignment}/")


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
    check_assignment(root, assignment)
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
                target = root / GRADING_DIR / "quarantine" / stamp() / path.relative_to(root)
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
            row = [stamp(), o.student, o.status, o.score, o.max_score, f"{o.seconds:.1f}", o.note]
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
