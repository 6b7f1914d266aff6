"""Seconds to autograde: one notebook per assignment, and a batch of 20 submissions.

    python benchmarks/bench_grading.py [--batch-assignment a3_reverse_mode] [--batch 20]

In a temporary copy of the course, each assignment's solution is autograded with
`autodiff.grading.pipeline.autograde` (one nbgrader process per student, as `make autograde`
does) three times; then a batch of submissions (a mix of full and partial solutions)
is graded twice: by `make autograde`'s path, and by one plain `nbgrader autograde`
run over the whole batch, the peer that isolates nothing. Medians are printed.
"""

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from autodiff.grading import pipeline as instructor

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


def submit(course: Path, student: str, assignment: str, text: str) -> None:
    folder = course / "submitted" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{assignment}.ipynb").write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-assignment", default="a3_reverse_mode")
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    course = Path(tempfile.mkdtemp(prefix="bench-grading-"))
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions", course / "solutions")
    instructor.release(course)

    print("\nseconds to autograde one notebook (model answers), median of", args.repeats)
    for assignment in instructor.assignments(course):
        submit(course, "solo", assignment, student_copy(course, assignment, keep_every=0))
        times = []
        for _ in range(args.repeats):
            (outcome,) = instructor.autograde(course, assignment, "solo", force=True)
            times.append(outcome.seconds)
        print(
            f"  {assignment:<24} {statistics.median(times):6.1f} s  "
            f"(min {min(times):.1f}, max {max(times):.1f}; score {outcome.score:g})"
        )

    assignment = args.batch_assignment
    for number in range(args.batch):
        text = student_copy(course, assignment, keep_every=(number % 4) + 1)
        submit(course, f"student{number:02d}", assignment, text)
    started = time.perf_counter()
    instructor.autograde(course, assignment, force=True)
    isolated = time.perf_counter() - started
    started = time.perf_counter()
    code, _ = instructor.nbgrader(course, "autograde", assignment, "--force")
    plain = time.perf_counter() - started
    count = args.batch + 1  # the batch and "solo"
    print(f"\n{count} submissions of {assignment}:")
    each = isolated / count
    print(f"  make autograde (one process each): {isolated:6.1f} s  ({each:.1f} s each)")
    print(
        f"  plain nbgrader autograde (one run): {plain:6.1f} s  ({plain / count:.1f} s each)"
        f"{'' if code == 0 else '  [nbgrader reported errors]'}"
    )
    print(f"  isolation costs {isolated / plain:.2f}x the plain run")
    shutil.rmtree(course)


if __name__ == "__main__":
    sys.exit(main())
