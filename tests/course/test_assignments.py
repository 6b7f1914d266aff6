"""The graded assignments, through the real nbgrader and an SQLite gradebook.

In a temporary copy of the course: the release made from solutions/ equals the
committed assignments/; nbgrader's Validator passes every solution and fails every
release; autograding gives each instructor notebook its full autograded points,
each release zero, and a partial solution exactly the points of its correct parts.
"""

import json

import pytest
from graded_course import ROOT, notebook_path, solution, submission, test_points

from classroom import autograde as grader
from classroom import course as course_dir

pytest.importorskip("nbgrader")
ASSIGNMENTS = course_dir.assignments(ROOT)

# Answers left blank in the partial solution, and the autograded points it keeps:
# the tests that need only the other answers (the notebooks' dependency maps).
PARTIAL = {
    "a1_numerical_symbolic": (["plot_error_curve", "best_step"], 16),
    "a2_forward_mode": (["classic_partials", "forward_passes"], 16),
    "a3_reverse_mode": (["sum_op", "gradient_error"], 15),
    "a4_training": (["accuracy", "plot_loss"], 15),
    "a5_memory": (["checkpointing"], 7),
    "a6_convolution": (["col2im", "cnn_training"], 12),
}


def autograded_points(assignment: str) -> float:
    return sum(test_points(assignment).values())


def test_every_assignment_is_here():
    assert ASSIGNMENTS == sorted(PARTIAL)
    for assignment in ASSIGNMENTS:
        assert notebook_path(ROOT / "assignments", assignment).is_file()


@pytest.fixture(scope="module")
def course(released_course):
    """A copy of the course with a fresh release and gradebook (shared with
    test_wrong_answers.py, whose students are others)."""
    return released_course


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_committed_release_is_in_sync_with_solutions(course, assignment):
    fresh = json.loads(notebook_path(course / "assignments", assignment).read_text())
    committed = json.loads(notebook_path(ROOT / "assignments", assignment).read_text())
    assert committed == fresh, f"assignments/{assignment} is stale: run `make release`"


@pytest.fixture(scope="module")
def graded(course):
    """Autograde three submissions per assignment: full, none, partial."""
    scores = {}
    for assignment in ASSIGNMENTS:
        blank, _ = PARTIAL[assignment]
        release = notebook_path(course / "assignments", assignment).read_text()
        submissions = {"full": [], "none": None, "partial": blank}
        for student, left_blank in submissions.items():
            folder = course / "submitted" / student / assignment
            folder.mkdir(parents=True)
            text = release if left_blank is None else submission(course, assignment, left_blank)
            (folder / f"{assignment}.ipynb").write_text(text)
        for outcome in grader.autograde(course, assignment, student_timeout=600, jobs=2):
            scores[assignment, outcome.student] = outcome
    return scores


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solution_earns_every_autograded_point(graded, assignment):
    outcome = graded[assignment, "full"]
    assert outcome.status == "graded", outcome.note
    assert outcome.score == autograded_points(assignment) > 0


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_earns_nothing(graded, assignment):
    assert graded[assignment, "none"].score == 0


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_partial_solution_earns_its_correct_parts(graded, assignment):
    assert graded[assignment, "partial"].score == PARTIAL[assignment][1]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_validator_passes_solutions_and_fails_releases(course, assignment):
    from nbgrader.validator import Validator

    validator = Validator()
    solution = validator.validate(str(notebook_path(course / "solutions", assignment)))
    assert not solution.get("failed") and not solution.get("errors"), solution
    release = validator.validate(str(notebook_path(course / "assignments", assignment)))
    assert release.get("failed"), f"the release of {assignment} passes its tests"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_notebook_has_a_written_answer_and_hidden_tests(assignment):
    cells = [c for c in solution(assignment).cells if c.metadata.get("nbgrader", {}).get("grade")]
    written = [c for c in cells if c.cell_type == "markdown" and c.metadata.nbgrader["solution"]]
    hidden = [c for c in cells if "### BEGIN HIDDEN TESTS" in c.source]
    assert written and len(hidden) >= len(cells) - len(written) - 1
    delegation_checked = any("forbid_calls" in c.source for c in hidden)
    assert delegation_checked, f"{assignment}: no hidden test checks for delegation"
