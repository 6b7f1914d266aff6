"""Seconds per notebook to autograde a batch, by sandbox, JOBS and size of the class.

    python benchmarks/bench_grading.py [--assignment a3_reverse_mode] [--batch 8]
                                       [--classes 20 500] [--repeats 2]

In a temporary copy of the course, a gradebook holding ``class`` other students
(each with 5 graded assignments, made as ``bench_gradebook.py`` makes them) gets a
batch of submissions of one assignment (model answers, some left blank), graded by
``make autograde``'s own function with the bubblewrap sandbox and without it
(``SANDBOX=none``), one at a time and two at a time (``JOBS=2``). Each setting runs
``repeats`` times, interleaved; the median wall time per notebook is printed, with the
ratio to the unsandboxed, one-at-a-time run. Unset OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE in the command that runs this, as for every benchmark here.
"""

import argparse
import contextlib
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import nbformat
from bench_gradebook import make_gradebook

from classroom import autograde as grader
from classroom import pipeline

ROOT = Path(__file__).resolve().parent.parent


def student_copy(course: Path, assignment: str, keep_every: int) -> str:
    """The release with the model answers filled in (every `keep_every`-th left blank)."""
    name = f"{assignment}/{assignment}.ipynb"
    release = nbformat.read(course / "assignments" / name, as_version=4)
    solution = nbformat.read(course / "solutions" / name, as_version=4)
    model = {c.metadata["nbgrader"]["grade_id"]: c for c in solution.cells if _is_answer(c)}
    for index, cell in enumerate(c for c in release.cells if _is_answer(c)):
        if keep_every == 0 or index % keep_every:
            cell.source = model[cell.metadata["nbgrader"]["grade_id"]].source
    return nbformat.writes(release)


def _is_answer(cell) -> bool:
    return cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution", False)


def make_course(assignment: str, batch: int, others: int) -> Path:
    course = Path(tempfile.mkdtemp(prefix="bench-grading-"))
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions", course / "solutions")
    make_gradebook(course, others, 5)  # the class: other students' graded work
    with contextlib.redirect_stdout(io.StringIO()):
        pipeline.release(course)
    for number in range(batch):
        text = student_copy(course, assignment, keep_every=(number % 4))
        folder = course / "submitted" / f"student{number:02d}" / assignment
        folder.mkdir(parents=True)
        (folder / f"{assignment}.ipynb").write_text(text)
    return course


def seconds_per_notebook(course: Path, assignment: str, jobs: int, sandbox: str) -> float:
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        outcomes = grader.autograde(course, assignment, force=True, jobs=jobs, sandbox=sandbox)
    elapsed = time.perf_counter() - started
    assert all(o.status == "graded" for o in outcomes), [(o.student, o.status) for o in outcomes]
    return elapsed / len(outcomes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assignment", default="a3_reverse_mode")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--classes", type=int, nargs="+", default=[20, 500])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # nbgrader's SQLAlchemy warnings, not ours
    # nbgrader's Gradebook runs `alembic` from PATH: the venv's, as the Makefile has it.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    settings = [("none", 1), ("bwrap", 1), ("none", 2), ("bwrap", 2)]
    print(f"{args.batch} submissions of {args.assignment}; seconds per notebook, median")
    print(f"{'class':>6} {'sandbox':>8} {'JOBS':>5} {'s/notebook':>11} {'vs none, 1':>11}")
    for others in args.classes:
        course = make_course(args.assignment, args.batch, others)
        times: dict[tuple[str, int], list[float]] = {setting: [] for setting in settings}
        for _ in range(args.repeats):
            for sandbox, jobs in settings:
                times[sandbox, jobs].append(
                    seconds_per_notebook(course, args.assignment, jobs, sandbox)
                )
        base = statistics.median(times["none", 1])
        for (sandbox, jobs), values in times.items():
            median = statistics.median(values)
            print(f"{others:>6} {sandbox:>8} {jobs:>5} {median:>11.2f} {median / base:>10.2f}x")
        shutil.rmtree(course)


if __name__ == "__main__":
    sys.exit(main())
