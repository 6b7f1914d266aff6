"""A submission rebuilt on the released notebook, so that nbgrader can grade it.

nbgrader matches a submitted notebook to the released one through the ``nbgrader``
metadata JupyterLab keeps on each cell. Students break that without meaning to: a
copied answer cell carries its metadata along (two cells with one ``grade_id``), a
cell's metadata gets edited, cells are deleted or moved, the notebook is renamed.
nbgrader then stops with a KeyError or "Inconsistent checksums", and the student
gets no grade at all.

``normalize`` gives nbgrader the released notebook itself: every released cell once,
in the released order, with its released metadata and id, and the student's text
only in the answer cells. Cells the student added stay where they were, since an
answer may use a helper defined there. What had to be repaired comes back as notes,
sentences for the student and the instructor alike.

Which released cell a submitted cell is, from the surest sign to the loosest:

1. its ``grade_id`` is a released one, whatever else its metadata says;
2. it has no released ``grade_id`` and its cell id is a released cell's id (JupyterLab
   keeps ids, and gives a pasted cell a new one), so a cell whose metadata was
   wiped or edited is still found;
3. it has no ``grade_id`` and repeats a plain released cell (no nbgrader metadata,
   a markdown text say) exactly, so an old notebook without ids matches too.

Only answer cells take the student's text, so a wrong match can at worst put the
student's own text in an answer; it can never change a test. One exception keeps a
student's code: a plain released code cell (unlocked, so nbgrader itself would keep
the student's version) that the student edited is put back as released, and the
edited version is kept too, right after it, as the student's own cell.

Added cells go after the nearest matched cell before them; added cells before
every matched cell go just before the first one (where the student had them
relative to the assignment), or last when nothing matched at all.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

CELL_TYPES = ("code", "markdown", "raw")
_VALID_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # nbformat 4.5's rule for cell ids
_NEW_CELL = {
    "code": nbformat.v4.new_code_cell,
    "markdown": nbformat.v4.new_markdown_cell,
    "raw": nbformat.v4.new_raw_cell,
}


@dataclass
class _Cell:
    """A readable cell of either notebook, its text joined, its nbgrader part apart."""

    number: int  # position in its notebook, from 1, for the notes
    cell_type: str
    source: str
    metadata: dict  # all but "nbgrader"
    nbgrader: dict | None
    cell_id: str | None

    @property
    def grade_id(self) -> str | None:
        grade_id = (self.nbgrader or {}).get("grade_id")
        return grade_id if isinstance(grade_id, str) and grade_id else None

    @property
    def kind(self) -> str:
        """answer, test, locked or plain, judged as nbgrader judges (truthy flags)."""
        flags = self.nbgrader or {}
        if self.grade_id is None:
            return "plain"
        if flags.get("solution"):
            return "answer"
        if flags.get("grade"):
            return "test"
        if flags.get("locked") or flags.get("task"):
            return "locked"
        return "plain"


def normalize(
    submitted: nbformat.NotebookNode,
    released: nbformat.NotebookNode,
    *,
    submitted_name: str | None = None,
    released_name: str | None = None,
) -> tuple[nbformat.NotebookNode, list[str]]:
    """The released notebook with the student's answers, and what had to be repaired.

    Never raises on JSON data: what cannot be read is left out and noted. Outputs
    are dropped (grading runs every cell again). Pass both names to have a renamed
    notebook noted.

    >>> released = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
    ...     "raise NotImplementedError()", id="sq", metadata={"nbgrader": {
    ...         "grade_id": "square", "solution": True}})])
    >>> mine = copy.deepcopy(released)
    >>> mine.cells[0].source = "def square(x):\\n    return x * x"
    >>> mine.cells.append(copy.deepcopy(mine.cells[0]))  # pasted, metadata and all
    >>> notebook, notes = normalize(mine, released)
    >>> [cell.source for cell in notebook.cells]
    ['def square(x):\\n    return x * x']
    >>> notes
    ["the answer cell 'square' appears twice: the first copy was graded"]
    """
    notes: list[str] = []
    if submitted_name and released_name and submitted_name != released_name:
        notes.append(
            f"the notebook was renamed from '{released_name}' to '{submitted_name}': "
            f"graded as '{released_name}'"
        )
    out, template = _start(released)
    _check_kernel(submitted, released, notes)
    raw_cells = submitted.get("cells") if isinstance(submitted, dict) else None
    if not isinstance(raw_cells, list):
        notes.append("the notebook has no list of cells: every answer was graded as unanswered")
        return out, notes
    cells, unreadable = _read_cells(raw_cells, notes)
    copies, before, after = _match(cells, template, notes)
    for index, cell in enumerate(template):
        if cell is not None and cell.kind == "answer":
            out.cells[index].source = _answer(cell, copies.get(index, []), unreadable, notes)
        elif cell is not None:
            _check_kept(cell, copies.get(index, []), unreadable, notes)
    if _reordered(copies, template):
        notes.append("cells were reordered: graded in the released order")
    out.cells, added = _place(out, before, after)
    _keep_valid(out, added)
    return out, notes


def normalize_file(
    submitted_path: str | Path, released_path: str | Path, out_path: str | Path
) -> list[str]:
    """``normalize`` from file to file (``out_path`` may be ``submitted_path``); the notes.

    The files' names count as the notebooks' names, so a renamed notebook is noted.
    Raises ValueError when a file is not JSON at all.

    Example, in the course root::

        normalize_file("mine.ipynb", "assignments/a1/a1.ipynb", "submitted/ann/a1/a1.ipynb")
        # ["the notebook was renamed from 'a1.ipynb' to 'mine.ipynb': graded as 'a1.ipynb'"]
    """
    notebook, notes = normalize(
        _read(Path(submitted_path)),
        _read(Path(released_path)),
        submitted_name=Path(submitted_path).name,
        released_name=Path(released_path).name,
    )
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, out_path)
    return notes


def _read(path: Path):
    """nbformat's reading (it upgrades old formats); plain JSON where nbformat gives up."""
    try:
        return nbformat.read(path, as_version=4)
    except Exception:  # nbformat raises many kinds on odd JSON; normalize copes with any
        return json.loads(path.read_text(encoding="utf-8"))


