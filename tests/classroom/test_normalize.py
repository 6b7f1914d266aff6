"""Normalising submissions (classroom/normalize.py): each rule on a small
released notebook, arbitrary JSON that must not crash it, the course's five real
assignments, and damaged submissions graded by the real nbgrader.
"""

import copy
import json
import shutil
from pathlib import Path

import nbformat
import pytest
from hypothesis import given
from hypothesis import strategies as st

from classroom.normalize import normalize, normalize_file

ROOT = Path(__file__).resolve().parents[2]
UNANSWERED = "def {}(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"


def _meta(grade_id, **flags):
    nbgrader = {"grade": False, "locked": False, "schema_version": 3, "solution": False}
    return {"nbgrader": {**nbgrader, "task": False, "grade_id": grade_id, **flags}}


def released_toy() -> nbformat.NotebookNode:
    """As nbgrader releases it: a setup cell, two answers with a test each, a written answer."""
    code, md = nbformat.v4.new_code_cell, nbformat.v4.new_markdown_cell
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    notebook.cells = [
        md("# A toy assignment", id="intro"),
        code("import math", id="setup", metadata=_meta("setup", locked=True)),
        code(UNANSWERED.format("square"), id="square", metadata=_meta("square", solution=True)),
        code(
            "assert square(3) == 9",
            id="square-test",
            metadata=_meta("square_test", grade=True, locked=True, points=2),
        ),
        code(UNANSWERED.format("cube"), id="cube", metadata=_meta("cube", solution=True)),
        code(
            "assert cube(2) == 8",
            id="cube-test",
            metadata=_meta("cube_test", grade=True, locked=True, points=3),
        ),
        md("Why square?", id="why-question"),
        md(
            "YOUR ANSWER HERE",
            id="why",
            metadata=_meta("why", grade=True, solution=True, points=1),
        ),
    ]
    return notebook


RELEASED = released_toy()
SQUARE, CUBE, WHY = (
    "def square(x):\n    return x * x",
    "def cube(x):\n    return x ** 3",
    "Why not.",
)


def answered() -> nbformat.NotebookNode:
    notebook = copy.deepcopy(RELEASED)
    for index, text in ((2, SQUARE), (4, CUBE), (7, WHY)):
        notebook.cells[index].source = text
    return notebook


def sources(notebook) -> list[str]:
    return [cell.source for cell in notebook.cells]


def released_sources(**answers) -> list[str]:
    """The released cells' text, with answers by grade_id."""
    return [answers.get(_grade_id(cell), cell.source) for cell in RELEASED.cells]


def _grade_id(cell):
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def assert_released_structure(notebook):
    """Every released cell once, in order, with its id and metadata; no outputs anywhere."""
    mine = [cell for cell in notebook.cells if cell.id in {c.id for c in RELEASED.cells}]
    assert [(c.id, c.cell_type, c.metadata) for c in mine] == [
        (c.id, c.cell_type, c.metadata) for c in RELEASED.cells
    ]
    assert notebook.metadata == RELEASED.metadata
    for cell in notebook.cells:
        assert cell.get("outputs", []) == [] and cell.get("execution_count") is None
    nbformat.validate(notebook)


# --- the rules, one by one -----------------------------------------------------------


def test_the_release_itself_comes_back_unchanged():
    notebook, notes = normalize(copy.deepcopy(RELEASED), RELEASED)
    assert notebook == RELEASED and notes == []


def test_answers_are_kept_and_outputs_dropped():
    mine = answered()
    mine.cells[2].outputs = [nbformat.v4.new_output("stream", text="hello")]
    mine.cells[2].execution_count = 3
    untouched = copy.deepcopy(mine)
    notebook, notes = normalize(mine, RELEASED)
    assert mine == untouched and RELEASED == released_toy()
    assert sources(notebook) == released_sources(square=SQUARE, cube=CUBE, why=WHY)
    assert notes == []
    assert_released_structure(notebook)


