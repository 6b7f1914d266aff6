"""nbgrader plug-ins for the course, named in ``nbgrader_config.py``.

nbgrader runs these while it grades, makes feedback and collects zips:

* ``ResilientExecute``: a cell that hangs or kills the kernel costs that cell's
  points; the kernel restarts and the earlier cells replay, so grading goes on;
* ``RestoreCells``: the instructor's cells are put back as released, even when a
  student deleted, emptied or pasted over them;
* ``RedactHiddenTests``: feedback without the hidden tests, not even a line of them;
* ``LMSCollector`` (with ``whose``): whose notebook each file in an LMS zip is.

``autodiff/grading/pipeline.py`` drives nbgrader with them.
"""

from __future__ import annotations

import json
import re

import nbformat
from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbgrader.preprocessors import Execute, NbGraderPreprocessor, OverwriteCells


class ResilientExecute(Execute):
    """nbgrader's Execute, surviving a dead or stuck kernel.

    When a student's cell kills the kernel (``os._exit``, ``exit()``, a segfault,
    running out of memory), nbgrader would drop the whole notebook; when a cell runs
    past its time and ignores the interrupt (or loops inside C, holding the GIL),
    every later cell would wait out its own time-out, or nbclient gives up. Here such
    a cell gets an error output saying what happened, the kernel restarts, the earlier
    cells run again (all but the ones that crashed or hung), and grading goes on: the
    student loses the points that depend on that cell, not the assignment.

    A warning printed to stderr by correct code (NumPy's "divide by zero", say) does
    not fail a test cell: in grade cells, stderr is relabelled stdout. Only an error
    fails a test.
    """

    def preprocess_cell(self, cell, resources, index):
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except (DeadKernelError, CellTimeoutError) as error:
            cell.outputs.append(_error_output(type(error).__name__, _STOPPED))
        else:
            _stderr_is_not_failure(cell)
            outputs = cell.get("outputs", [])
            if not any(out.get("ename") == "CellTimeoutError" for out in outputs):
                return cell, resources
        self.log.warning("Cell %d crashed or ran out of time: restarting the kernel", index)
        cell.metadata["autodiff_skipped"] = True
        self._restart_and_replay(index)
        return cell, self.resources

    def _restart_and_replay(self, index: int) -> None:
        """A fresh kernel with the state of the cells before ``index`` (bar skipped ones).

        A replayed cell that kills the kernel again is skipped too, and the replay
        starts over, so later cells still see the setup cells' imports.
        """
        while True:
            run_sync(self.km.restart_kernel)(now=True)
            run_sync(self.kc.wait_for_ready)(timeout=self.startup_timeout)
            if self._replay(index):
                return

    def _replay(self, index: int) -> bool:
        for earlier, cell in enumerate(self.nb.cells[:index]):
            if cell.cell_type != "code" or cell.metadata.get("autodiff_skipped"):
                continue
            replay = nbformat.from_dict(json.loads(json.dumps(cell)))
            try:
                self.execute_cell(replay, earlier, store_history=False)
            except (DeadKernelError, CellTimeoutError):
                cell.metadata["autodiff_skipped"] = True
                cell.outputs.append(_error_output("KernelDied", "(again, on replay) " + _STOPPED))
                return False
            finally:
                self.nb.cells[earlier] = cell  # execute_cell stored the replay there
        return True


_STOPPED = (
    "the kernel stopped or stopped answering while running this cell (exit(), a crash, "
    "running out of memory, or a loop that ignores interrupts)"
)


def _error_output(name: str, message: str):
    text = f"{name}: {message}. Grading went on in a fresh kernel without this cell."
    return nbformat.v4.new_output("error", ename=name, evalue=message, traceback=[text])


def _stderr_is_not_failure(cell) -> None:
    if cell.metadata.get("nbgrader", {}).get("grade"):
        for output in cell.get("outputs", []):
            if output.output_type == "stream" and output.name == "stderr":
                output.name = "stdout"


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


class RedactHiddenTests(NbGraderPreprocessor):
    """Feedback without the hidden tests: not their source, and not a line of it anywhere.

    nbgrader's feedback shows the whole autograded notebook, hidden tests included.
    Here the hidden part of each test cell is removed; in tracebacks, a frame in a test
    cell shows only the failing line when it is visible, and "in the hidden tests"
    otherwise; and any output line of any cell that quotes a hidden line (a student
    printing ``In``, ``inspect.getsource`` of the caller, a warning pointing at the
    test) is replaced. Frames in the student's own code are kept: they help.
    """

    begin = "BEGIN HIDDEN TESTS"  # matched as nbgrader matches it: anywhere in the line
    end = "END HIDDEN TESTS"

    def preprocess(self, nb, resources):
        self._secrets, shown = set(), set()
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            lines = cell.source.splitlines()
            hidden = self._hidden_lines(lines) if self.begin in cell.source else set()
            self._secrets |= {lines[n - 1].strip() for n in hidden}
            if not cell.metadata.get("nbgrader", {}).get("solution", False):
                # The instructor's visible lines (a setup cell, say) are no secret, even
                # when a hidden test repeats one. Answer cells do not count: pasting a
                # guessed line there must not reveal whether the hidden tests have it.
                shown |= {line.strip() for n, line in enumerate(lines, 1) if n not in hidden}
        self._secrets = {line for line in self._secrets - shown if len(line) >= 6}
        return super().preprocess(nb, resources)

    def _hidden_lines(self, lines: list[str]) -> set[int]:
        hidden, hiding = set(), False
        for number, line in enumerate(lines, start=1):
            if self.begin in line:
                hiding = True
            if hiding:
                hidden.add(number)
            if self.end in line:
                hiding = False
        return hidden

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        lines = cell.source.splitlines()
        hidden = self._hidden_lines(lines) if self.begin in cell.source else set()
        for output in cell.get("outputs", []):
            if output.output_type == "error" and hidden:
                output.traceback = [
                    self._redact(entry, cell.execution_count, lines, hidden)
                    for entry in output.traceback
                ]
            self._scrub(output)
        if hidden:
            kept = [line for number, line in enumerate(lines, start=1) if number not in hidden]
            cell.source = "\n".join(kept).rstrip()
        return cell, resources

    def _scrub(self, output) -> None:
        """Replace every output line that quotes a hidden line."""
        if output.output_type == "stream":
            output.text = self._clean(output.text)
        elif output.output_type == "error":
            output.evalue = self._clean(output.evalue)
            output.traceback = [self._clean(entry) for entry in output.traceback]
        else:
            for kind, data in output.get("data", {}).items():
                if isinstance(data, str) and kind.startswith("text/"):
                    output.data[kind] = self._clean(data)

    def _clean(self, text: str) -> str:
        plain = _ANSI.sub("", text)
        if not any(secret in plain for secret in self._secrets):
            return text
        return "\n".join(
            "[a line of a hidden test, not shown]"
            if any(secret in _ANSI.sub("", line) for secret in self._secrets)
            else line
            for line in text.split("\n")
        )

    @staticmethod
    def _redact(entry: str, count, lines: list[str], hidden: set[int]) -> str:
        frame = re.match(rf"Cell In\[{count}\], line (\d+)", _ANSI.sub("", entry))
        if frame is None:
            return entry
        number = int(frame[1])
        if number in hidden or number > len(lines):
            return f"Cell In[{count}]: in the hidden tests\n"
        return f"Cell In[{count}], line {number}\n----> {number} {lines[number - 1]}\n"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
