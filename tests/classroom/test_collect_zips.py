"""Collecting LMS zips (classroom/collect.py) in a small course, without nbgrader.

Two released assignments, each with one notebook written straight into ``solutions/``
and ``assignments/``; every test builds its zip entry by entry and checks the student
folders, their files, the report's rows and the printed reasons.
"""

import csv
import shutil
import stat
import warnings
import zipfile
from datetime import datetime
from pathlib import Path, PurePosixPath

import nbformat
import pytest

from classroom import collect as collecting

ROOT = Path(__file__).resolve().parents[2]
A1, A2 = "a1_first", "a2_second"
OLD, NEW = (2026, 11, 1, 9, 0, 0), (2026, 11, 2, 9, 0, 0)


def release(root: Path, assignment: str, *notebooks: str) -> None:
    for folder in ("solutions", "assignments"):
        (root / folder / assignment).mkdir(parents=True)
        for name in notebooks or [assignment]:
            nbformat.write(nbformat.v4.new_notebook(), root / folder / assignment / f"{name}.ipynb")


@pytest.fixture
def course(tmp_path):
    root = tmp_path / "course"
    root.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", root)
    release(root, A1)
    release(root, A2)
    return root


def make_zip(path: Path, *entries) -> Path:
    """A zip of (name, text) or (name, text, date) entries, in that order (dated NEW
    unless said); a name may repeat, as in a zip made by hand."""
    with warnings.catch_warnings(), zipfile.ZipFile(path, "w") as archive:
        warnings.simplefilter("ignore")  # "Duplicate name" is what the test wants
        for name, text, *date in entries:
            archive.writestr(zipfile.ZipInfo(name, date[0] if date else NEW), text)
    return path


def symlink(name: str) -> zipfile.ZipInfo:
    """A zip entry that unzip would make a symlink (its content is the link's target)."""
    info = zipfile.ZipInfo(name, NEW)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def report(course: Path) -> list[dict]:
    """The rows of the newest collect report."""
    newest = sorted((course / "grading").glob("collect-*.csv"))[-1]
    with newest.open(newline="") as rows:
        return list(csv.DictReader(rows))


def row(entry: str, status: str = "collected", student: str = "", reason: str = "") -> dict:
    return {"entry": entry, "status": status, "student": student, "reason": reason}


def submitted(course: Path, assignment: str = A1) -> dict[str, dict[str, str]]:
    """{student: {file name: text}} of submitted/ for one assignment."""
    found: dict[str, dict[str, str]] = {}
    for folder in sorted((course / "submitted").glob(f"*/{assignment}")):
        files = {p.name: p.read_text() for p in sorted(folder.iterdir())}
        found[folder.parent.name] = files
    return found


def set_aside(course: Path, assignment: str = A1) -> dict[str, str]:
    """{file name: text} of the entries not collected."""
    folders = list((course / "grading" / "backups" / assignment).glob("not-collected-*"))
    return {p.name: p.read_text() for folder in folders for p in sorted(folder.iterdir())}


def stamped(when: tuple) -> str:
    """nbgrader's timestamp.txt for a zip date."""
    return f"{datetime(*when):%Y-%m-%d %H:%M:%S}.000000 UTC"


def submission(text: str, when=NEW) -> dict[str, str]:
    return {f"{A1}.ipynb": text, "timestamp.txt": stamped(when)}


# --- what worked before -----------------------------------------------------------------


def test_collect_reads_lms_downloads_and_keeps_resubmissions(course, tmp_path, capsys):
    canvas = make_zip(
        tmp_path / "submissions.zip",
        (f"kim_12345_67890_{A1}.ipynb", "kim 1", OLD),
        (f"lee_late_12346_67891_{A1}-1.ipynb", "lee", OLD),
    )
    collecting.collect(course, canvas)  # the assignment is read from the file names
    moodle = make_zip(
        tmp_path / "moodle.zip",
        (f"Mo Salah_4711_assignsubmission_file_/{A1}.ipynb", "mo", NEW),
        (f"course/nina/{A1} (1).ipynb", "nina", NEW),
        (f"kim_12345_67890_{A1}.ipynb", "kim 2", NEW),  # a resubmission
    )
    collecting.collect(course, moodle, A1)
    assert submitted(course) == {
        "4711": submission("mo"),
        "kim": submission("kim 2"),
        "lee": submission("lee", OLD),
        "nina": submission("nina"),
    }
    backups = list((course / "grading" / "backups" / A1).glob(f"*/kim/{A1}.ipynb"))
    assert [p.read_text() for p in backups] == ["kim 1"]  # what the resubmission replaced
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1].startswith(f"earlier submissions kept in grading/backups/{A1}/")
    assert [p.name for p in backups[0].parents[1].iterdir()] == ["kim"]  # only what was replaced


