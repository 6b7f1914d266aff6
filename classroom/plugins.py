"""nbgrader plug-ins for the course, named in ``nbgrader_config.py``.

nbgrader runs these while it grades and makes feedback:

* ``ReplayExecuted``: the outputs of each notebook come from the run the grader made
  in the sandbox (``execute.py``), not from a kernel nbgrader would start itself;
* ``RestoreCells``: the instructor's cells are put back as released, even when a
  student deleted, emptied or pasted over them;
* ``GraderFeedback``: feedback without the hidden tests, and without anything a
  kernel printed: each test shows the grader's verdict;
* ``KitCollect``: ``nbgrader collect`` and the formgrader's Collect button collect the
  way ``make collect`` does (``collect_exchange.py``).

``classroom/autograde.py`` drives nbgrader with them.
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from pathlib import Path

import nbformat
from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.preprocessors import NbGraderPreprocessor, OverwriteCells
from traitlets import Float, Unicode

from .course import is_test, run_captured
from .sandbox import bwrap_problem


class ReplayExecuted(NbGraderPreprocessor):
    """Outputs and verdicts from the notebook the grader ran in the sandbox.

    ``make autograde`` runs every submission in a sandbox first and writes the
    executed notebooks to ``folder/<assignment>/<student>/``; nbgrader then records
    the grades from them. The cells must be the very cells that ran: a difference
    stops the student's grading rather than grade one text with another's outputs.

    The Formgrader's autograde button runs nbgrader in the server with no ``folder``:
    then the notebook is run here and now, by a grader process with the same sandbox
    and limits (``_run_in_sandbox``), never by a kernel nbgrader starts itself.
    """

    folder = Unicode("", help="where make autograde put the executed notebooks").tag(config=True)
    timeout = Float(900.0, help="seconds for one notebook run from the Formgrader").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        if self.folder:
            path = (
                Path(self.folder)
                / info["assignment"]
                / info["student"]
                / f"{info['notebook']}.ipynb"
            )
            if not path.is_file():
                raise RuntimeError(f"make autograde left no executed notebook at {path}")
            executed = nbformat.read(path, as_version=4)
        else:
            executed = self._run_in_sandbox(nb, Path(resources["metadata"]["path"]))
        if [c.source for c in executed.cells] != [c.source for c in nb.cells]:
            raise RuntimeError(f"the executed {info['notebook']} does not hold the cells graded")
        for cell, ran in zip(nb.cells, executed.cells, strict=True):
            if cell.cell_type == "code":
                cell.outputs = ran.outputs
                cell.execution_count = ran.execution_count
            if "autodiff" in ran.metadata:
                cell.metadata["autodiff"] = ran.metadata["autodiff"]
        nb.metadata["autodiff"] = executed.metadata.get("autodiff", {})
        return nb, resources

    def _run_in_sandbox(self, nb, files: Path):
        """Run ``nb`` as ``make autograde`` does: ``execute.py`` in a process of its
        own, its kernel in the sandbox with a private copy of the student's ``files``."""
        problem = bwrap_problem()
        if problem:
            raise RuntimeError(
                f"the Formgrader grades only in the sandbox, and {problem}: install "
                "bubblewrap, or grade with make autograde (SANDBOX=none only if every "
                "student is trusted)"
            )
        with tempfile.TemporaryDirectory(prefix="formgrader-") as scratch:
            staged, out = Path(scratch) / "notebook.ipynb", Path(scratch) / "executed.ipynb"
            nbformat.write(nb, staged)
            command = [sys.executable, "-m", "classroom.execute"]
            command += [str(staged), str(files), str(out), "--sandbox", "bwrap"]
            code, output = run_captured(command, timeout=self.timeout)
            if code is None:
                raise RuntimeError(f"the notebook ran over {self.timeout:.0f} s")
            if code != 0 or not out.is_file():
                raise RuntimeError(f"the sandboxed run failed:\n{output[-2000:]}")
            return nbformat.read(out, as_version=4)


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


