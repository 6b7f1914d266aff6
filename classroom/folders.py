"""Kept copies of the course's folders, and putting them back.

``make collect`` keeps the submissions that a new download replaces in
``grading/backups/<assignment>/<stamp>/<student>/``; copies of ``autograded/`` and
``feedback/`` go to ``grading/backups/<assignment>/<stamp>/autograded/<student>/``
(and ``.../feedback/<student>/``). ``make restore WHICH=submitted ASSIGNMENT=a1``
puts each student's copy back into ``submitted/<student>/a1/``, after keeping what
it replaces in ``grading/backups/a1/before-restore-<stamp>/``, the same way.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from .course import stamp
from .gradebook import BACKUPS, STAMP_PATTERN, RunLock

FOLDERS = ("submitted", "autograded", "feedback")


def keep_copies(root: Path, assignment: str, folder: str, students: list[str]) -> Path | None:
    """Copy ``<folder>/<student>/<assignment>/`` of each student aside before grading
    replaces it, into ``grading/backups/<assignment>/<stamp>/<folder>/<student>/``;
    returns where, or None when there was nothing to keep."""
    kept = Path(root) / BACKUPS / assignment / stamp() / folder
    for student in students:
        earlier = Path(root) / folder / student / assignment
        if earlier.is_dir():
            shutil.copytree(earlier, kept / student)
    return kept if kept.exists() else None


def folder_copies(root: Path, assignment: str, folder: str) -> dict[str, Path]:
    """The kept copies of ``folder`` for ``assignment``, oldest first.

    Returns
    -------
    ``{stamp: the folder that holds one copy per student}``; the stamps are the
    names under ``grading/backups/<assignment>/`` (``before-restore-<stamp>`` too).
    """
    copies = {}
    kept = Path(root) / BACKUPS / assignment
    names = [
        p.name
        for p in kept.glob("*")
        if re.fullmatch(rf"(before-restore-)?{STAMP_PATTERN}", p.name)
    ]
    for name in sorted(names, key=lambda name: name.removeprefix("before-restore-")):
        holder = kept / name / folder if folder != "submitted" else kept / name
        if (holder / "submitted").is_dir():  # a copy laid out like the others
            holder = holder / "submitted"
        if _students(holder):
            copies[name] = holder
    return copies


def _students(holder: Path) -> list[str]:
    """The students with a copy in ``holder`` (not the other folders' copies)."""
    if not holder.is_dir():
        return []
    return sorted(p.name for p in holder.iterdir() if p.is_dir() and p.name not in FOLDERS)


def restore_folder(
    root: Path, folder: str, assignment: str | None, when: str | None = None, wait: bool = False
) -> Path:
    """Put the kept copies of ``folder/<student>/<assignment>/`` back in place.

    Every student in the copy gets theirs back; students not in it are left alone.
    What a copy replaces is kept first in ``grading/backups/<assignment>/before-restore-
    <stamp>/``, so this can be undone with ``when="before-restore-<stamp>"``.

    Parameters
    ----------
    root : the course root.
    folder : ``"submitted"`` (or ``"submissions"``), ``"autograded"`` or ``"feedback"``.
    assignment : the assignment whose copies to restore.
    when : the copy's name under ``grading/backups/<assignment>/``; default the newest.
    wait : during a grading run, wait for its end (True) or stop (False).

    Returns
    -------
    The folder the copies came from.
    """
    root = Path(root)
    folder = "submitted" if folder == "submissions" else folder
    if folder not in FOLDERS or not assignment:
        raise SystemExit(
            "error: say which folder of which assignment: "
            "make restore WHICH=submitted|autograded|feedback ASSIGNMENT=<name> [STAMP=<stamp>]"
        )
    source = _chosen(folder_copies(root, assignment, folder), folder, assignment, when)
    kept = root / BACKUPS / assignment / f"before-restore-{stamp()}"
    with RunLock(root, wait):
        students = _put_back(root, source, folder, assignment, kept)
    print(f"restored {folder}/<student>/{assignment}/ of {', '.join(students)} from {source}")
    if kept.exists():
        print(
            f"what it replaced is kept: `make restore WHICH={folder} ASSIGNMENT={assignment}"
            f" STAMP={kept.name}` undoes this"
        )
    return source


def _chosen(copies: dict[str, Path], folder: str, assignment: str, when: str | None) -> Path:
    if when is None:
        plain = [name for name in copies if not name.startswith("before-restore-")]
        if plain:
            return copies[plain[-1]]
    elif when in copies:
        return copies[when]
    known = ", ".join(copies) or "none"
    named = f" {when}" if when else ""
    raise SystemExit(
        f"error: no kept copy{named} of {folder}/ for {assignment} "
        f"in grading/backups/{assignment}/ (there are: {known})"
    )


def _put_back(root: Path, source: Path, folder: str, assignment: str, kept: Path) -> list[str]:
    """Copy each student's folder back; what was there goes to ``kept`` first."""
    students = _students(source)
    for student in students:
        target = root / folder / student / assignment
        if target.exists():
            layout = kept / student if folder == "submitted" else kept / folder / student
            shutil.copytree(target, layout)
            shutil.rmtree(target)
        shutil.copytree(source / student, target)
    return students


def print_folder_copies(root: Path) -> None:
    """Print the kept copies of folders, for ``make restore WHICH=list``."""
    lines = []
    for kept in sorted((Path(root) / BACKUPS).glob("*")):
        if kept.name == "gradebook" or not kept.is_dir():
            continue
        for folder in FOLDERS:
            for name, holder in folder_copies(root, kept.name, folder).items():
                students = _students(holder)
                lines.append(f"  {kept.name:<24} {folder:<11} {name:<40} {len(students)} students")
    if lines:
        print("copies of folders in grading/backups/ (oldest first):")
        print("\n".join(lines))
        print("make restore WHICH=<folder> ASSIGNMENT=<assignment> [STAMP=<stamp>]: one of these")
