"""``make collect`` against a hostile class on a shared exchange (collect_exchange.py,
safe_copy.py).

Each test hands in what a student who wants someone else's work, or more time, or the
whole class's collection stopped, can leave in the exchange's inbound (a folder she
owns, nbgrader's 0777 folders a classmate can write to), runs the collection, and
checks that it takes only what is the student's, dates it by what she cannot set, and
collects the rest of the class. The people and helpers are test_exchange.py's.
"""

from __future__ import annotations

import os
import pwd
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from nbgrader.utils import parse_utc
from test_exchange import (
    A2,
    NOTEBOOK,
    Instructor,
    hand_in,
    nbgrader_time,
    new_course,
    report_rows,
    set_due_date,
)

from classroom import collect_exchange as collecting
from classroom import safe_copy
from classroom.exchange import ACCOUNTS_FILE
from classroom.hub_setup import write_accounts

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
NOBODY = 65534


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Instructor:
    teacher = new_course(tmp_path_factory.mktemp("collect-hostile"))
    teacher.ok("release")
    return teacher


def now() -> str:
    return nbgrader_time(datetime.now(UTC))


def collected(teacher: Instructor, student: str) -> dict[str, bytes]:
    folder = teacher.root / "submitted" / student / A2
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def line_of(out: str, student: str) -> str:
    return next(line for line in out.splitlines() if line.strip().startswith(student))


# --- what is copied -----------------------------------------------------------------


def test_a_folder_swapped_for_a_link_while_it_is_copied_is_not_followed(
    course, tmp_path, monkeypatch, capsys
):
    """Right after the collector looked at ``data/`` to copy it (a folder, hers), she
    puts a link to the instructor's solutions in its place: nothing is read through it."""
    secret = tmp_path / "solutions"
    secret.mkdir()
    (secret / "answers.ipynb").write_text("THE INSTRUCTOR'S ANSWERS")
    entry = hand_in(course, "uma", now())
    (entry / "data").mkdir()
    (entry / "data" / "notes.txt").write_text("uma's notes")
    looks = []
    real_stat = os.stat

    def look_then_swap(path, *args, **kwargs):
        info = real_stat(path, *args, **kwargs)
        if isinstance(path, str | os.PathLike) and os.path.basename(path) == "data":
            looks.append(path)
            if len(looks) == 2:  # the first look judges it; the second is the copy's
                (entry / "data").rename(tmp_path / "uma-data")
                (entry / "data").symlink_to(secret)
        return info

    monkeypatch.setenv("NBGRADER_EXCHANGE", str(course.exchange))
    monkeypatch.setattr(os, "stat", look_then_swap)
    collecting.collect_exchange(course.root, A2)
    monkeypatch.undo()
    out = capsys.readouterr().out
    assert len(looks) >= 2 and (entry / "data").is_symlink(), "the swap was made"
    for path in (course.root / "submitted").rglob("*"):
        assert not path.is_file() or b"INSTRUCTOR" not in path.read_bytes(), path
    row = report_rows(course.root)[entry.name]
    assert row["status"] == "not collected", row
    assert "it changed while it was read (data/)" in row["reason"], row
    assert "nothing of it was copied" in line_of(out, "uma")


@pytest.mark.skipif(os.getuid() != 0, reason="files of another account need root to make")
def test_on_a_hub_what_another_account_put_in_a_submission_is_left_out(course, tmp_path):
    """nbgrader's submission folders are 0777: a classmate adds her notebook, a folder,
    and a hard link to a file of hers; none of it is collected as the student's."""
    me = pwd.getpwuid(os.getuid()).pw_name  # the account prefix "" + this id
    entry = hand_in(course, me, now())
    (entry / "classmate.ipynb").write_text("a classmate's notebook")
    os.chown(entry / "classmate.ipynb", NOBODY, -1)
    (entry / "extra").mkdir()
    (entry / "extra" / "more.ipynb").write_text("more of hers")
    os.chown(entry / "extra", NOBODY, -1)
    theirs = tmp_path / "theirs.txt"
    theirs.write_text("someone else's file")
    os.chown(theirs, NOBODY, -1)
    os.link(theirs, entry / "linked.txt")
    write_accounts(course.exchange, "")
    try:
        out = course.ok("collect", A2)
    finally:
        (course.exchange / ACCOUNTS_FILE).unlink()
    nobody = pwd.getpwuid(NOBODY).pw_name
    assert sorted(collected(course, me)) == [NOTEBOOK, "submission_secret.txt", "timestamp.txt"]
    reason = report_rows(course.root)[entry.name]["reason"]
    assert f"not made by its account {me}, not copied: " in reason, reason
    for name in ("classmate.ipynb", "extra/", "linked.txt"):
        assert f"{name} (owner {nobody})" in reason, reason
    assert f"{me:<12} collected" in out


def test_a_submission_folder_others_can_write_to_is_reported(course):
    entry = hand_in(course, "rita", now())
    entry.chmod(0o777)  # as nbgrader's own submit leaves it
    out = course.ok("collect", A2)
    assert collected(course, "rita")[NOTEBOOK] == (entry / NOTEBOOK).read_bytes()
    assert "others could change it: its folder writable by every account" in line_of(out, "rita")