def test_a_pasted_answer_cell_grades_the_first_copy_that_was_answered():
    mine = answered()
    mine.cells.insert(2, copy.deepcopy(RELEASED.cells[2]))  # unanswered copy first
    notebook, notes = normalize(mine, RELEASED)
    assert sources(notebook) == released_sources(square=SQUARE, cube=CUBE, why=WHY)
    assert notes == ["the answer cell 'square' appears twice: the second copy was graded"]
    assert_released_structure(notebook)


def test_of_two_answered_copies_the_first_is_graded():
    mine = answered()
    mine.cells.insert(3, copy.deepcopy(mine.cells[2]))
    mine.cells[3].source = "def square(x):\n    return x ** 2"
    notebook, notes = normalize(mine, RELEASED)
    assert notebook.cells[2].source == SQUARE
    assert notes == ["the answer cell 'square' appears twice: the first copy was graded"]


def test_unanswered_copies_grade_the_first():
    mine = copy.deepcopy(RELEASED)
    for _ in range(2):
        mine.cells.insert(2, copy.deepcopy(RELEASED.cells[2]))
    notebook, notes = normalize(mine, RELEASED)
    assert notebook == RELEASED
    assert notes == ["the answer cell 'square' appears 3 times: the first copy was graded"]


def test_a_test_cell_with_grade_false_is_used_as_released():
    mine = answered()
    mine.cells[3].metadata.nbgrader.grade = False
    notebook, notes = normalize(mine, RELEASED)
    assert sources(notebook) == released_sources(square=SQUARE, cube=CUBE, why=WHY)
    assert notes == [
        "the metadata of the test cell 'square_test' was changed: the released cell was used"
    ]
    assert_released_structure(notebook)


def test_an_edited_or_pasted_test_cell_is_used_as_released():
    mine = answered()
    mine.cells[3].source = "pass"
    mine.cells.append(copy.deepcopy(RELEASED.cells[5]))
    notebook, notes = normalize(mine, RELEASED)
    assert sources(notebook) == released_sources(square=SQUARE, cube=CUBE, why=WHY)
    assert notes == [
        "the test cell 'square_test' was changed: the released cell was used",
        "the test cell 'cube_test' appears twice: it was kept once, as released",
    ]


def test_an_answer_whose_solution_flag_was_flipped_is_still_graded():
    mine = answered()
    mine.cells[2].metadata.nbgrader.solution = False
    notebook, notes = normalize(mine, RELEASED)
    assert notebook.cells[2].source == SQUARE
    assert notes == [
        "the metadata of the answer cell 'square' was changed: graded with the released metadata"
    ]
    assert_released_structure(notebook)


def test_deleted_cells_are_put_back():
    mine = answered()
    del mine.cells[5]  # cube_test
    del mine.cells[1]  # setup
    del mine.cells[0]  # the title: plain text comes back without a note
    mine.cells.pop()  # the written answer
    notebook, notes = normalize(mine, RELEASED)
    assert sources(notebook) == released_sources(square=SQUARE, cube=CUBE)
    assert notes == [
        "the locked cell 'setup' was deleted: it was put back",
        "the test cell 'cube_test' was deleted: it was put back",
        "the answer cell 'why' was deleted: graded as unanswered",
    ]
    assert_released_structure(notebook)


def test_reordered_cells_are_graded_in_the_released_order():
    mine = answered()
    mine.cells[2:6] = mine.cells[4:6] + [mine.cells[3], mine.cells[2]]  # cube first, test up
    notebook, notes = normalize(mine, RELEASED)
    assert sources(notebook) == released_sources(square=SQUARE, cube=CUBE, why=WHY)
    assert notes == ["cells were reordered: graded in the released order"]


def test_an_answer_cell_without_its_metadata_is_found_by_its_id():
    mine = answered()
    del mine.cells[2].metadata["nbgrader"]
    mine.cells[4].metadata.nbgrader.grade_id = "my_cube"
    notebook, notes = normalize(mine, RELEASED)
    assert sources(notebook) == released_sources(square=SQUARE, cube=CUBE, why=WHY)
    assert notes == [
        "the metadata of the answer cell 'square' was changed: graded with the released metadata",
        "the metadata of the answer cell 'cube' was changed: graded with the released metadata",
    ]
    assert_released_structure(notebook)


