"""A hostile class for the grading pipeline: who submits what, and what each must get.

``CASES`` lists 31 submissions across the five assignments: honest ones, partial and
untouched ones, broken ones (not JSON, a crash, ``os._exit``, loops), careless ones
(pasted, edited, deleted, reordered, renamed cells and notebooks) and hostile ones (the
gradebook, other students' files, background processes, a planted startup file, hooks
that change how tests run, reading the solutions, copying the library's reference).
``test_hostile_class.py`` takes them in as LMS zips and grades them with the Makefile's
commands. Answers come from ``solutions/`` (the cell with the same grade id); the
expected points come from the test cells' points, never from running the grader.
"""

from __future__ import annotations

import copy
import stat
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import nbformat

A1, A2, A3, A4, A5 = (
    "a1_numerical_symbolic",
    "a2_forward_mode",
    "a3_reverse_mode",
    "a4_training",
    "a5_memory",
)
ASSIGNMENTS = (A1, A2, A3, A4, A5)
MARKER = "hostile-class-7f3a9c"  # in every command a hostile process runs, to find it after
WHEN = (2026, 11, 24, 9, 0, 0)  # the zip date of every entry

Edit = Callable[[nbformat.NotebookNode, "Course", str], None]  # notebook, course, assignment


class Course:
    """The course's notebooks, read once: the releases and the instructor's answers."""

    def __init__(self, root: Path):
        self.root = root
        self.home = str(Path.home())
        self._released = {a: _read(root / "assignments", a) for a in ASSIGNMENTS}
        self._solved = {a: _read(root / "solutions", a) for a in ASSIGNMENTS}

    def released(self, assignment: str) -> nbformat.NotebookNode:
        return copy.deepcopy(self._released[assignment])

    def answered(self, assignment: str) -> nbformat.NotebookNode:
        """The release with every answer cell filled in from solutions/."""
        notebook = self.released(assignment)
        model = {_grade_id(cell): cell.source for cell in self._solved[assignment].cells}
        for cell in notebook.cells:
            if _is_answer(cell):
                cell.source = model[_grade_id(cell)]
        return notebook

    def solution(self, assignment: str) -> nbformat.NotebookNode:
        return copy.deepcopy(self._solved[assignment])

    def fill(self, text: str) -> str:
        """A hostile snippet with the course's and the instructor's real paths in it."""
        return text.replace("COURSE", repr(str(self.root))).replace("HOME", repr(self.home))