def test_timestamps_are_what_nbgrader_reads(course, tmp_path):
    utils = pytest.importorskip("nbgrader.utils")
    path = make_zip(
        tmp_path / "dates.zip",
        (f"kim/{A1}.ipynb", "kim", (2026, 11, 24, 19, 51, 24)),
        (f"lee/{A1}.ipynb", "lee", (2026, 0, 0, 0, 0, 0)),  # an impossible date
    )
    collecting.collect(course, path, A1)
    when = (course / "submitted" / "kim" / A1 / "timestamp.txt").read_text()
    assert when == "2026-11-24 19:51:24.000000 UTC"
    assert utils.parse_utc(when).isoformat() == "2026-11-24T19:51:24"  # UTC, as nbgrader keeps it
    assert submitted(course)["lee"] == {f"{A1}.ipynb": "lee"}  # nbgrader: on time


def test_collect_refuses_what_it_cannot_read(course, tmp_path):
    not_zip = tmp_path / "grades.zip"
    not_zip.write_text("hello")
    with pytest.raises(SystemExit, match="not a zip file"):
        collecting.collect(course, not_zip)
    unnamed = make_zip(tmp_path / "x.zip", ("alice/notebook.ipynb", "{}"))
    with pytest.raises(SystemExit, match="ASSIGNMENT="):
        collecting.collect(course, unnamed)
    with pytest.raises(SystemExit, match="no assignment 'a9'"):
        collecting.collect(course, unnamed, "a9")
    (course / "solutions" / "a3_new").mkdir()
    (course / "solutions" / "a3_new" / "a3_new.ipynb").write_text("{}")
    with pytest.raises(SystemExit, match="a3_new is not released yet"):
        collecting.collect(course, unnamed, "a3_new")
    assert not (course / "submitted").exists()


def test_collect_keeps_one_file_per_student_and_sets_the_rest_aside(course, tmp_path, capsys):
    path = make_zip(
        tmp_path / "twice.zip",
        (f"uma_late_1_3_{A1}-1.ipynb", "uma newest", NEW),
        (f"uma_1_2_{A1}.ipynb", "uma oldest", OLD),
        (f"vic_4_5_{A1}.ipynb", "vic first", NEW),
        (f"vic_4_5_{A1}-2.ipynb", "vic second", NEW),  # same date: the later name wins
        (f"vic_4_5_{A1}-2.ipynb", "vic again", OLD),  # the same name twice in one zip
    )
    collecting.collect(course, path, A1)
    assert submitted(course) == {"uma": submission("uma newest"), "vic": submission("vic second")}
    uma_newer = f"duplicate: uma sent a newer file, uma_late_1_3_{A1}-1.ipynb"
    vic_newer = f"duplicate: vic sent a newer file, vic_4_5_{A1}-2.ipynb"
    vic_same = f"duplicate: vic sent a file of the same date, vic_4_5_{A1}-2.ipynb"
    assert report(course) == [
        row(f"uma_late_1_3_{A1}-1.ipynb", student="uma"),
        row(f"uma_1_2_{A1}.ipynb", "not collected", "uma", uma_newer),
        row(f"vic_4_5_{A1}.ipynb", "not collected", "vic", vic_same),
        row(f"vic_4_5_{A1}-2.ipynb", student="vic"),
        row(f"vic_4_5_{A1}-2.ipynb", "not collected", "vic", vic_newer),
    ]
    printed = capsys.readouterr().out
    assert f"  not collected: uma_1_2_{A1}.ipynb (duplicate: uma sent a newer file" in printed
    assert set_aside(course) == {
        f"uma_1_2_{A1}.ipynb": "uma oldest",  # nothing is lost
        f"vic_4_5_{A1}.ipynb": "vic first",
        f"vic_4_5_{A1}-2.ipynb": "vic again",
    }


def test_whose_reads_the_lms_file_names():
    P = PurePosixPath
    assert collecting.whose(P("kim_12345_67890_a1.ipynb")) == ("kim", "a1")
    assert collecting.whose(P("Kim_late_1_2_a1-2.ipynb")) == ("kim", "a1")
    assert collecting.whose(P("Mo Salah_4711_assignsubmission_file_/a1 (1).ipynb")) == (
        "4711",
        "a1",
    )
    assert collecting.whose(P("course/frank_g/a1.ipynb")) == ("frank_g", "a1")
    assert collecting.whose(P("a1.ipynb")) is None
    assert collecting.whose(P("kim/notes.txt")) is None
    assert collecting.whose(P("kim/.a1.ipynb")) is None