def test_added_cells_stay_where_they_were():
    code = nbformat.v4.new_code_cell
    mine = answered()
    mine.cells.insert(3, code("def helper(): ...", id="helper", execution_count=1))
    mine.cells.insert(0, code("import numpy", id="top"))
    mine.cells.append(nbformat.v4.new_markdown_cell("The end.", id="end"))
    mine.cells.append(code("x = 1", id="helper"))  # an id already taken
    notebook, notes = normalize(mine, RELEASED)
    assert notes == []
    expected = released_sources(square=SQUARE, cube=CUBE, why=WHY)
    expected.insert(3, "def helper(): ...")
    assert sources(notebook) == ["import numpy", *expected, "The end.", "x = 1"]
    ids = [cell.id for cell in notebook.cells]
    assert ids[:4] == ["top", "intro", "setup", "square"] and ids[4] == "helper"
    assert ids[-1] not in ids[:-1] and ids[-2] == "end"
    assert_released_structure(notebook)


def test_added_cells_before_every_released_cell_go_before_the_first_found():
    mine = answered()
    del mine.cells[0:2]  # the title and the setup cell
    mine.cells.insert(0, nbformat.v4.new_code_cell("import numpy", id="top"))
    notebook, notes = normalize(mine, RELEASED)
    assert [cell.id for cell in notebook.cells][:4] == ["intro", "setup", "top", "square"]
    assert notes == ["the locked cell 'setup' was deleted: it was put back"]


def test_an_unknown_grade_id_becomes_an_ordinary_cell():
    mine = answered()
    extra = nbformat.v4.new_code_cell("y = 2", id="extra", metadata=_meta("bonus", grade=True))
    extra.metadata["tags"] = ["mine"]
    mine.cells.insert(5, extra)
    notebook, notes = normalize(mine, RELEASED)
    assert notebook.cells[5].source == "y = 2"
    assert notebook.cells[5].metadata == {"tags": ["mine"]}
    assert notes == [
        "the cell 'bonus' is not part of the assignment: it was kept as an ordinary cell"
    ]


def test_an_edited_unlocked_code_cell_is_kept_after_the_released_one():
    released = copy.deepcopy(RELEASED)
    released.cells.insert(2, nbformat.v4.new_code_cell("n = 10", id="scratch"))
    mine = copy.deepcopy(released)
    mine.cells[2].source = "n = 20\ndef helper(): ..."
    notebook, notes = normalize(mine, released)
    assert [cell.source for cell in notebook.cells][2:4] == ["n = 10", "n = 20\ndef helper(): ..."]
    assert notebook.cells[3].id != "scratch" and notes == []


def test_the_kernel_and_the_name_come_from_the_release():
    mine = answered()
    mine.metadata["kernelspec"] = {"name": "julia-1.9", "display_name": "Julia"}
    notebook, notes = normalize(
        mine, RELEASED, submitted_name="toy (1).ipynb", released_name="toy.ipynb"
    )
    assert notebook.metadata == RELEASED.metadata
    assert notes == [
        "the notebook was renamed from 'toy.ipynb' to 'toy (1).ipynb': graded as 'toy.ipynb'",
        "the notebook's kernel was switched to 'julia-1.9': graded with 'python3'",
    ]


def test_broken_parts_are_left_out_and_noted():
    mine = json.loads(json.dumps(answered()))
    cells = mine["cells"]
    cells[2]["source"] = cells[2]["source"].splitlines(keepends=True)  # a list: fine
    cells[4]["metadata"] = "oops"  # found by its id
    cells[3]["source"] = [1, 2]
    cells[7]["cell_type"] = "heading"
    del cells[5]["source"]
    cells.insert(1, 42)
    notebook, notes = normalize(mine, RELEASED)
    assert sources(notebook) == released_sources(square=SQUARE, cube=CUBE)
    assert notes == [
        "cell 2 could not be read (it is not a cell): it was left out",
        "cell 5 ('square_test') could not be read (its source is not text): it was left out",
        "cell 9 ('why') could not be read (unknown cell type 'heading'): it was left out",
        "the test cell 'square_test' could not be read: it was put back",
        "the metadata of the answer cell 'cube' was changed: graded with the released metadata",
        "the test cell 'cube_test' was changed: the released cell was used",
        "the answer cell 'why' could not be read: graded as unanswered",
    ]
    assert_released_structure(notebook)


