"""Collecting an LMS download (Canvas, Moodle, one folder per student) into
``submitted/<student>/<assignment>/``.

Every entry of the zip ends in one of two ways: collected under a student id, or
reported with its reason and kept aside. The zip is read, never extracted: each entry
is judged by its name and its zip metadata alone, and only what is judged safe is
written, to a path this module builds itself (``submitted/<safe id>/<assignment>/
<released notebook>.ipynb``). So a name like ``../a3.ipynb`` or a symlink never
reaches the disk outside the course, and nothing is filed under a name nobody chose.
"""

from __future__ import annotations

import re
import shutil
import stat
import zipfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePath, PurePosixPath

from .course import (
    GRADING_DIR,
    assignments,
    check_assignment,
    counted,
    released_notebooks,
    shown,
    stamp,
    usable_id,
    write_collect_report,
)

_CANVAS = re.compile(r"^(?P<student>[^_]+)_(?:late_)?\d+_\d+_(?P<notebook>.+)\.ipynb$", re.I)
_MOODLE = re.compile(r"^.+_(?P<student>\d+)_assignsubmission_file_$")


@dataclass
class Entry:
    """One file of the zip and what became of it: a row of the report."""

    info: zipfile.ZipInfo
    data: bytes | None = None  # None when the zip cannot give it back
    student: str = ""
    notebook: str = ""  # collected as submitted/<student>/<assignment>/<notebook>.ipynb
    renamed_from: str = ""  # the student's own file name, when it was not the released one
    reason: str = ""  # why it is not collected
    collected: bool = False

    @property
    def name(self) -> str:
        return self.info.filename

    @property
    def status(self) -> str:
        return "collected" if self.collected else "not collected"

    @property
    def note(self) -> str:
        """The report's reason: why it is not collected, or how a notebook was renamed."""
        if not self.collected:
            return self.reason
        if self.renamed_from:
            return f"renamed: {self.renamed_from} -> {self.notebook}.ipynb"
        return ""

    def refuse(self, reason: str) -> Entry:
        self.collected, self.reason = False, reason
        return self


def collect(root: Path, zip_path: Path, assignment: str | None = None) -> Path:
    """Take an LMS download (a zip of notebooks) into ``submitted/<student>/<assignment>/``.

    The assignment is read from the file names when not given. A student is named by
    the folder a file sits in whenever that is one student's folder (Moodle's, or
    ``<student>/``), else by Canvas's file name (see ``whose``); ids are lower-cased and
    must be safe folder names. When the assignment has one notebook, a student's
    notebook is filed under that name whatever the student called it.

    Only notebooks are collected: the assignments read their data from the package, so
    a data file beside a notebook is reported ("not a notebook") and kept aside like
    every entry not collected. An entry is not collected when it is unreadable, an
    absolute path, a path with ``..``, a symlink, a hidden file, not a notebook,
    nobody's, of an unusable student id, a notebook of another assignment, not one of
    the assignment's notebooks, or a duplicate: per student and notebook, the newest by
    the zip's dates wins, then one already named as released, then the later name
    (Canvas's ``late`` and ``-2`` copies).

    Nothing is lost: entries not collected are copied to
    ``grading/backups/<assignment>/not-collected-<stamp>/``; a student's earlier
    submission is copied to ``grading/backups/<assignment>/<stamp>/<student>/`` and then
    replaced as a whole (as ``nbgrader zip_collect --force`` does), with nbgrader's
    ``timestamp.txt`` from the newest collected entry's zip date; the zip is kept in
    ``downloaded/<assignment>/archive/``, where earlier downloads are renamed.

    Returns the report, ``grading/collect-<assignment>-<stamp>.csv``: one row per file
    of the zip (folders are not entries) with columns entry, status (collected or not
    collected), student and reason. The output counts the students collected from the
    zip and names each entry not collected with its reason.
    """
    if not zipfile.is_zipfile(zip_path):
        raise SystemExit(f"error: {zip_path} is not a zip file (ZIP=path/to/download.zip)")
    assignment = assignment or _assignment_in_zip(root, zip_path)
    check_assignment(root, assignment)
    if not released_notebooks(root, assignment):
        raise SystemExit(f"error: {assignment} is not released yet: run `make release` first")
    run = stamp()
    with zipfile.ZipFile(zip_path) as archive:
        entries = _judge_all(root, archive, assignment)
    set_aside = _set_aside(root, entries, assignment, run)
    backup = _file_submissions(root, entries, assignment, run)
    _archive(root, zip_path, assignment, run)
    rows = [(e.name, e.status, e.student, e.note) for e in entries]
    report = write_collect_report(root, assignment, run, rows)
    _print_summary(root, entries, assignment, report)
    if set_aside is not None:
        print(f"entries not collected are kept in {set_aside.relative_to(root)}/")
    if backup is not None:
        print(f"earlier submissions kept in {backup.relative_to(root)}/")
    return report