# --- limits, and one entry that cannot be taken ------------------------------------------


def _nest(top: Path, depth: int) -> list[Path]:
    """``top/d/d/.../d`` made one by one (os.makedirs recurses)."""
    made, path = [], top
    for _ in range(depth):
        path = path / "d"
        path.mkdir()
        made.append(path)
    return made


def test_a_folder_nested_a_thousand_deep_is_refused_and_the_class_collected(course):
    deep = hand_in(course, "mallory", now())
    made = _nest(deep, 1_100)
    nina = hand_in(course, "nina", now())
    try:
        done = course.run("collect", A2)
    finally:
        for path in reversed(made):
            path.rmdir()
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    limit = safe_copy.MAX_DEPTH
    assert f"{deep.name}: folders nested more than {limit} deep" in done.stdout, done.stdout
    assert collected(course, "nina")[NOTEBOOK] == (nina / NOTEBOOK).read_bytes()
    assert not (course.root / "submitted" / "mallory").exists()


def test_too_many_files_are_refused_at_the_limit(course):
    entry = hand_in(course, "quinn", now())
    (entry / "many").mkdir()
    for number in range(safe_copy.MAX_ENTRIES + 1):
        (entry / "many" / f"{number}.txt").touch()
    out = course.ok("collect", A2)
    limit = safe_copy.MAX_ENTRIES
    assert f"{entry.name}: more than {limit} files and folders" in out, out
    assert f"a submission may hold {limit}" in out
    assert not (course.root / "submitted" / "quinn").exists()


def test_too_many_bytes_are_refused_at_the_limit(course):
    entry = hand_in(course, "sam", now())
    with open(entry / "big.bin", "wb") as big:
        big.truncate(safe_copy.MAX_BYTES + 1)  # sparse: it takes no room on the disk
    out = course.ok("collect", A2)
    megabytes = safe_copy.MAX_BYTES // 10**6
    assert f"{entry.name}: more than {megabytes} MB in its files" in out, out
    assert not (course.root / "submitted" / "sam").exists()


def test_a_name_that_is_not_text_does_not_stop_the_collection(course):
    """The random part of the name is the student's to choose: bytes that are no
    UTF-8 are shown escaped, in the printout and the report."""
    name = f"tess+{A2}+{now()}+".encode() + b"\xff\xfe"
    os.mkdir(os.fsencode(course.inbound) + b"/" + name)
    entry = course.inbound / os.fsdecode(name)
    (entry / NOTEBOOK).write_text("tess's notebook")
    olly = hand_in(course, "olly", now())
    done = course.run("collect", A2)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert collected(course, "tess")[NOTEBOOK] == b"tess's notebook"
    assert collected(course, "olly")[NOTEBOOK] == (olly / NOTEBOOK).read_bytes()
    rows = [row for row in report_rows(course.root).values() if row["student"] == "tess"]
    assert [row["entry"] for row in rows] == [repr(entry.name)]


# --- when a submission was made ----------------------------------------------------------


def test_a_submission_is_dated_by_its_last_change_not_by_its_name(course):
    """A folder named two hours back, made now, after the due date: late."""
    made = datetime.now(UTC)
    set_due_date(course, made - timedelta(hours=1))
    entry = hand_in(course, "oscar", nbgrader_time(made - timedelta(hours=2)))
    out = course.ok("collect", A2)
    line = line_of(out, "oscar")
    assert "late by 1 h 0 min" in line, line
    assert "but it was last changed at" in line and "dated by its last change" in line
    stamped = (course.root / "submitted" / "oscar" / A2 / "timestamp.txt").read_text()
    assert stamped != entry.name.split("+")[2]
    changed_ns = max(path.lstat().st_ctime_ns for path in [entry, *entry.rglob("*")])
    changed = datetime.fromtimestamp(changed_ns / 1e9, UTC).replace(tzinfo=None)
    assert parse_utc(stamped) == changed  # as nbgrader's late penalty reads it


def test_the_names_leeway_does_not_reach_across_the_due_date(course):
    """A folder named a minute back, within the leeway a name's time has, but made
    after the due date, which lies in that minute: late."""
    made = datetime.now(UTC)
    set_due_date(course, made - timedelta(seconds=30))
    hand_in(course, "quinn", nbgrader_time(made - timedelta(seconds=60)))
    line = line_of(course.ok("collect", A2), "quinn")
    assert "late by" in line and "before the due date, but it was last changed" in line, line


def test_the_latest_submission_is_the_last_made_not_the_last_named(course):
    first = hand_in(course, "paul", nbgrader_time(datetime.now(UTC) + timedelta(days=1)))
    time.sleep(0.01)
    second = hand_in(course, "paul", nbgrader_time(datetime.now(UTC) - timedelta(days=1)))
    (second / NOTEBOOK).write_text("paul's second try")
    out = course.ok("collect", A2)
    assert collected(course, "paul")[NOTEBOOK] == b"paul's second try", out
    rows = report_rows(course.root)
    assert rows[first.name]["reason"].startswith(
        f"an earlier submission: the latest is {second.name}"
    )