@pytest.mark.parametrize("submitted", [[], "text", {"cells": "no"}, {"metadata": 3}])
def test_something_that_is_not_a_notebook_grades_as_unanswered(submitted):
    notebook, notes = normalize(submitted, RELEASED)
    assert notebook == RELEASED
    assert notes == ["the notebook has no list of cells: every answer was graded as unanswered"]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
CELLS = [json.loads(json.dumps(cell)) for cell in answered().cells]
KEYS = ["cell_type", "source", "metadata", "id", "outputs", "execution_count"]
FLAGS = ["grade_id", "solution", "grade", "locked", "points", "task"]


def _damage(cell, key, value):
    return {**cell, key: value}


def _damage_nbgrader(cell, key, value):
    damaged = copy.deepcopy(cell)
    damaged.setdefault("metadata", {}).setdefault("nbgrader", {})[key] = value
    return damaged


SOME_CELL = st.one_of(
    st.sampled_from(CELLS),
    st.builds(_damage, st.sampled_from(CELLS), st.sampled_from(KEYS), JSON),
    st.builds(_damage_nbgrader, st.sampled_from(CELLS), st.sampled_from(FLAGS), JSON),
    JSON,
)


@given(cells=st.lists(SOME_CELL, max_size=10), metadata=JSON)
def test_no_json_makes_it_raise(cells, metadata):
    notebook, notes = normalize({"cells": cells, "metadata": metadata}, RELEASED)
    assert_released_structure(notebook)
    assert all(isinstance(note, str) for note in notes)


def test_normalize_file_reads_and_writes(tmp_path):
    (tmp_path / "toy.ipynb").write_text(json.dumps(RELEASED))
    mine = answered()
    mine.cells.insert(2, copy.deepcopy(RELEASED.cells[2]))
    mine.cells[2].id = "pasted"
    nbformat.write(mine, tmp_path / "toy-Copy1.ipynb")
    out = tmp_path / "submitted" / "ann" / "toy" / "toy.ipynb"
    notes = normalize_file(tmp_path / "toy-Copy1.ipynb", tmp_path / "toy.ipynb", out)
    assert sources(nbformat.read(out, as_version=4)) == sources(answered())
    assert notes == [
        "the notebook was renamed from 'toy.ipynb' to 'toy-Copy1.ipynb': graded as 'toy.ipynb'",
        "the answer cell 'square' appears twice: the second copy was graded",
    ]
    (tmp_path / "odd.ipynb").write_text('{"cells": [{"cell_type": "code"}]}')  # nbformat refuses
    notes = normalize_file(tmp_path / "odd.ipynb", tmp_path / "toy.ipynb", out)
    assert notes[1] == "the locked cell 'setup' was deleted: it was put back"


# --- the course's assignments -------------------------------------------------------

ASSIGNMENTS = sorted(p.parent.name for p in (ROOT / "assignments").glob("*/*.ipynb"))


def test_the_course_has_its_assignments():
    assert len(ASSIGNMENTS) >= 5  # a glob that finds nothing would test nothing


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_real_releases_come_back_unchanged_and_answers_kept(assignment):
    released = nbformat.read(ROOT / "assignments" / assignment / f"{assignment}.ipynb", 4)
    notebook, notes = normalize(copy.deepcopy(released), released)
    assert notebook == released and notes == []

    solution = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", 4)
    answers = {_grade_id(c): c.source for c in solution.cells if _is_answer(c)}
    filled = copy.deepcopy(released)
    for cell in filled.cells:
        if _is_answer(cell):
            cell.source = answers[_grade_id(cell)]
    notebook, notes = normalize(filled, released)
    assert notes == [] and notebook == filled
    kept = {_grade_id(c): c.source for c in notebook.cells if _is_answer(c)}
    assert kept == answers


def _is_answer(cell) -> bool:
    return bool(cell.metadata.get("nbgrader", {}).get("solution"))


# --- the real nbgrader --------------------------------------------------------------