# --- reading ------------------------------------------------------------------------


def _start(released) -> tuple[nbformat.NotebookNode, list[_Cell | None]]:
    """A copy of the released notebook to fill in, and its cells as read."""
    raw_cells = released.get("cells") if isinstance(released, dict) else None
    if not isinstance(raw_cells, list):
        return nbformat.v4.new_notebook(), []
    out = nbformat.from_dict(copy.deepcopy(dict(released)))
    template = []
    for number, raw in enumerate(raw_cells, start=1):
        cell = _read_cell(raw, number)
        template.append(cell if isinstance(cell, _Cell) else None)
    return out, template


def _read_cell(raw, number: int) -> _Cell | str:
    """The cell, or why it cannot be read."""
    if not isinstance(raw, dict):
        return "it is not a cell"
    cell_type = raw.get("cell_type")
    if cell_type not in CELL_TYPES:
        return f"unknown cell type {str(cell_type)[:40]!r}"
    source = _text(raw.get("source", ""))
    if source is None:
        return "its source is not text"
    metadata = raw.get("metadata")
    metadata = dict(metadata) if isinstance(metadata, dict) else {}
    nbgrader = metadata.pop("nbgrader", None)
    cell_id = raw.get("id")
    return _Cell(
        number,
        cell_type,
        source,
        metadata,
        nbgrader if isinstance(nbgrader, dict) else None,
        cell_id if isinstance(cell_id, str) else None,
    )


def _text(source) -> str | None:
    """A cell's text: nbformat allows one string or a list of lines."""
    if isinstance(source, str):
        return source
    if isinstance(source, list) and all(isinstance(line, str) for line in source):
        return "".join(source)
    return None


def _read_cells(raw_cells: list, notes: list[str]) -> tuple[list[_Cell], set[str]]:
    """The readable cells, and the grade_ids of the unreadable ones (for the notes)."""
    cells, unreadable = [], set()
    for number, raw in enumerate(raw_cells, start=1):
        cell = _read_cell(raw, number)
        if isinstance(cell, _Cell):
            cells.append(cell)
            continue
        name = _grade_id_of(raw)
        if name:
            unreadable.add(name)
        label = f"cell {number} ('{name}')" if name else f"cell {number}"
        notes.append(f"{label} could not be read ({cell}): it was left out")
    return cells, unreadable


