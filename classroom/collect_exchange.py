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
  are skipped and named, and every folder and file is opened without following one,
  relative to the folder already open (``safe_copy.py``): a folder swapped for a link
  while it is copied is not followed either, and stops that submission's copy;
* it takes whatever is in a submission's folder, which nbgrader's submit leaves
  writable by every account (0777); here, on a hub, every folder and file must be the submitting
  account's: a classmate's file (or a hard link to one) is left out and named, and a
  folder others could write to is reported (the student kit's ``nbgrader_config.py``
  submits folders only the student can change);
* it dates a submission by its folder's name, which the student chooses; here by the
  latest change (ctime, which no student can set back) of its folder and all in it: the
  name's time is kept when it is within ``NAME_TOLERANCE`` of that, else the report
  says which time was used. Which submission is a student's latest goes by the same
  time, and ``timestamp.txt`` carries it, so nbgrader's late penalty agrees;
* one badly named entry, which any student can make (``eve+a2+notatime``), stops
  the collection of the whole class with a traceback, as does a folder nested a
  thousand deep; here an entry that cannot be named, read or copied is reported and
  the others are collected (student ids must be safe folder names, as for zips), and
  a submission over a limit (``safe_copy.MAX_DEPTH``, ``MAX_ENTRIES``, ``MAX_BYTES``)
  is refused when the count reaches it, without reading the rest;
* it deletes the earlier submission before copying the new one, so a copy that fails
  (disk full, an unreadable file) loses both; here the new one is copied first and the
  earlier one is kept in ``grading/backups/`` (``folders.keep_copies``), as for zips.

Copying or restoring the exchange (cp, rsync, a backup) gives everything in it a new
ctime, which would date every submission not yet collected by the copy: collect first.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from . import exchange, safe_copy
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
# nbgrader submit stamps the name before it copies the files, and a big submission on a
# slow disk takes a while: a name this much earlier than the files is still believed.
NAME_TOLERANCE = timedelta(minutes=2)
TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f UTC"  # nbgrader's timestamp_format, in UTC


@dataclass
class Submission:
    """One folder of inbound and what became of it: a row of the report."""

    path: Path
    student: str = ""
    assignment: str = ""
    time: datetime | None = None  # UTC: when it was made (``_date``)
    time_text: str = ""  # the same, as timestamp.txt gets it (nbgrader's format)
    status: str = "not collected"  # collected, already collected, not collected
    reason: str = ""
    earlier: bool = False  # the student submitted again later
    owner: int | None = None  # on a hub: the uid that each of its files must have
    changed_ns: int = 0  # its latest change (ctime) when judged; the copy checks it
    notes: list[str] = field(default_factory=list)  # how it was dated, what was left out

    def refuse(self, reason: str) -> Submission:
        self.status, self.reason = "not collected", reason
        return self

    @property
    def why(self) -> str:
        """The report's reason: what became of it, then the notes."""
        return _join(self.reason, *self.notes)