def _toy_source() -> nbformat.NotebookNode:
    """The instructor's notebook: solutions and hidden tests (cf. test_pipeline.py)."""
    notebook = copy.deepcopy(RELEASED)
    solution = "def {}(x):\n    ### BEGIN SOLUTION\n    return {}\n    ### END SOLUTION"
    hidden = "\n### BEGIN HIDDEN TESTS\nassert {}\n### END HIDDEN TESTS"
    notebook.cells[2].source = solution.format("square", "x * x")
    notebook.cells[3].source += hidden.format("square(-2) == 4")
    notebook.cells[4].source = solution.format("cube", "x ** 3")
    notebook.cells[5].source += hidden.format("cube(-1) == -1")
    notebook.cells[7].source = "Model answer: because."
    return notebook


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    pytest.importorskip("nbgrader")
    from classroom import course as course_dir

    root = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", root)
    (root / "solutions" / "toy").mkdir(parents=True)
    nbformat.write(_toy_source(), root / "solutions" / "toy" / "toy.ipynb")
    code, output = course_dir.nbgrader(root, "generate_assignment", "toy", "--force")
    assert code == 0, output
    return root


def _damaged(released: dict, student: str) -> tuple[dict, str]:
    """A submission broken the way ``student`` breaks it, and its file name."""
    cells = released["cells"]
    cells[2]["source"] = SQUARE
    cells[4]["source"] = CUBE
    if student == "pasted":  # an unanswered copy above the answer
        cells.insert(2, {**cells[2], "source": UNANSWERED.format("square"), "id": "pasted"})
    elif student == "ungraded":  # a test cell with grade: false, and a wrong cube
        cells[3]["metadata"]["nbgrader"]["grade"] = False
        cells[4]["source"] = "def cube(x):\n    return 0"
    elif student == "deleted":  # cube's test deleted, and a wrong cube
        del cells[5]
        cells[4]["source"] = "def cube(x):\n    return 0"
    elif student == "reordered":  # each test above its answer
        cells[2:6] = [cells[3], cells[2], cells[5], cells[4]]
    elif student == "helper":  # square uses a helper cell, and lost its metadata
        cells[2]["source"] = "def square(x):\n    return times(x, x)"
        del cells[2]["metadata"]["nbgrader"]
        cells.insert(2, nbformat.v4.new_code_cell("def times(a, b):\n    return a * b"))
    elif student == "renamed":  # ... and a square that only the hidden tests catch
        cells[2]["source"] = "def square(x):\n    return abs(x) * x"
        return released, "toy-Copy1.ipynb"
    return released, "toy.ipynb"


E2E = [  # student, points the answers earn (square 2, cube 3), the notes
    ("pasted", 5, ["the answer cell 'square' appears twice: the second copy was graded"]),
    (
        "ungraded",
        2,
        ["the metadata of the test cell 'square_test' was changed: the released cell was used"],
    ),
    ("deleted", 2, ["the test cell 'cube_test' was deleted: it was put back"]),
    ("reordered", 5, ["cells were reordered: graded in the released order"]),
    (
        "renamed",
        3,
        ["the notebook was renamed from 'toy.ipynb' to 'toy-Copy1.ipynb': graded as 'toy.ipynb'"],
    ),
    (
        "helper",
        5,
        ["the metadata of the answer cell 'square' was changed: graded with the released metadata"],
    ),
]


@pytest.mark.parametrize("student, points, expected_notes", E2E)
def test_nbgrader_grades_normalized_submissions(course, tmp_path, student, points, expected_notes):
    """The damaged notebook as submitted, through `make autograde`'s own pipeline."""
    from classroom import autograde as grader

    released_path = course / "assignments" / "toy" / "toy.ipynb"
    notebook, name = _damaged(json.loads(released_path.read_text()), student)
    (tmp_path / name).write_text(json.dumps(notebook))
    out = tmp_path / "normalized.ipynb"
    assert normalize_file(tmp_path / name, released_path, out) == expected_notes
    folder = course / "submitted" / student / "toy"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(notebook))
    (outcome,) = grader.autograde(course, "toy", student=student, force=True)
    assert (outcome.status, outcome.score, outcome.max_score) == ("graded", points, 6)
    for note in expected_notes:
        assert note in outcome.note