def _grade_id_of(raw) -> str | None:
    metadata = raw.get("metadata") if isinstance(raw, dict) else None
    nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    grade_id = nbgrader.get("grade_id") if isinstance(nbgrader, dict) else None
    return grade_id if isinstance(grade_id, str) and grade_id else None


def _kernel_name(notebook) -> str | None:
    metadata = notebook.get("metadata") if isinstance(notebook, dict) else None
    spec = metadata.get("kernelspec") if isinstance(metadata, dict) else None
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) else None


def _check_kernel(submitted, released, notes: list[str]) -> None:
    theirs, ours = _kernel_name(submitted), _kernel_name(released)
    if theirs and ours and theirs != ours:
        notes.append(f"the notebook's kernel was switched to '{theirs}': graded with '{ours}'")


# --- matching -----------------------------------------------------------------------


def _match(cells: list[_Cell], template: list[_Cell | None], notes: list[str]):
    """Which released cell each submitted cell is (the rules in the module docstring).

    Returns the submitted copies of each released cell (by released index, in the
    student's order), and the student's own cells to put before or after a released
    index.
    """
    finder = _Finder(template)
    copies: dict[int, list[_Cell]] = {}
    before: dict[int | None, list[_Cell]] = {}
    after: dict[int, list[_Cell]] = {}
    anchor = None  # the released index of the last matched cell
    for cell in cells:
        index = finder.find(cell)
        if index is not None and not finder.edited_plain_code(cell, index):
            copies.setdefault(index, []).append(cell)
            anchor = index
            continue
        if index is not None:
            anchor = index  # the student's version runs right after the released one
        elif cell.grade_id is not None:
            notes.append(
                f"the cell '{cell.grade_id}' is not part of the assignment: "
                "it was kept as an ordinary cell"
            )
        if anchor is None:
            before.setdefault(None, []).append(cell)
        else:
            after.setdefault(anchor, []).append(cell)
    if None in before and copies:
        first = min(copies, key=lambda index: copies[index][0].number)
        before[first] = before.pop(None)
    return copies, before, after


class _Finder:
    """Looks a submitted cell up among the released ones: grade_id, cell id, text."""

    def __init__(self, template: list[_Cell | None]):
        self.template = template
        self.by_grade_id: dict[str, int] = {}
        self.by_id: dict[str, int] = {}
        self.by_text: dict[tuple[str, str], int] = {}
        for index, cell in enumerate(template):
            if cell is None:
                continue
            if cell.grade_id:
                self.by_grade_id.setdefault(cell.grade_id, index)
            if cell.cell_id:
                self.by_id.setdefault(cell.cell_id, index)
            if cell.grade_id is None:
                self.by_text.setdefault((cell.cell_type, cell.source), index)

    def find(self, cell: _Cell) -> int | None:
        if cell.grade_id in self.by_grade_id:
            return self.by_grade_id[cell.grade_id]
        index = self.by_id.get(cell.cell_id or "")
        if index is None and cell.grade_id is None:
            index = self.by_text.get((cell.cell_type, cell.source))
        return index

    def edited_plain_code(self, cell: _Cell, index: int) -> bool:
        """Whether ``cell`` is an unlocked released code cell that the student changed.

        nbgrader would keep the student's version of such a cell, and an answer may
        rely on it; here it is kept as the student's own cell, after the released one.
        """
        released = self.template[index]
        if released is None or released.kind != "plain" or released.cell_type != "code":
            return False
        return cell.source.strip() != released.source.strip()


def _reordered(copies: dict[int, list[_Cell]], template: list[_Cell | None]) -> bool:
    """Whether the graded (nbgrader) cells came in another order than released.

    Only each cell's first copy counts: a copy pasted further down is no reordering.
    """
    firsts = []
    for index, mine in copies.items():
        released = template[index]
        if released is not None and released.grade_id is not None:
            firsts.append((mine[0].number, index))
    order = [index for _, index in sorted(firsts)]
    return order != sorted(order)


# --- what each released cell gets ---------------------------------------------------