def test_the_folder_names_the_student_not_the_file_name():
    P = PurePosixPath
    moodle = "Mo Salah_4711_assignsubmission_file_"
    assert collecting.whose(P(f"{moodle}/2004_1_1_a2.ipynb")) == ("4711", "2004_1_1_a2")
    assert collecting.whose(P(f"{moodle}/work/2004_1_1_a2.ipynb")) == ("4711", "2004_1_1_a2")
    assert collecting.whose(P("kim/2004_1_1_a2.ipynb")) == ("kim", "2004_1_1_a2")
    # a Canvas download zipped again in a folder: that folder is nobody's
    assert collecting.whose(P("subs/lee_1_2_a2.ipynb"), P("subs")) == ("lee", "a2")


# --- rule 1: every entry is collected or reported with its reason -----------------------


def test_every_entry_is_collected_or_reported_once(course, tmp_path, capsys):
    path = tmp_path / "download.zip"
    make_zip(
        path,
        (f"kim/{A1}.ipynb", "kim"),
        ("kim/", ""),  # a folder: not an entry
        ("kim/data.csv", "1,2"),
        (f"{A1}.ipynb", "whose?"),
        (f"../{A1}.ipynb", "up"),
        (f"/{A1}.ipynb", "absolute"),
        (f"C:\\{A1}.ipynb", "windows absolute"),
        (f"__MACOSX/kim/._{A1}.ipynb", "resource fork"),
        (f"lee_1_2_{A2}.ipynb", "lee's a2"),
        ("notes.txt", "hello"),
    )
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(symlink(f"eve/{A1}.ipynb"), "/etc/passwd")
    report_path = collecting.collect(course, path, A1)
    assert submitted(course) == {"kim": submission("kim")}
    missed = "not collected"
    assert report(course) == [
        row(f"kim/{A1}.ipynb", student="kim"),
        row("kim/data.csv", missed, reason="not a notebook"),
        row(f"{A1}.ipynb", missed, reason="cannot tell whose it is"),
        row(f"../{A1}.ipynb", missed, reason="path with .."),
        row(f"/{A1}.ipynb", missed, reason="absolute path"),
        row(f"C:\\{A1}.ipynb", missed, reason="absolute path"),
        row(f"__MACOSX/kim/._{A1}.ipynb", missed, reason="hidden file"),
        row(f"lee_1_2_{A2}.ipynb", missed, "lee", f"another assignment: a notebook of {A2}"),
        row("notes.txt", missed, reason="not a notebook"),
        row(f"eve/{A1}.ipynb", missed, reason="symlink"),
    ]
    with zipfile.ZipFile(path) as archive:
        files = [name for name in archive.namelist() if not name.endswith("/")]
    assert [r["entry"] for r in report(course)] == files  # each exactly once
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == (
        f"collected {A1}: 1 student in submitted/; 9 entries not collected "
        f"(see {report_path.relative_to(course)})"
    )
    assert printed[1:10] == [
        "  not collected: kim/data.csv (not a notebook)",
        f"  not collected: {A1}.ipynb (cannot tell whose it is)",
        f"  not collected: ../{A1}.ipynb (path with ..)",
        f"  not collected: /{A1}.ipynb (absolute path)",
        f"  not collected: C:\\{A1}.ipynb (absolute path)",
        f"  not collected: __MACOSX/kim/._{A1}.ipynb (hidden file)",
        f"  not collected: lee_1_2_{A2}.ipynb (another assignment: a notebook of {A2})",
        "  not collected: notes.txt (not a notebook)",
        f"  not collected: eve/{A1}.ipynb (symlink)",
    ]
    assert printed[10].startswith(f"entries not collected are kept in grading/backups/{A1}/")
    assert set_aside(course) == {  # under safe, flat names; the symlink as a plain file
        "kim__data.csv": "1,2",
        f"{A1}.ipynb": "whose?",
        f"{A1}-2.ipynb": "up",
        f"{A1}-3.ipynb": "absolute",
        f"C___{A1}.ipynb": "windows absolute",
        f"__MACOSX__kim__._{A1}.ipynb": "resource fork",
        f"lee_1_2_{A2}.ipynb": "lee's a2",
        "notes.txt": "hello",
        f"eve__{A1}.ipynb": "/etc/passwd",
    }
    assert not any(p.is_symlink() for p in (course / "grading").rglob("*"))