# --- judging each entry -------------------------------------------------------------


def _judge_all(root: Path, archive: zipfile.ZipFile, assignment: str) -> list[Entry]:
    infos = [info for info in archive.infolist() if not info.is_dir()]
    notebooks_of = {name: released_notebooks(root, name) for name in assignments(root)}
    wrapper = _wrapper([_path(info) for info in infos])
    entries = []
    for info in infos:
        entry = Entry(info, data=_read(archive, info))
        entries.append(_judge(entry, assignment, notebooks_of, wrapper))
    _keep_newest(entries)
    return entries


def _judge(
    entry: Entry, assignment: str, notebooks_of: dict[str, list[str]], wrapper: PurePath | None
) -> Entry:
    """Whose entry this is and where it goes, or why it is not collected."""
    problem = _not_a_submission(entry)
    if problem is not None:
        return entry.refuse(problem)
    path = _path(entry.info)
    found = whose(path, wrapper)
    if found is None:
        return entry.refuse("cannot tell whose it is")
    entry.student, notebook = found
    if not usable_id(entry.student):
        return entry.refuse(
            f"unusable student id: {entry.student!r} is not a safe folder name "
            "(letters, digits and ._-@); rename the file or folder in the zip"
        )
    other = _other_assignment(notebook, assignment, notebooks_of)
    if other is not None:
        return entry.refuse(f"another assignment: a notebook of {other}")
    released = notebooks_of[assignment]
    target = _released_name(notebook, released)
    if target is None:
        return entry.refuse(f"unknown notebook: {assignment} has {', '.join(released)}")
    entry.notebook, entry.collected = target, True
    if target != notebook:
        entry.renamed_from = path.name
    return entry


def _not_a_submission(entry: Entry) -> str | None:
    """Why an entry cannot be anybody's notebook, whatever its name says, or None."""
    path = _path(entry.info)
    if entry.data is None:  # nothing to judge, nor to keep aside
        return "unreadable: damaged or encrypted (it stays in the archived zip)"
    if path.is_absolute() or re.match(r"[A-Za-z]:", entry.name):
        return "absolute path"
    if ".." in path.parts:
        return "path with .."
    if stat.S_ISLNK(entry.info.external_attr >> 16):
        return "symlink"
    if any(part.startswith(".") for part in path.parts):
        return "hidden file"  # macOS's ._ files, .ipynb_checkpoints/
    if path.suffix != ".ipynb":
        return "not a notebook"
    return None


def _released_name(notebook: str, released: list[str]) -> str | None:
    """The released notebook a student's notebook is: its own name, or the only one."""
    if notebook in released:
        return notebook
    return released[0] if len(released) == 1 else None


def _path(info: zipfile.ZipInfo) -> PurePosixPath:
    """The entry's name as a path; Windows zip tools may write ``\\`` between folders."""
    return PurePosixPath(info.filename.replace("\\", "/"))