def _read(folder: Path, assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(folder / assignment / f"{assignment}.ipynb", as_version=4)


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def _is_answer(cell) -> bool:
    return cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution", False)


def _is_test(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and meta.get("grade", False) and not meta.get("solution")


# --- points --------------------------------------------------------------------------


def points_of(course: Course, assignment: str) -> dict[str, float]:
    """grade id -> points of every autograded test cell, in notebook order."""
    cells = course.solution(assignment).cells
    return {_grade_id(c): c.metadata["nbgrader"]["points"] for c in cells if _is_test(c)}


def tests_after(course: Course, assignment: str, answer: str) -> tuple[str, ...]:
    """The test cells after the answer cell ``answer``: the ones a hook set there reaches."""
    ids = [_grade_id(cell) for cell in course.solution(assignment).cells]
    tests = points_of(course, assignment)
    return tuple(g for g in ids[ids.index(answer) :] if g in tests)


# --- editing a notebook ----------------------------------------------------------------


def _index(notebook, grade_id: str) -> int:
    return next(i for i, cell in enumerate(notebook.cells) if _grade_id(cell) == grade_id)


def answer(grade_id: str, source: str) -> Edit:
    """The answer cell ``grade_id`` says ``source`` (COURSE and HOME filled in)."""

    def edit(notebook, course: Course, assignment: str) -> None:
        notebook.cells[_index(notebook, grade_id)].source = course.fill(source)

    return edit


def before(grade_id: str, source: str) -> Edit:
    """``source`` goes first in the answer cell ``grade_id``; the answer stays."""

    def edit(notebook, course: Course, assignment: str) -> None:
        cell = notebook.cells[_index(notebook, grade_id)]
        cell.source = course.fill(source) + "\n\n" + cell.source

    return edit


def released_answer(grade_id: str) -> Edit:
    """The answer cell ``grade_id`` left as released."""

    def edit(notebook, course: Course, assignment: str) -> None:
        release = course.released(assignment)
        notebook.cells[_index(notebook, grade_id)] = release.cells[_index(release, grade_id)]

    return edit


def pasted_twice(grade_id: str) -> Edit:
    def edit(notebook, course: Course, assignment: str) -> None:
        index = _index(notebook, grade_id)
        pasted = copy.deepcopy(notebook.cells[index])
        pasted.id = f"{grade_id}-pasted"  # JupyterLab gives a pasted cell a new id
        notebook.cells.insert(index + 1, pasted)

    return edit


def not_graded(grade_id: str) -> Edit:
    """A test cell's metadata says it is no test (grade: false)."""

    def edit(notebook, course: Course, assignment: str) -> None:
        notebook.cells[_index(notebook, grade_id)].metadata.nbgrader["grade"] = False

    return edit


def deleted(*grade_ids: str) -> Edit:
    def edit(notebook, course: Course, assignment: str) -> None:
        notebook.cells = [cell for cell in notebook.cells if _grade_id(cell) not in grade_ids]

    return edit


def moved_first(*grade_ids: str) -> Edit:
    """These cells moved before the first answer cell (the rest keep their order)."""

    def edit(notebook, course: Course, assignment: str) -> None:
        moved = [cell for cell in notebook.cells if _grade_id(cell) in grade_ids]
        rest = [cell for cell in notebook.cells if _grade_id(cell) not in grade_ids]
        first = next(i for i, cell in enumerate(rest) if _is_answer(cell))
        notebook.cells = rest[:first] + moved + rest[first:]

    return edit


# --- what the students do --------------------------------------------------------------

IGNORE_INTERRUPTS = """\
import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:
    pass
"""

OVERWRITE_GRADEBOOK = """\
import os, sqlite3
for path in (COURSE + "/gradebook.db", "../gradebook.db", "/gradebook.db"):
    try:  # all grades to 99, then the file to garbage (made anew if it is not there)
        db = sqlite3.connect(path)
        db.execute("UPDATE grade SET auto_score = 99")
        db.commit()
    except sqlite3.Error as error:
        print("refused:", path, error)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "wb") as file:
            file.write(b"not a database any more " * 100)
    except OSError as error:
        print("refused:", path, type(error).__name__)
"""

NO_ASSERTS = """\
import ast


class NoAsserts(ast.NodeTransformer):
    def visit_Assert(self, node):
        return ast.copy_location(ast.Pass(), node)


get_ipython().ast_transformers.append(NoAsserts())


def best_step(method, eps=EPS):
    return 1.0
"""

WRONG_DIFF = "def diff(expr, var):\n    return 0\n"

ALWAYS_CLOSE = """\
import builtins
np.allclose = lambda *args, **kwargs: True
builtins.abs = lambda x: 0.0
"""

# Prints every test cell the kernel has run, hidden tests included, in four forms.
LEAK_IN_ROT13 = """\
import base64
import codecs

_leaked = [0]


def _leak():
    if _leaked[0] == len(In):
        return
    _leaked[0] = len(In)
    for source in In:
        if "HIDDEN" not in source:
            continue
        for line in source.splitlines():
            line = line.strip()
            print(codecs.encode(line, "rot13"))
            print(base64.b64encode(line.encode()).decode())
            print(line[::-1])
            print(line)


def derivative_sizes(n_max):
    _leak()
    return [size(diff(logistic_map(n), "x")) for n in range(1, n_max + 1)]
"""

PLANT_STARTUP = f"""\
import pathlib
for home in (pathlib.Path.home(), pathlib.Path(HOME)):
    startup = home / ".ipython" / "profile_default" / "startup"
    try:  # every kernel started after this one would die at once
        startup.mkdir(parents=True, exist_ok=True)
        (startup / "00-{MARKER}.py").write_text("import os\\nos._exit(1)\\n")
    except OSError as error:
        print("refused:", type(error).__name__)
"""

FORK = f"""\
import os
if os.fork() == 0:  # the child outlives the cell and tries, again and again
    try:
        os.setsid()
        os.execv("/bin/sh", ["sh", "-c", "sleep 2; while :; do "
                 "echo 0 > " + COURSE + "/gradebook.db; sleep 1; done # {MARKER}"])
    finally:
        os._exit(0)
"""

BACKGROUND = f"""\
import subprocess
subprocess.Popen(["sh", "-c", "sleep 2; while :; do "
                  "echo 0 > " + COURSE + "/gradebook.db; "
                  "rm -rf " + COURSE + "/submitted; sleep 1; done # {MARKER}"],
                 start_new_session=True)
"""

DELETE_FOLDERS = """\
import os, shutil
for folder in ("grading/backups", "downloaded", "autograded/ada", "feedback/ada",
               "submitted", "solutions"):
    shutil.rmtree(os.path.join(COURSE, folder), ignore_errors=True)
"""

REWRITE_TESTS = """\
import sqlite3
try:  # every stored test becomes `pass`, for this run and the next ones
    db = sqlite3.connect(COURSE + "/gradebook.db")
    db.execute("UPDATE source_cell SET source = 'pass' WHERE name LIKE '%test%'")
    db.execute("UPDATE grade_cell SET max_score = 0")
    db.commit()
except sqlite3.Error as error:
    print("refused:", error)
"""

READ_SOLUTIONS = """\
import json, pathlib
for place in (COURSE, "..", "../..", HOME):
    path = pathlib.Path(place, "solutions", "a3_reverse_mode", "a3_reverse_mode.ipynb")
    if path.exists():
        for cell in json.loads(path.read_text())["cells"]:
            if cell["metadata"].get("nbgrader", {}).get("grade_id") == "gradient_error":
                exec("".join(cell["source"]))
"""

# The library's reverse mode, compiled again three lines lower: other code objects.
COPY_REFERENCE = """\
import importlib
import inspect

_engine = importlib.import_module("autodiff.core.gradients")
_copy = {"__name__": "autodiff.core.gradients", "__package__": "autodiff.core"}
exec(compile("\\n" * 3 + inspect.getsource(_engine), _engine.__file__, "exec"), _copy)


def gradients(output, wrt):
    return _copy["gradients"](output, wrt)
"""


# The swell cell's first function, as solutions/ has it (the leak replaces the second).
_SWELL_MAP = """\
def logistic_map(n):
    l = "x"
    for _ in range(n - 1):
        l = ("*", ("*", 4, l), ("-", 1, l))
    return l
"""

_WRONG_CHECKPOINTS = """\
def checkpointed_grad(layers, x, k):
    return np.zeros_like(x), list(range(0, len(layers), k))
"""


# --- the class -------------------------------------------------------------------------


@dataclass
class Case:
    """One submission, and what grading must make of it.

    ``lost``: the test cells that must earn nothing (the others earn their points):
    test ids, ``"all"``, or ``"tests after <answer id>"`` (where a hook set in that
    answer cell reaches); ``status`` and ``notes`` (parts of the pipeline's note) as
    the autograde report says; ``entry``: the file's name in the LMS zip (default:
    Canvas's).
    """

    student: str
    assignment: str
    kind: str
    what: str
    edits: tuple[Edit, ...] = ()
    start: str = "answered"  # or "released"
    raw: bytes | None = None  # submitted as these bytes instead
    lost: tuple[str, ...] | str = ()
    status: str = "graded"
    notes: tuple[str, ...] = ()
    entry: str | None = None
    number: int = field(default=0, compare=False)

    def notebook_bytes(self, course: Course) -> bytes:
        if self.raw is not None:
            return self.raw
        notebook = getattr(course, self.start)(self.assignment)
        for edit in self.edits:
            edit(notebook, course, self.assignment)
        return nbformat.writes(notebook).encode()

    def zip_name(self) -> str:
        canvas = f"{self.student}_{1000 + self.number}_{2000 + self.number}"
        return self.entry or f"{canvas}_{self.assignment}.ipynb"

    def expected_cells(self, course: Course) -> dict[str, float] | None:
        """Test cell -> points it must earn; None when nothing may be recorded."""
        if self.status not in ("graded", "tampering"):
            return None
        points = points_of(course, self.assignment)
        lost = self.lost
        if lost == "all":
            lost = tuple(points)
        elif isinstance(lost, str):  # "tests after <answer>": where a hook reaches
            lost = tests_after(course, self.assignment, lost.removeprefix("tests after "))
        assert set(lost) <= set(points), f"{self.student}: unknown tests {lost}"
        return {grade_id: 0 if grade_id in lost else p for grade_id, p in points.items()}

    def expected_score(self, course: Course) -> float | None:
        cells = self.expected_cells(course)
        return None if cells is None else sum(cells.values())


def _cases() -> list[Case]:
    c = Case
    cases = [
        # a1: the loops and the hooks (graded with GRADING_CELL_TIMEOUT=10)
        c("ada", A1, "honest", "every answer from solutions/"),
        c("ben", A1, "untouched", "the release as handed out", start="released", lost="all"),
        c(
            "cy",
            A1,
            "partial",
            "two answers wrong",
            (
                answer("plot_error_curve", "def plot_error_curve(hs, errors):\n    return None"),
                answer("best_step", "def best_step(method, eps=EPS):\n    return 0.5"),
            ),
            lost=("test_plot_error_curve", "test_best_step"),
        ),
        c(
            "dot",
            A1,
            "broken",
            "not JSON",
            raw=b'{"cells": [ this is not JSON',
            status="invalid notebook",
            notes=("not a valid notebook",),
        ),
        c(
            "eve",
            A1,
            "broken",
            "a loop that ignores SIGINT",
            (answer("best_step", IGNORE_INTERRUPTS),),
            lost=("test_best_step",),
            notes=("a cell crashed or ran out of time",),
        ),
        c(
            "mal",
            A1,
            "hostile",
            "overwrites and corrupts gradebook.db (absolute path)",
            (before("finite_differences", OVERWRITE_GRADEBOOK),),
            notes=("look at this one",),
        ),
        c(
            "tom",
            A1,
            "hostile",
            "AST transformer: asserts become pass (wrong answers)",
            (answer("best_step", NO_ASSERTS), answer("diff", WRONG_DIFF)),
            lost="tests after best_step",
            status="tampering",
            notes=("tests not run", "look at this one"),
        ),
        c(
            "abe",
            A1,
            "hostile",
            "replaces np.allclose and builtins.abs",
            (before("step_errors", ALWAYS_CLOSE),),
            lost="tests after step_errors",
            status="tampering",
            notes=("tests not run", "look at this one"),
        ),
        c(
            "rot",
            A1,
            "hostile",
            "prints every line run, hidden tests too: rot13, base64, reversed",
            (answer("swell", LEAK_IN_ROT13 + "\n\n" + _SWELL_MAP),),
        ),
        # a2: careless cells, a startup file, a fork
        c("bea", A2, "honest", "every answer from solutions/"),
        c(
            "cal",
            A2,
            "partial",
            "two answers wrong",
            (
                answer("classic_partials", "def classic_partials(x, y):\n    return 42.0, 0, 0"),
                answer("forward_passes", "def forward_passes(f, x):\n    return 1"),
            ),
            lost=("test_classic_partials", "test_forward_passes"),
        ),
        c(
            "dup",
            A2,
            "careless",
            "an answer cell pasted twice",
            (pasted_twice("jvp"),),
            notes=("the answer cell 'jvp' appears twice",),
        ),
        c(
            "meta",
            A2,
            "careless",
            "a test cell's metadata set to grade: false",
            (not_graded("test_jvp"),),
            notes=("the metadata of the test cell 'test_jvp' was changed",),
        ),
        c(
            "ray",
            A2,
            "broken",
            "an answer cell that raises",
            (answer("classic_partials", "raise RuntimeError('I will finish this later')"),),
            lost=("test_classic_partials",),
        ),
        c(
            "4711",
            A2,
            "hostile",
            "plants an IPython startup file in HOME (Moodle folder, file named as bea's)",
            (before("dual_class", PLANT_STARTUP),),
            entry=f"Hal Startup_4711_assignsubmission_file_/bea_1001_2001_{A2}.ipynb",
            notes=("look at this one",),
        ),
        c(
            "frk",
            A2,
            "hostile",
            "os.fork: a child that writes the gradebook every second",
            (before("elementary_functions", FORK),),
            notes=("look at this one",),
        ),
        # a3: the stored tests, the solutions, the library's reference
        c("bo", A3, "honest", "every answer from solutions/"),
        c("cid", A3, "untouched", "the release as handed out", start="released", lost="all"),
        c(
            "del",
            A3,
            "careless",
            "an answer and its test deleted, two cells moved first",
            (deleted("sum_op", "sum_op_test"), moved_first("matmul_op", "matmul_op_test")),
            lost=("sum_op_test",),
            notes=("the answer cell 'sum_op' was deleted", "cells were reordered"),
        ),
        c(
            "nadia",
            A3,
            "careless",
            "notebook renamed 'a3 (1).ipynb', in her own folder",
            entry="nadia/a3 (1).ipynb",
        ),
        c(
            "rew",
            A3,
            "hostile",
            "rewrites the gradebook's stored test cells to `pass` (sum_op unanswered)",
            (before("matmul_op", REWRITE_TESTS), released_answer("sum_op")),
            lost=("sum_op_test",),
            notes=("look at this one",),
        ),
        c(
            "sol",
            A3,
            "hostile",
            "reads solutions/ from disk and execs the answer",
            (answer("gradient_error", READ_SOLUTIONS),),
            lost=("gradient_error_test",),
            notes=("look at this one",),
        ),
        c(
            "src",
            A3,
            "hostile",
            "gradients() runs a line-shifted copy of the reference (getsource, compile)",
            (answer("gradients_impl", COPY_REFERENCE),),
            lost=("gradients_test", "gradients_edge_cases_test", "second_derivative_test"),
            notes=("look at this one",),
        ),
        # a4: two, training is the slowest notebook
        c("gus", A4, "honest", "every answer from solutions/"),
        c(
            "rm",
            A4,
            "hostile",
            "deletes backups/, downloaded/, submitted/, ada's autograded/ and feedback/ "
            "(plot_loss unanswered)",
            (before("sgd_momentum", DELETE_FOLDERS), released_answer("plot_loss")),
            lost=("plot_loss_test",),
            notes=("look at this one",),
        ),
        # a5: graded first, while a second autograde tries to start
        c(
            "bg",
            A5,
            "hostile",
            "subprocess.Popen(['sh', '-c', 'sleep 2; ...']) writing the gradebook",
            (before("liveness", BACKGROUND),),
            notes=("look at this one",),
        ),
        c(
            "kay",
            A5,
            "broken",
            "os._exit in an answer cell",
            (answer("liveness", "import os\nos._exit(1)"),),
            lost=("liveness_test",),
            notes=("a cell crashed or ran out of time",),
        ),
        c(
            "inf",
            A5,
            "broken",
            "an infinite loop",
            (answer("checkpointing", "while True:\n    pass"),),
            lost=("checkpointing_test",),
            notes=("a cell crashed or ran out of time",),
        ),
        c("liv", A5, "honest", "every answer from solutions/"),
        c(
            "par",
            A5,
            "partial",
            "one answer wrong",
            (answer("checkpointing", _WRONG_CHECKPOINTS),),
            lost=("checkpointing_test",),
        ),
        c("una", A5, "untouched", "the release as handed out", start="released", lost="all"),
    ]
    for number, case in enumerate(cases, start=1):
        case.number = number
    return cases


CASES = _cases()


# --- the LMS zips ----------------------------------------------------------------------


@dataclass
class Extra:
    """A zip entry that is nobody's submission, and why it must not be collected."""

    name: str
    data: bytes
    reason: str
    symlink: bool = False


EXTRAS = {
    A3: [
        Extra(f"../{A3}.ipynb", b"{}", "path with .."),
        Extra(
            f"sym_1098_2098_{A3}.ipynb",
            f"../../solutions/{A3}/{A3}.ipynb".encode(),  # the link's target
            "symlink",
            symlink=True,
        ),
        Extra("final version.ipynb", b"{}", "cannot tell whose it is"),
    ],
}


def write_zip(course: Course, assignment: str, path: Path) -> Path:
    """The LMS download of ``assignment``: every case's notebook, and the extras."""
    with zipfile.ZipFile(path, "w") as archive:
        for case in CASES:
            if case.assignment == assignment:
                info = zipfile.ZipInfo(case.zip_name(), WHEN)
                archive.writestr(info, case.notebook_bytes(course))
        for extra in EXTRAS.get(assignment, []):
            info = zipfile.ZipInfo(extra.name, WHEN)
            if extra.symlink:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, extra.data)
    return path


def expected_collection(assignment: str) -> dict[str, tuple[str, str, str]]:
    """zip entry -> (status, student, reason) in the collect report: the whole reason
    for what is collected, a part of it for what is not."""
    rows = {}
    for case in CASES:
        if case.assignment == assignment:
            name = case.zip_name()
            mine = PurePosixPath(name).name
            renamed = f"renamed: {mine} -> {assignment}.ipynb" if "/" in name else ""
            rows[name] = ("collected", case.student, renamed)
    for extra in EXTRAS.get(assignment, []):
        rows[extra.name] = ("not collected", "", extra.reason)
    return rows


def hidden_lines(course: Course, assignment: str) -> list[str]:
    """The hidden tests' lines of ``assignment`` that say something (stripped), but for
    those that students see anyway: in the release, or in an answer from solutions/."""
    solution = course.solution(assignment)
    answers = [cell.source for cell in solution.cells if _is_answer(cell)]
    shown = "\n".join([cell.source for cell in course.released(assignment).cells] + answers)
    lines = set()
    for cell in solution.cells:
        hiding = False
        for line in cell.source.splitlines():
            if "BEGIN HIDDEN TESTS" in line:
                hiding = True
            elif "END HIDDEN TESTS" in line:
                hiding = False
            elif hiding and len(line.strip()) >= 16 and line.strip() not in shown:
                lines.add(line.strip())
    return sorted(lines)


def marker_processes() -> list[int]:
    """Processes still running a hostile student's command (found by MARKER)."""
    found = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if MARKER.encode() in path.read_bytes():
                found.append(int(path.parent.name))
        except OSError:  # it ended meanwhile
            continue
    return found