def test_a_damaged_entry_is_reported(course, tmp_path):
    path = make_zip(
        tmp_path / "damaged.zip", (f"kim/{A1}.ipynb", "kim 1"), (f"lee/{A1}.ipynb", "lee")
    )
    path.write_bytes(path.read_bytes().replace(b"kim 1", b"kim 2"))  # its CRC no longer fits
    collecting.collect(course, path, A1)
    assert list(submitted(course)) == ["lee"]
    reason = "unreadable: damaged or encrypted (it stays in the archived zip)"
    assert report(course)[0] == row(f"kim/{A1}.ipynb", "not collected", reason=reason)
    assert set_aside(course) == {}


def test_the_summary_counts_students_and_entries(course, tmp_path, capsys):
    path = make_zip(
        tmp_path / "all.zip",
        (f"kim_1_2_{A1}.ipynb", "kim"),
        (f"lee_1_2_{A1}.ipynb", "lee"),
    )
    report_path = collecting.collect(course, path)
    assert report_path.parent == course / "grading"
    assert report_path.name.startswith(f"collect-{A1}-") and report_path.suffix == ".csv"
    assert capsys.readouterr().out == (
        f"collected {A1}: 2 students in submitted/; 0 entries not collected "
        f"(see grading/{report_path.name})\n"
    )


# --- rule 2: the folder wins over the file name -----------------------------------------


def test_a_file_in_a_students_folder_stays_that_students(course, tmp_path):
    moodle = "Mo Salah_4711_assignsubmission_file_"
    path = make_zip(
        tmp_path / "folders.zip",
        (f"{moodle}/2004_1_1_{A1}.ipynb", "mo's"),
        (f"kim/2005_1_1_{A1}.ipynb", "kim's"),
        (f"lee/{A1}.ipynb", "lee's"),
        (f"2004_1_1_{A1}.ipynb", "2004's own", OLD),  # older, yet never replaced by mo's
    )
    collecting.collect(course, path, A1)
    assert {s: files[f"{A1}.ipynb"] for s, files in submitted(course).items()} == {
        "2004": "2004's own",
        "4711": "mo's",
        "kim": "kim's",
        "lee": "lee's",
    }
    renamed = "renamed: {}_1_1_a1_first.ipynb -> a1_first.ipynb"
    assert report(course) == [
        row(f"{moodle}/2004_1_1_{A1}.ipynb", student="4711", reason=renamed.format(2004)),
        row(f"kim/2005_1_1_{A1}.ipynb", student="kim", reason=renamed.format(2005)),
        row(f"lee/{A1}.ipynb", student="lee"),
        row(f"2004_1_1_{A1}.ipynb", student="2004"),
    ]


def test_a_canvas_download_zipped_in_a_folder_is_read_by_file_names(course, tmp_path):
    path = make_zip(
        tmp_path / "again.zip",
        (f"submissions/kim_1_2_{A1}.ipynb", "kim"),
        (f"submissions/lee_3_4_{A1}.ipynb", "lee"),
    )
    collecting.collect(course, path, A1)
    assert list(submitted(course)) == ["kim", "lee"]


# --- rule 3: nothing escapes, nobody is named after the zip -----------------------------


def test_paths_out_of_the_zip_are_reported_and_never_written(course, tmp_path):
    path = make_zip(
        tmp_path / "a1_first.zip",
        ("../a1_first.ipynb", "up"),
        ("kim/../../a1_first.ipynb", "up twice"),
        ("/a1_first.ipynb", "root"),
        ("/tmp/kim/a1_first.ipynb", "root folder"),
    )
    collecting.collect(course, path, A1)
    assert not (course / "submitted").exists()
    assert [(r["status"], r["reason"]) for r in report(course)] == [
        ("not collected", "path with .."),
        ("not collected", "path with .."),
        ("not collected", "absolute path"),
        ("not collected", "absolute path"),
    ]
    assert not (tmp_path / "a1_first.ipynb").exists()
    assert not (course.parent.parent / "a1_first.ipynb").exists()
    assert set_aside(course) == {
        "a1_first.ipynb": "up",
        "kim__a1_first.ipynb": "up twice",
        "a1_first-2.ipynb": "root",
        "tmp__kim__a1_first.ipynb": "root folder",
    }


# --- rule 4: student ids are safe folder names ------------------------------------------