def _read(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes | None:
    try:
        return archive.read(info)
    except (zipfile.BadZipFile, RuntimeError, NotImplementedError, ValueError, OSError):
        return None  # damaged, encrypted or compressed in a way Python cannot read


def _wrapper(paths: list[PurePosixPath]) -> PurePath | None:
    """The folder a Canvas download was zipped again in, or None: the one folder that
    holds every notebook of the zip, named by Canvas for two students or more. Any other
    folder is one student's, whatever the files in it are called (see ``whose``)."""
    folders, students = set(), set()
    for path in paths:
        if path.suffix == ".ipynb" and not any(part.startswith(".") for part in path.parts):
            folders.add(path.parent)
            if match := _CANVAS.match(path.name):
                students.add(match["student"].lower())
    return folders.pop() if len(folders) == 1 and len(students) > 1 else None


def _moodle_id(path: PurePath) -> str | None:
    """The participant id of the Moodle folder ``path`` is in (at any depth), or None."""
    for folder in path.parents:
        if match := _MOODLE.match(folder.name):
            return match["student"]
    return None


def whose(path: PurePath, wrapper: PurePath | None = None) -> tuple[str, str] | None:
    """(student, notebook name) read from a file's path in an LMS download, or None.

    * Moodle: ``<Full Name>_<id>_assignsubmission_file_/<notebook>.ipynb`` (the id is
      Moodle's participant id, which Moodle numbers per assignment: prefer Canvas or
      folders named by student id when you can)
    * plain: ``<student>/<notebook>.ipynb``
    * Canvas: ``<student>_[late_]<id>_<id>_<notebook>[-<n>].ipynb``

    The folder wins over the file name: inside one student's folder, a file named like
    another student's Canvas file is still that student's. Only ``wrapper``, a folder
    around a whole Canvas download (see ``_wrapper``), names nobody. A browser's or
    LMS's copy suffix (``a1 (1)``, ``a1-2``) is dropped.

    >>> whose(PurePosixPath("Kim_late_12345_67890_a1-2.ipynb"))
    ('kim', 'a1')
    >>> whose(PurePosixPath("lee/2004_1_1_a1.ipynb"))
    ('lee', '2004_1_1_a1')
    """
    if path.suffix != ".ipynb" or path.name.startswith("."):
        return None
    moodle = _moodle_id(path)
    if moodle is not None:
        student, notebook = moodle, path.stem
    elif path.parent.name and path.parent != wrapper:
        student, notebook = path.parent.name, path.stem
    elif match := _CANVAS.match(path.name):
        student, notebook = match["student"], match["notebook"]
    else:
        return None
    return student.lower(), re.sub(r"(-\d+| \(\d+\))$", "", notebook)


def _other_assignment(
    notebook: str, assignment: str, notebooks_of: dict[str, list[str]]
) -> str | None:
    """The other assignment a notebook's name names (``kim_1_2_a1.ipynb`` sent for a2),
    or None. Names containing this assignment's name are this assignment's."""
    if any(name in notebook for name in [assignment, *notebooks_of[assignment]]):
        return None
    for other, released in notebooks_of.items():
        if any(name in notebook for name in [other, *released]):
            return other
    return None


def _keep_newest(entries: list[Entry]) -> None:
    """One file per student and notebook (see ``_age``); the others are duplicates."""
    candidates = [entry for entry in entries if entry.collected]
    newest: dict[tuple[str, str], Entry] = {}
    for entry in sorted(candidates, key=_age):
        newest[entry.student, entry.notebook] = entry
    for entry in candidates:
        kept = newest[entry.student, entry.notebook]
        if entry is not kept:
            newer = kept.info.date_time > entry.info.date_time
            which = "a newer file" if newer else "a file of the same date"
            entry.refuse(f"duplicate: {entry.student} sent {which}, {kept.name}")


def _age(entry: Entry) -> tuple:
    """Newer files sort later: by the zip's date; at equal dates, a file named as
    released beats a renamed one (a scratch notebook), and a later name an earlier one
    (``a1.ipynb`` < ``a1-2.ipynb``, hence without the suffix)."""
    name = entry.info.filename.removesuffix(".ipynb")
    return entry.info.date_time, not entry.renamed_from, name


# --- writing ------------------------------------------------------------------------


def _set_aside(root: Path, entries: list[Entry], assignment: str, run: str) -> Path | None:
    """Copy the entries not collected to ``not-collected-<run>/`` under safe, flat names
    (folders joined by ``__``), so that no name can point elsewhere or collide as a
    file and a folder. Returns the folder, or None when everything was collected."""
    folder = root / GRADING_DIR / "backups" / assignment / f"not-collected-{run}"
    for entry in entries:
        if entry.collected or entry.data is None:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        _unused(folder / _safe_name(entry.name)).write_bytes(entry.data)
    return folder if folder.exists() else None


def _safe_name(name: str) -> str:
    """``../Mo Salah/x:y.ipynb`` -> ``Mo Salah__x_y.ipynb``: one file name, no folders."""
    parts = [part for part in name.replace("\\", "/").split("/") if part not in ("", ".", "..")]
    flat = re.sub(r"[^\w .@()+-]", "_", "__".join(parts)) or "unnamed"
    while len(flat.encode()) > 200:  # file systems allow 255 bytes a name
        flat = flat[1:]
    return flat


def _unused(path: Path) -> Path:
    """``path``, or ``<stem>-2<suffix>``, ... when taken: two entries may share a name."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return candidate


def _file_submissions(root: Path, entries: list[Entry], assignment: str, run: str) -> Path | None:
    """Write each student's collected notebooks, replacing an earlier submission after
    copying it to the backup folder, which is returned (None when nothing was replaced)."""
    mine: dict[str, list[Entry]] = {}
    for entry in entries:
        if entry.collected:
            mine.setdefault(entry.student, []).append(entry)
    backup = root / GRADING_DIR / "backups" / assignment / run
    for student, files in sorted(mine.items()):
        folder = root / "submitted" / student / assignment
        if folder.exists():
            shutil.copytree(folder, backup / student)
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        for entry in files:
            assert entry.data is not None  # unreadable entries are never collected
            (folder / f"{entry.notebook}.ipynb").write_bytes(entry.data)
        when = _timestamp(max(entry.info.date_time for entry in files))
        if when is not None:  # else nbgrader takes the submission as on time
            (folder / "timestamp.txt").write_text(when)
    return backup if backup.exists() else None


def _timestamp(date_time: tuple[int, int, int, int, int, int]) -> str | None:
    """nbgrader's ``timestamp.txt`` line for a zip date: ``2026-11-24 19:51:24.000000
    UTC``. Zip dates carry no time zone: they are taken as UTC."""
    try:
        return datetime(*date_time).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    except ValueError:  # a zip tool wrote an impossible date
        return None


def _archive(root: Path, zip_path: Path, assignment: str, run: str) -> None:
    """Keep the zip in ``downloaded/<assignment>/archive/``; earlier downloads there are
    renamed to ``downloaded/<assignment>/<name>.<run>``, never deleted."""
    archive = root / "downloaded" / assignment / "archive"
    archive.mkdir(parents=True, exist_ok=True)
    for old in archive.iterdir():
        if not old.samefile(zip_path):  # collecting the archived zip again
            old.rename(archive.parent / f"{old.name}.{run}")
    if not (archive / zip_path.name).exists():
        shutil.copy2(zip_path, archive / zip_path.name)


def _print_summary(root: Path, entries: list[Entry], assignment: str, report: Path) -> None:
    students = {entry.student for entry in entries if entry.collected}
    missed = [entry for entry in entries if not entry.collected]
    print(
        f"collected {assignment}: {counted(len(students), 'student')} in submitted/; "
        f"{counted(len(missed), 'entry', 'entries')} not collected "
        f"(see {report.relative_to(root)})"
    )
    for entry in missed:
        print(f"  not collected: {shown(entry.name)} ({entry.reason})")
    for entry in entries:
        if entry.collected and entry.renamed_from:
            print(f"  {entry.student}: {entry.note}")


def _assignment_in_zip(root: Path, zip_path: Path) -> str:
    with zipfile.ZipFile(zip_path) as archive:
        names = " ".join(archive.namelist())
    found = [name for name in assignments(root) if name in names]
    if len(found) != 1:
        seen = ", ".join(found) or "none of them"
        raise SystemExit(
            f"error: cannot tell the assignment from the file names in {zip_path} ({seen}); "
            "say which: make collect ZIP=... ASSIGNMENT=<name>"
        )
    return found[0]
