"""Release, feedback and grades: the nbgrader steps around autograding.

* ``release`` writes the student versions of ``solutions/`` into ``assignments/``
  and publishes them to the nbgrader exchange (``exchange.py``);
* ``feedback`` writes HTML from the autograded notebooks, made by the grader
  (``plugins.GraderFeedback``): verdicts, no hidden tests, nothing a kernel printed;
  the feedback it replaces is kept in ``grading/backups/``; students who submitted
  through the exchange fetch theirs from it;
* ``grades`` exports a CSV and a histogram per assignment.

Collecting is ``collect.py``, autograding ``autograde.py``; the Makefile calls all of
them through ``python -m classroom``.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from . import exchange
from .course import GRADING_DIR, assignments, nbgrader
from .folders import keep_copies

# --- release ------------------------------------------------------------------------


def release(root: Path, publish: bool = True) -> None:
    """Write the student version of every assignment into ``assignments/``, and
    publish it to the exchange, where students fetch it (unless ``publish`` is False:
    the student kit is built from the release, and publishing is the instructor's
    decision, made with ``make release`` or the Formgrader's release button)."""
    for assignment in assignments(root):
        log = root / GRADING_DIR / "logs" / f"release-{assignment}.log"
        code, output = nbgrader(root, "generate_assignment", assignment, "--force", log=log)
        if code != 0:
            raise SystemExit(f"error: releasing {assignment} failed; see {log}\n{output[-2000:]}")
        print(f"released {assignment} -> assignments/{assignment}/")
        if publish:
            exchange.publish(root, assignment)
    if publish:
        # nbgrader makes missing folders but leaves the modes of existing ones alone
        exchange.stop_on_problems(
            root, "the assignments are published, but students cannot use them"
        )
        note = exchange.unreachable(root)
        if note:
            print(note)


# --- feedback and grades ------------------------------------------------------------


def feedback(root: Path, assignment: str | None = None) -> None:
    """HTML feedback for every autograded submission, in ``feedback/<student>/<assignment>/``.

    A submission whose feedback fails is named; the others still get theirs.
    """
    for name in [assignment] if assignment else assignments(root):
        if not list((root / "autograded").glob(f"*/{name}")):
            continue
        students = sorted(p.parent.name for p in (root / "feedback").glob(f"*/{name}"))
        keep_copies(root, name, "feedback", students)  # what --force replaces
        log = root / GRADING_DIR / "logs" / f"feedback-{name}.log"
        limit = 600 + 10 * len(students) + 10 * len(list((root / "autograded").glob(f"*/{name}")))
        code, output = nbgrader(root, "generate_feedback", name, "--force", timeout=limit, log=log)
        if code is None:
            raise SystemExit(f"error: feedback for {name} took over {limit} s; see {log}")
        failed = re.findall(rf"error processing assignment '{name}' for student '([^']+)'", output)
        count = len(list((root / "feedback").glob(f"*/{name}/*.html")))
        print(f"feedback for {name}: {count} HTML files in feedback/*/{name}/")
        if failed:
            print(f"no feedback for {', '.join(failed)}: see {log.relative_to(root)}")
        elif code != 0:
            raise SystemExit(f"error: feedback for {name} failed; see {log}\n{output[-2000:]}")
        exchange.return_feedback(root, name)


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