def collect_exchange(root: Path, assignment: str | None = None) -> list[Path]:
    """Collect the latest submission of each student from the exchange, for every
    published assignment (or one). Returns the reports, one CSV per assignment:
    ``grading/collect-<assignment>-<stamp>.csv`` (columns entry, status, student, reason).

    A student's latest submission is collected when it is newer than the one in
    ``submitted/`` (which is first kept in ``grading/backups/<assignment>/<stamp>/
    submitted/``); ``timestamp.txt`` is the time it was made (``_date``), so a late
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
        rows = [(shown(e.path.name), e.status, e.student, e.why) for e in mine]
        reports.append(write_collect_report(root, name, run, rows))
        _print_summary(root, name, mine, reports[-1])
    _print_unpublished([entry for entry in entries if entry.assignment not in published], inbound)
    return reports


# --- judging each folder of inbound -------------------------------------------------


def _judge(path: Path, published: list[str], prefix: str | None = None) -> Submission:
    """Whose submission a folder of inbound is, of what, and when it was made; or why
    it is not taken. A folder that cannot be read is reported, not raised: the rest of
    the class is collected."""
    entry = Submission(path)
    problem = _name_problem(entry, published)
    if not problem:
        try:
            problem = _folder_problem(entry, prefix)
        except safe_copy.Refused as refusal:
            problem = str(refusal)
        except OSError as error:
            problem = f"could not be read ({error}): the student can submit again"
    return entry.refuse(problem) if problem else entry


def _name_problem(entry: Submission, published: list[str]) -> str:
    """What is wrong with the folder's name, or ""; the name gives student, assignment
    and the time nbgrader stamped (a label: ``_date`` checks it)."""
    match = _NAME.fullmatch(entry.path.name)
    if match is None:
        return "not named as nbgrader names submissions"
    entry.student, entry.assignment = match["student"].lower(), match["assignment"]
    if entry.assignment not in published:
        return (
            f"{entry.assignment!r} was never released: no such assignment in the exchange "
            "(a folder the student renamed?)"
        )
    if not usable_id(entry.student):
        return (
            f"unusable student id: {entry.student!r} is not a safe folder name "
            "(letters, digits and ._-@)"
        )
    entry.time, entry.time_text = _parse_time(match["time"]), match["time"]
    if entry.time is None:
        return f"unreadable time {match['time']!r} in its name"
    return ""


def _folder_problem(entry: Submission, prefix: str | None) -> str:
    """What is wrong with the folder itself, or ""; dates it.

    With ``prefix`` (a hub's exchange: ``exchange.submitter_prefix``) the folder must
    have been made by the student's own account, ``<prefix><student>``: a student can
    tell nbgrader any id (``JUPYTERHUB_USER``, ``--student``), but not which account
    the folder belongs to; and so must everything in it (``safe_copy``)."""
    path = entry.path
    if path.is_symlink() or not path.is_dir():
        return "a link or a file, not a submission's folder"
    if prefix is not None:
        made_by = exchange.owner(path)
        if made_by != prefix + entry.student:
            return (
                f"made by the account {made_by}, not by {prefix}{entry.student}: "
                f"a submission under another student's id"
            )
        entry.owner = path.lstat().st_uid
    if not os.access(path, os.R_OK | os.X_OK):
        return f"you cannot read it ({exchange.describe(path)}): the student can submit again"
    found = safe_copy.survey(path, entry.owner, IGNORED)
    entry.changed_ns = found.changed_ns
    _date(entry, found.changed_ns)
    return ""


def _date(entry: Submission, changed_ns: int) -> None:
    """Date a submission by its latest change: a student chooses her folder's name and
    can set a file's modification time, but no unprivileged account can set a ctime
    back. The name's time, nbgrader's own stamp, is kept when it agrees."""
    changed = datetime.fromtimestamp(changed_ns / 1e9, UTC).replace(tzinfo=None)
    if entry.time is not None and abs(entry.time - changed) <= NAME_TOLERANCE:
        return
    entry.notes.append(
        f"its name says {entry.time:%Y-%m-%d %H:%M:%S} UTC, but it was last changed at "
        f"{changed:%Y-%m-%d %H:%M:%S} UTC: dated by its last change"
    )
    entry.time, entry.time_text = changed, changed.strftime(TIME_FORMAT)


def _not_across_the_due_date(entry: Submission, due: datetime) -> None:
    """The name's time is kept within ``NAME_TOLERANCE`` of the last change, but not
    across the due date: a name before it on a submission changed after it would be
    minutes the student gave herself."""
    changed = datetime.fromtimestamp(entry.changed_ns / 1e9, UTC).replace(tzinfo=None)
    if entry.time is not None and entry.time <= due < changed:
        entry.notes.append(
            f"its name says {entry.time:%Y-%m-%d %H:%M:%S} UTC, before the due date, but it "
            f"was last changed at {changed:%Y-%m-%d %H:%M:%S} UTC: dated by its last change"
        )
        entry.time, entry.time_text = changed, changed.strftime(TIME_FORMAT)


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
            latest_name = shown(latest[entry.student].path.name)
            entry.refuse(f"an earlier submission: the latest is {latest_name}")
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
        if due is not None:
            _not_across_the_due_date(entry, due)
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

    Regular files and folders only (``safe_copy``): links, nbgrader's ignored files and,
    on a hub, what another account owns are left out, and named. ``timestamp.txt`` is
    the time the collection went by (``_date``).
    """
    incoming = target.parent / f".{target.name}.incoming"
    shutil.rmtree(incoming, ignore_errors=True)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        found = safe_copy.copy(entry.path, incoming, entry.owner, IGNORED, entry.changed_ns)
        (incoming / "timestamp.txt").write_text(entry.time_text)
        if target.exists():
            shutil.rmtree(target)  # already kept by keep_copies
        incoming.rename(target)
    except safe_copy.Refused as refusal:
        shutil.rmtree(incoming, ignore_errors=True)
        return f"{refusal}: nothing of it was copied, and the earlier submission is unchanged"
    except OSError as error:
        shutil.rmtree(incoming, ignore_errors=True)
        return f"could not be copied ({error}); the earlier submission is unchanged"
    entry.notes += _left_out(found, entry.owner)
    return ""


def _left_out(found: safe_copy.Found, owner: int | None) -> list[str]:
    """What the report says of what the copy left out, and of who could change it."""
    notes = []
    if found.links:
        notes.append(f"links not copied: {_listed(found.links)}")
    if found.odd:
        notes.append(f"neither files nor folders, not copied: {_listed(found.odd)}")
    if found.foreign and owner is not None:
        theirs = [f"{name} (owner {exchange.account(uid)})" for name, uid in found.foreign]
        notes.append(
            f"not made by its account {exchange.account(owner)}, not copied: {_listed(theirs)}"
        )
    if found.open_to_others:
        notes.append(
            f"others could change it: {_listed(found.open_to_others)} writable by every "
            "account (the student kit's nbgrader_config.py submits folders only the "
            "student can change)"
        )
    return notes


def _listed(names: list[str], most: int = 10) -> str:
    """``a, b/c and 3 more``; ``""`` is the submission's folder itself."""
    listed = ", ".join((shown(name) or "its folder") for name in names[:most])
    return listed + (f" and {len(names) - most} more" if len(names) > most else "")


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
            line = f"{entry.student:<12} not collected: {shown(entry.path.name)}: {entry.why}"
        else:
            when = f"{entry.time:%Y-%m-%d %H:%M:%S} UTC" if entry.time else ""
            line = _join(f"{entry.student:<12} {entry.status:<17} {when}", entry.why)
        print(f"  {line}")


def _print_unpublished(entries: list[Submission], inbound: Path) -> None:
    """Entries of no published assignment (or no readable name): left in the exchange."""
    if entries:
        print(f"not collected, left where they are in {inbound}/:")
        for entry in entries:
            print(f"  {shown(entry.path.name)}: {entry.why}")