@pytest.mark.parametrize(
    "entry, student",
    [
        (f"Mo Salah/{A1}.ipynb", "mo salah"),
        (f"bad$name_1_2_{A1}.ipynb", "bad$name"),
        (f"caf\u00e9/{A1}.ipynb", "caf\u00e9"),
        (f"kim;rm -rf/{A1}.ipynb", "kim;rm -rf"),
    ],
)
def test_unusable_student_ids_are_reported(course, tmp_path, entry, student):
    path = make_zip(tmp_path / "ids.zip", (entry, "x"), (f"ok.name@uni-1/{A1}.ipynb", "ok"))
    collecting.collect(course, path, A1)
    assert list(submitted(course)) == ["ok.name@uni-1"]
    reason = (
        f"unusable student id: {student!r} is not a safe folder name "
        "(letters, digits and ._-@); rename the file or folder in the zip"
    )
    assert report(course)[0] == row(entry, "not collected", student, reason)


# --- rule 5: nothing is lost ------------------------------------------------------------


def test_nothing_is_lost(course, tmp_path):
    first = make_zip(tmp_path / "download.zip", (f"kim/{A1}.ipynb", "kim 1"), ("x.txt", "x"))
    collecting.collect(course, first, A1)
    archive = course / "downloaded" / A1 / "archive"
    assert (archive / "download.zip").read_bytes() == first.read_bytes()
    second = make_zip(tmp_path / "download.zip", (f"kim/{A1}.ipynb", "kim 2"), ("x.txt", "y"))
    collecting.collect(course, second, A1)
    assert (archive / "download.zip").read_bytes() == second.read_bytes()
    renamed = list((course / "downloaded" / A1).glob("download.zip.*"))
    assert len(renamed) == 1 and zipfile.ZipFile(renamed[0]).read("x.txt") == b"x"
    collecting.collect(course, archive / "download.zip", A1)  # the archived zip, again
    assert (archive / "download.zip").read_bytes() == second.read_bytes()
    assert len(list((course / "downloaded" / A1).glob("download.zip.*"))) == 1
    backups = course / "grading" / "backups" / A1
    kept = sorted(p.read_text() for p in backups.glob(f"*/kim/{A1}.ipynb"))
    assert kept == ["kim 1", "kim 2"]  # each replaced submission
    aside = sorted(p.read_text() for p in backups.glob("not-collected-*/x.txt"))
    assert aside == ["x", "y", "y"]


# --- rule 6: a renamed notebook is filed under the released name ------------------------


def test_a_renamed_notebook_takes_the_released_name(course, tmp_path, capsys):
    path = make_zip(
        tmp_path / "renamed.zip",
        ("kim/my work.ipynb", "kim"),
        (f"lee_1_2_{A1} (1).ipynb", "lee"),  # a copy suffix is not a rename
    )
    collecting.collect(course, path, A1)
    assert list(submitted(course)["kim"]) == [f"{A1}.ipynb", "timestamp.txt"]
    assert report(course) == [
        row("kim/my work.ipynb", student="kim", reason=f"renamed: my work.ipynb -> {A1}.ipynb"),
        row(f"lee_1_2_{A1} (1).ipynb", student="lee"),
    ]
    assert f"  kim: renamed: my work.ipynb -> {A1}.ipynb" in capsys.readouterr().out


def test_a_scratch_notebook_does_not_replace_the_real_one(course, tmp_path):
    path = make_zip(
        tmp_path / "two.zip",
        (f"kim/{A1}.ipynb", "real", NEW),
        ("kim/scratch.ipynb", "scratch", NEW),  # same date; 's' sorts after 'a'
    )
    collecting.collect(course, path, A1)
    assert submitted(course)["kim"][f"{A1}.ipynb"] == "real"
    reason = f"duplicate: kim sent a file of the same date, kim/{A1}.ipynb"
    assert report(course)[1] == row("kim/scratch.ipynb", "not collected", "kim", reason)


def test_an_assignment_of_several_notebooks_keeps_their_names(course, tmp_path):
    release(course, "a3_parts", "part1", "part2")
    path = make_zip(
        tmp_path / "a3_parts.zip",
        ("kim/part1.ipynb", "one"),
        ("kim/part2.ipynb", "two"),
        ("kim/extra.ipynb", "three"),
    )
    collecting.collect(course, path, "a3_parts")
    assert submitted(course, "a3_parts") == {
        "kim": {"part1.ipynb": "one", "part2.ipynb": "two", "timestamp.txt": stamped(NEW)}
    }
    reason = "unknown notebook: a3_parts has part1, part2"
    assert report(course)[2] == row("kim/extra.ipynb", "not collected", "kim", reason)