class GraderFeedback(NbGraderPreprocessor):
    """Feedback written by the grader: the hidden tests removed, every output replaced.

    A kernel that ran student code can print anything, hidden tests included, in any
    encoding; so nothing the kernel printed goes into feedback. Each test cell shows
    the grader's verdict (passed, failed with the error's name, or not run because
    the code changed how tests run); other cells show no output (students have them
    in their own notebook). A first cell lists what the grader noticed: cells
    restored or reordered, limits hit.
    """

    begin = "BEGIN HIDDEN TESTS"  # matched as nbgrader matches it: anywhere in the line
    end = "END HIDDEN TESTS"

    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)
        meta = nb.metadata.get("autodiff", {})
        lines = [f"- {_literal(note)}" for note in meta.get("notes", [])]
        lines += [f"- {_literal(note)}" for note in meta.get("cells", [])]  # limits, by cell
        lines += [f"- limit hit: {_literal(hit)}" for hit in meta.get("limits_hit", [])]
        text = "**From the grader.** Tests show their result; run your notebook to see outputs."
        if lines:
            text += "\n\nWhat the grader noticed:\n\n" + "\n".join(lines)
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(text))
        nb.metadata.pop("autodiff", None)
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        lines = cell.source.splitlines()
        if self.begin in cell.source:
            kept = [line for n, line in enumerate(lines, 1) if n not in self._hidden(lines)]
            cell.source = "\n".join(kept).rstrip()
        verdict = cell.metadata.pop("autodiff", {})  # the findings are the instructor's
        cell.outputs = [_verdict_output(verdict)] if is_test(cell) else []
        return cell, resources

    def _hidden(self, lines: list[str]) -> set[int]:
        hidden, hiding = set(), False
        for number, line in enumerate(lines, start=1):
            if self.begin in line:
                hiding = True
            if hiding:
                hidden.add(number)
            if self.end in line:
                hiding = False
        return hidden


def _literal(text: str) -> str:
    """``text`` shown as it is in Markdown: the notes quote what a student named (cells,
    kernels, files), which must not become HTML, links or formatting in the page."""
    out = []
    for char in str(text)[:300]:
        if char in "\\`*_{}[]()<>#+-.!|&~\"'":
            out.append("\\" + char)
        else:
            out.append(char if char.isprintable() else "?")
    return "".join(out)


def _verdict_output(verdict: dict):
    status = verdict.get("verdict")
    if status == "passed":
        text = "passed"
    elif status == "failed" and verdict.get("stopped"):
        text = f"failed: this test {verdict['stopped']}"
    elif status == "failed":
        text = f"failed: {verdict.get('error', 'an error')} (run the notebook to see it)"
        for reason in verdict.get("because", []):  # a limit stopped a cell it uses
            text += f"; {reason}, so this test could not use it"
    elif status == "tampered":
        text = (
            "not run: your code changed how the tests run (hooks, transformers or "
            "replaced functions); your instructor has the details"
        )
    else:
        text = "not graded"
    return nbformat.v4.new_output("stream", name="stdout", text=f"[grader] {text}\n")


class KitCollect(ExchangeCollect):
    """nbgrader's collect (``nbgrader collect``, the formgrader's Collect button) done by
    ``make collect``'s collection, whose report goes to nbgrader's log: nbgrader's own
    would copy what a student's link points to, and stop on one badly named entry.

    It always works as ``--update`` does, since what it replaces is kept first;
    ``--before-duedate`` and ``--student`` are refused: ``make collect`` takes each
    student's latest submission.
    """

    def start(self) -> None:
        from .collect_exchange import collect_exchange

        if self.before_duedate or self.coursedir.student_id not in ("", "*"):
            self.fail("--before-duedate and --student are not supported: run make collect")
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                collect_exchange(Path(self.coursedir.root), self.coursedir.assignment_id or None)
        except SystemExit as stop:
            self.fail(str(stop.code))
        finally:
            for line in printed.getvalue().splitlines():
                self.log.info(line)
