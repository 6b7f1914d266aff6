"""Collecting submissions from the nbgrader exchange into ``submitted/<student>/<assignment>/``.

Students submit from JupyterLab's Assignment List (or ``nbgrader submit``); each
submission is a folder ``inbound/<student>+<assignment>+<time>+<random>/`` of the
exchange (``exchange.py``). ``make collect`` takes each student's latest one and
reports, per assignment, who submitted, who submitted more than once, who was late,
and every entry it did not take, with why. Nothing is deleted from the exchange.

This is written here rather than left to ``nbgrader collect --update``, which copies
the same way (the latest submission per student) but cannot give these guarantees:

* it follows symlinks, so a link a student leaves in inbound copies any file the
  instructor can read (solutions, the gradebook) into ``submitted/``; here links
  are skipped and named;
* one badly named entry, which any student can make (``eve+a2+notatime``), stops
  the collection of the whole class with a traceback; here that entry is reported and
  the others are collected (student ids must be safe folder names, as for zips);
* it deletes the earlier submission before copying the new one, so a copy that fails
  (disk full, an unreadable file) loses both; here the new one is copied first and the
  earlier one is kept in ``grading/backups/`` (``folders.keep_copies``), as for zips.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from . import exchange
from .course import (
    counted,
    database_url,
    open_gradebook,
    shown,
    stamp,
    usable_id,
    write_collect_report,
)
from .folders import keep_copies

# nbgrader submit names: <student>+<assignment>+<time>[+<random>]; neither part has a +.
_NAME = re.compile(r"(?P<student>[^+]+)\+(?P<assignment>[^+]+)\+(?P<time>[^+]+)(\+[^+]*)?")
IGNORED = (".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback")  # nbgrader's defaults
MAX_BYTES = 1_000_000_000  # nbgrader's limit on a submission's size (max_dir_size)


@dataclass
class Submission:
    """One folder of inbound and what became of it: a row of the report."""

    path: Path
    student: str = ""
    assignment: str = ""
    time: datetime | None = None  # UTC, from the folder's name
    time_text: str = ""  # the same, as nbgrader wrote it (timestamp.txt)
    status: str = "not collected"  # collected, already collected, not collected
    reason: str = ""
    earlier: bool = False  # the student submitted again later

    def refuse(self, reason: str) -> Submission:
        self.status, self.reason = "not collected", reason
        return self


def collect_exchange(root: Path, assignment: str | None = None) -> list[Path]:
    """Collect the latest submission of each student from the exchange, for every
    published assignment (or one). Returns the reports, one CSV per assignment:
    ``grading/collect-<assignment>-<stamp>.csv`` (columns entry, status, student, reason).

    A student's latest submission is collected when it is newer than the one in
    ``submitted/`` (which is first kept in ``grading/backups/<assignment>/<stamp>/
    submitted/``); ``timestamp.txt`` is the time nbgrader gave it, so a late
    submission is graded as late. Earlier submissions, entries of assignments never
    published, and entries that cannot be taken stay in the exchange, each reported.
    """
    inbound = exchange.course_folder(root) / "inbound"
    if os.access(inbound.parent.parent, os.X_OK) and not inbound.parent.exists():
        raise SystemExit(
            f"error: nothing is published in the exchange {exchange.exchange_root(root)}: "
            f"`make release` publishes the assignments ({exchange.HOW_TO_MOVE})"
        )
    exchange.stop_on_problems(root, "nothing was collected")
    published = exchange.released(root)
    if not inbound.is_dir() or not published:
        raise SystemExit(
            f"error: nothing is published in the exchange {exchange.exchange_root(root)}: "
            "`make release` publishes the assignments"
        )
    if assignment is not None and assignment not in published:
        raise SystemExit(
            f"error: {assignment} is not published in the exchange (published: "
            f"{', '.join(published)}); `make release` publishes every assignment"
        )
    prefix = exchange.submitter_prefix(root)  # on make hub: whose account made each entry
    entries = [_judge(path, published, prefix) for path in sorted(inbound.iterdir())]
    run, reports = stamp(), []
    for name in [assignment] if assignment else published:
        mine = [entry for entry in entries if entry.assignment == name]
        _take(root, name, _latest([entry for entry in mine if not entry.reason]), run)
        rows = [(e.path.name, e.status, e.student, e.reason) for e in mine]
        reports.append(write_collect_report(root, name, run, rows))
        _print_summary(root, name, mine, reports[-1])
    _print_unpublished([entry for entry in entries if entry.assignment not in published], inbound)
    return reports


# --- judging each folder of inbound -------------------------------------------------


def _judge(path: Path, published: list[str], prefix: str | None = None) -> Submission:
    """Whose submission a folder of inbound is, and of what, or why it is not taken.

    With ``prefix`` (a hub's exchange: ``exchange.submitter_prefix``) the folder must
    have been made by the student's own account, ``<prefix><student>``: a student can
    tell nbgrader any id (``JUPYTERHUB_USER``, ``--student``), but not which account
    the folder belongs to."""
    entry = Submission(path)
    match = _NAME.fullmatch(path.name)
    if match is None:
        return entry.refuse("not named as nbgrader names submissions")
    entry.student, entry.assignment = match["student"].lower(), match["assignment"]
    if entry.assignment not in published:
        return entry.refuse(
            f"{entry.assignment!r} was never released: no such assignment in the exchange "
            "(a folder the student renamed?)"
        )
    if not usable_id(entry.student):
        return entry.refuse(
            f"unusable student id: {entry.student!r} is not a safe folder name "
            "(letters, digits and ._-@)"
        )
    entry.time, entry.time_text = _parse_time(match["time"]), match["time"]
    if entry.time is None:
        return entry.refuse(f"unreadable time {match['time']!r} in its name")
    if path.is_symlink() or not path.is_dir():
        return entry.refuse("a link or a file, not a submission's folder")
    made_by = exchange.owner(path) if prefix is not None else None
    if prefix is not None and made_by != prefix + entry.student:
        return entry.refuse(
            f"made by the account {made_by}, not by {prefix}{entry.student}: "
            f"a submission under another student's id"
        )
    if not os.access(path, os.R_OK | os.X_OK):
        return entry.refuse(
            f"you cannot read it ({exchange.describe(path)}): the student can submit again"
        )
    return entry


def _parse_time(text: str) -> datetime | None:
    """nbgrader's time (``2026-11-24 22:41:58.957278 UTC``) as a UTC datetime."""
    from nbgrader.utils import parse_utc

    try:
        return parse_utc(text)
    except (ValueError, OverflowError, TypeError):
        return None


def _latest(entries: list[Submission]) -> list[Submission]:
    """Each student's latest submission, to collect; the earlier ones stay, reported."""
    latest: dict[str, Submission] = {}
    for entry in sorted(entries, key=lambda entry: (entry.time, entry.path.name)):
        latest[entry.student] = entry
    for entry in entries:
        if entry is not latest[entry.student]:
            entry.refuse(f"an earlier submission: the latest is {latest[entry.student].path.name}")
            entry.earlier = True
    for student, entry in latest.items():
        earlier = sum(other.student == student for other in entries) - 1
        if earlier:
            stay = "the earlier one stays" if earlier == 1 else "the earlier ones stay"
            entry.reason = f"the latest of {earlier + 1} submissions; {stay} in the exchange"
    return list(latest.values())


# --- copying ------------------------------------------------------------------------


def _take(root: Path, assignment: str, latest: list[Submission], run: str) -> None:
    """Copy each student's latest submission into ``submitted/`` when it is new; what
    it replaces is kept first."""
    due = _due_date(root, assignment)
    replaced = [
        e.student for e in latest if _replaces(e, root / "submitted" / e.student / assignment)
    ]
    kept = keep_copies(root, assignment, "submitted", replaced)
    for entry in latest:
        target = root / "submitted" / entry.student / assignment
        if entry.student not in replaced and target.exists():
            entry.status = "already collected"
            entry.reason = _join("nothing newer to collect", entry.reason)
            continue
        problem = _copy(entry, target)
        if problem:
            entry.refuse(problem)
            continue
        entry.status = "collected"
        if entry.student in replaced and kept is not None:
            earlier = (kept / entry.student).relative_to(root)
            entry.reason = _join(
                entry.reason, f"replaces the one collected before, kept in {earlier}/"
            )
        if due is not None and entry.time is not None and entry.time > due:
            late = f"late by {_duration(entry.time - due)} (due {due:%Y-%m-%d %H:%M} UTC)"
            entry.reason = _join(late, entry.reason)


def _replaces(entry: Submission, target: Path) -> bool:
    """Whether ``entry`` replaces a collected submission (nbgrader collect --update's
    rule: when it is newer, or the collected one has no time)."""
    if not target.exists():
        return False
    stamp_file = target / "timestamp.txt"
    earlier = _parse_time(stamp_file.read_text().strip()) if stamp_file.is_file() else None
    return earlier is None or (entry.time is not None and entry.time > earlier)


def _copy(entry: Submission, target: Path) -> str:
    """Copy the submission beside ``target``, then swap it in; returns a problem, or "".

    Regular files only: links are skipped (and named), as are nbgrader's ignored
    files. ``timestamp.txt`` is written from the folder's name, the time nbgrader
    gave the submission, which is the one the collection went by.
    """
    size = _size(entry.path)
    if size > MAX_BYTES:
        return f"too big ({size / 1e6:.0f} MB, nbgrader's limit is {MAX_BYTES / 1e6:.0f} MB)"
    incoming = target.parent / f".{target.name}.incoming"
    shutil.rmtree(incoming, ignore_errors=True)
    try:
        skipped = _copy_files(entry.path, incoming)
        (incoming / "timestamp.txt").write_text(entry.time_text)
        if target.exists():
            shutil.rmtree(target)  # already kept by keep_copies
        incoming.rename(target)
    except OSError as error:
        shutil.rmtree(incoming, ignore_errors=True)
        return f"could not be copied ({error}); the earlier submission is unchanged"
    if skipped:
        entry.reason = _join(entry.reason, f"links not copied: {', '.join(skipped)}")
    return ""


def _size(folder: Path) -> int:
    """Bytes in the regular files under ``folder``, links not followed."""
    total = 0
    for parent, _, files in os.walk(folder):  # os.walk does not enter linked folders
        for name in files:
            path = Path(parent, name)
            if not path.is_symlink():
                total += path.stat().st_size
    return total


def _copy_files(source: Path, target: Path) -> list[str]:
    """Copy the regular files under ``source``; returns the links left out."""
    skipped = []
    target.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        if any(fnmatch.fnmatch(path.name, pattern) for pattern in IGNORED):
            continue
        if path.is_symlink():
            skipped.append(path.name)
        elif path.is_dir():
            skipped += [f"{path.name}/{name}" for name in _copy_files(path, target / path.name)]
        elif path.is_file():
            shutil.copy2(path, target / path.name)
    return skipped


def _due_date(root: Path, assignment: str) -> datetime | None:
    """The assignment's due date in the gradebook (UTC), or None when none is set."""
    from nbgrader.api import MissingEntry

    url = database_url(root)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return None  # no gradebook yet: nothing to read, nor to make here
    with open_gradebook(root) as book:
        try:
            return book.find_assignment(assignment).duedate
        except MissingEntry:
            return None


def _duration(delta) -> str:
    """``1 d 3 h 4 min``: how late, to the minute (seconds under a minute)."""
    seconds = int(delta.total_seconds())
    if seconds < 60:
        return f"{seconds} s"
    days, rest = divmod(seconds // 60, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{minutes} min"]
    return " ".join(part for part in parts if part)


def _join(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


# --- reporting ----------------------------------------------------------------------


def _print_summary(root: Path, assignment: str, entries: list[Submission], report: Path) -> None:
    """One line per student; earlier submissions are counted on the latest's line."""
    if not entries:
        print(f"{assignment}: no submissions in the exchange")
        return
    new = sum(entry.status == "collected" for entry in entries)
    old = sum(entry.status == "already collected" for entry in entries)
    print(
        f"collected {assignment} from the exchange: {counted(new, 'student')} into submitted/"
        + (f", {old} already collected" if old else "")
        + f" (see {report.relative_to(root)})"
    )
    for entry in sorted(entries, key=lambda entry: (entry.student, entry.path.name)):
        if entry.earlier:
            continue
        if entry.status == "not collected":
            line = f"{entry.student:<12} not collected: {shown(entry.path.name)}: {entry.reason}"
        else:
            when = f"{entry.time:%Y-%m-%d %H:%M:%S} UTC" if entry.time else ""
            line = _join(f"{entry.student:<12} {entry.status:<17} {when}", entry.reason)
        print(f"  {line}")


def _print_unpublished(entries: list[Submission], inbound: Path) -> None:
    """Entries of no published assignment (or no readable name): left in the exchange."""
    if entries:
        print(f"not collected, left where they are in {inbound}/:")
        for entry in entries:
            print(f"  {shown(entry.path.name)}: {entry.reason}")
