"""Seconds the gradebook's safety net costs, on a class of 500 students with 5 assignments.

    python benchmarks/bench_gradebook.py [--students 500] [--assignments 5] [--repeats 5]

A gradebook is made with nbgrader's own API (assignments, notebooks, grade and
answer cells, a submission per student and assignment), scores are written with
SQL, then each step that ``guard`` runs around a student is timed (median):
``grades_of_others`` against its peer, nbgrader's ORM walk over the same grades
(what ``pipeline.py`` did before), then ``integrity``, ``backup``, and a whole
``guard`` with nothing inside.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

from classroom.gradebook import backup, grades_of_others, guard, integrity

TESTS, ANSWERS = 6, 2  # code test cells, written answers (graded by hand) per notebook


def make_gradebook(root: Path, students: int, assignments: int) -> None:
    from nbgrader.api import Gradebook
    from sqlalchemy import text

    names = [f"student{number:03d}" for number in range(students)]
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", "autodiff") as book:
        for a in range(assignments):
            book.add_assignment(f"a{a}")
            book.add_notebook(f"a{a}", f"a{a}")
            for t in range(TESTS):
                book.add_grade_cell(f"test{t}", f"a{a}", f"a{a}", max_score=2, cell_type="code")
            for w in range(ANSWERS):
                book.add_grade_cell(f"why{w}", f"a{a}", f"a{a}", max_score=1, cell_type="markdown")
                book.add_solution_cell(f"why{w}", f"a{a}", f"a{a}")
        for name in names:
            book.add_student(name)
        for a in range(assignments):
            for name in names:
                book.add_submission(f"a{a}", name)
        book.db.execute(text("UPDATE grade SET auto_score = abs(random() % 3)"))
        book.db.execute(text("UPDATE comment SET manual_comment = 'fine' WHERE random() % 2"))
        book.db.commit()


def orm_grades(root: Path, exclude: str) -> dict:
    """The peer: every other student's grades read through nbgrader's ORM."""
    from nbgrader.api import Gradebook

    grades = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", "autodiff") as book:
        for assignment in book.assignments:
            for submission in book.assignment_submissions(assignment.name):
                if submission.student_id == exclude:
                    continue
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        key = (assignment.name, submission.student_id, notebook.name, grade.name)
                        grades[key] = (grade.auto_score, grade.manual_score, grade.extra_credit)
    return grades


def median_seconds(step, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=500)
    parser.add_argument("--assignments", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    os.environ.pop("NBGRADER_DB_URL", None)
    warnings.simplefilter("ignore")  # SQLAlchemy's notes on nbgrader's add_submission
    root = Path(tempfile.mkdtemp(prefix="bench-gradebook-"))
    started = time.perf_counter()
    make_gradebook(root, args.students, args.assignments)
    size = (root / "gradebook.db").stat().st_size / 1e6
    rows = len(grades_of_others(root, set()))
    print(
        f"{args.students} students x {args.assignments} assignments: {rows} grades and "
        f"comments, {size:.1f} MB (made in {time.perf_counter() - started:.0f} s)"
    )
    r = args.repeats
    steps = {
        "grades_of_others (SQL)": lambda: grades_of_others(root, {"student000"}),
        "the same through nbgrader's ORM": lambda: orm_grades(root, "student000"),
        "integrity (PRAGMA integrity_check)": lambda: integrity(root),
        "backup (copy, checks, keep 20)": lambda: backup(root),
        "guard around nothing": lambda: _guard_nothing(root),
    }
    for label, step in steps.items():
        print(f"  {label:<36} {median_seconds(step, r) * 1000:8.1f} ms  (median of {r})")


def _guard_nothing(root: Path) -> None:
    with guard(root, {"student000"}):
        pass


if __name__ == "__main__":
    sys.exit(main())