def _answer(cell: _Cell, mine: list[_Cell], unreadable: set[str], notes: list[str]) -> str:
    """The student's text for an answer cell: the first copy that is not the released text."""
    name = f"the answer cell '{cell.grade_id}'"
    if not mine:
        lost = "could not be read" if cell.grade_id in unreadable else "was deleted"
        notes.append(f"{name} {lost}: graded as unanswered")
        return cell.source
    answered = [one for one in mine if one.source.strip() != cell.source.strip()]
    chosen = answered[0] if answered else mine[0]
    if len(mine) > 1:
        which = _ordinal(mine.index(chosen))
        notes.append(f"{name} appears {_times(len(mine))}: the {which} copy was graded")
    if _metadata_changed(chosen, cell):
        notes.append(f"the metadata of {name} was changed: graded with the released metadata")
    return chosen.source


def _check_kept(cell: _Cell, mine: list[_Cell], unreadable: set[str], notes: list[str]) -> None:
    """Notes on a test or locked cell, which keeps its released text whatever was done to it.

    Plain cells (the assignment's prose) are put back without a note.
    """
    if cell.kind == "plain":
        return
    name = f"the {cell.kind} cell '{cell.grade_id}'"
    if not mine:
        lost = "could not be read" if cell.grade_id in unreadable else "was deleted"
        notes.append(f"{name} {lost}: it was put back")
        return
    if len(mine) > 1:
        notes.append(f"{name} appears {_times(len(mine))}: it was kept once, as released")
    if any(one.source.strip() != cell.source.strip() for one in mine):
        notes.append(f"{name} was changed: the released cell was used")
    if any(_metadata_changed(one, cell) for one in mine):
        notes.append(f"the metadata of {name} was changed: the released cell was used")


def _metadata_changed(theirs: _Cell, released: _Cell) -> bool:
    """Whether the student changed the cell's type or nbgrader flags.

    The checksum is left out: it records the released text, which a re-release
    changes without the student doing anything.
    """

    def flags(cell: _Cell) -> dict:
        return {key: value for key, value in (cell.nbgrader or {}).items() if key != "checksum"}

    return theirs.cell_type != released.cell_type or flags(theirs) != flags(released)


def _times(count: int) -> str:
    return "twice" if count == 2 else f"{count} times"


def _ordinal(index: int) -> str:
    names = ["first", "second", "third"]
    return names[index] if index < len(names) else f"{index + 1}th"


# --- putting it together ------------------------------------------------------------


def _place(out, before: dict, after: dict) -> tuple[list, list]:
    """The released cells with the student's own cells around them; and those alone."""
    used_ids = {cell.get("id") for cell in out.cells if isinstance(cell, dict)}
    minor = out.get("nbformat_minor")
    with_ids = not isinstance(minor, int) or minor >= 5  # ids came with nbformat 4.5
    cells, added = [], []

    def add(own: list[_Cell]) -> None:
        for cell in own:
            added.append(_own_cell(cell, used_ids, with_ids))
            cells.append(added[-1])

    for index, released in enumerate(out.cells):
        add(before.get(index, []))
        cells.append(released)
        add(after.get(index, []))
    add(before.get(None, []))  # nothing matched: the student's cells go last
    return cells, added


def _own_cell(cell: _Cell, used_ids: set, with_ids: bool):
    """A cell the student added, without nbgrader metadata or outputs."""
    made = _NEW_CELL[cell.cell_type](source=cell.source, metadata=copy.deepcopy(cell.metadata))
    if not with_ids:
        del made["id"]
        return made
    if cell.cell_id and _VALID_ID.match(cell.cell_id) and cell.cell_id not in used_ids:
        made.id = cell.cell_id
    used_ids.add(made.id)
    return made


def _keep_valid(out, added_cells: list) -> None:
    """Drop the added cells' other metadata when it breaks nbformat's schema.

    Cell metadata is free-form but for a few keys (``tags`` is a list, ...); a
    notebook that fails the schema could trip nbgrader, and that metadata (view
    settings, tags) means nothing to grading.
    """
    try:
        nbformat.validate(out)
    except nbformat.ValidationError:
        for cell in added_cells:
            cell.metadata = nbformat.NotebookNode()
