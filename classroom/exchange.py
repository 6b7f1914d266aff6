"""The nbgrader exchange, from the instructor's side: the folder through which students
fetch assignments, submit them and fetch feedback from JupyterLab's Assignment List.

The layout is nbgrader's (0.9), for the course ``autodiff``; the modes are what each
kind of user needs (students are "others" to the instructor's files)::

    <exchange>/                        1777  students' commands check they can write here
    <exchange>/autodiff/               0755  the instructor's
        outbound/<assignment>/         0755  released notebooks: students read and fetch them
        inbound/                       2733  submissions: students add theirs, list none
            <student>+<assignment>+<time>+<random>/
                                       0755  one submission, the student's (the kit's
                                             submit; nbgrader's own leaves it 0777)
        feedback/<hash>.html           0711  a student opens only the pages whose hash their
                                             own submission's secret gives

``<exchange>`` is ``c.Exchange.root`` of ``nbgrader_config.py``: ``NBGRADER_EXCHANGE``,
or the course's ``.exchange/``. ``make release`` publishes (``publish``), ``make
feedback`` returns feedback (``return_feedback``); ``make collect`` reads inbound
(``collect_exchange.py``). Before each, ``problems`` checks the folders, so that a
wrong mode is one clear message, not a traceback halfway through.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from .course import GRADING_DIR, nbgrader

COURSE_ID = "autodiff"
# Each folder of the course: what students ("others") need on it, the mode that gives
# it (nbgrader's), and what goes wrong without.
STUDENTS_NEED = {
    "outbound": (stat.S_IROTH | stat.S_IXOTH, "755", "students cannot fetch assignments"),
    "inbound": (stat.S_IWOTH | stat.S_IXOTH, "2733", "students cannot submit"),
    "feedback": (stat.S_IXOTH, "711", "students cannot fetch feedback"),
}
HOW_TO_MOVE = (
    "the exchange is c.Exchange.root in nbgrader_config.py: NBGRADER_EXCHANGE=/path "
    "points the course at another one (a class on JupyterHub: a folder every student "
    "can reach, such as /srv/nbgrader/exchange)"
)


def exchange_root(root: Path) -> Path:
    """The exchange folder, read from the course's ``nbgrader_config.py`` as nbgrader
    reads it (so an instructor's own setting there is honoured)."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    return Path(config.Exchange.root)


# Written by ``make hub`` in the exchange's root: how the students' accounts are named.
ACCOUNTS_FILE = "hub-accounts.json"


def submitter_prefix(root: Path) -> str | None:
    """The prefix of the students' accounts when a hub declares one for this exchange
    (``<exchange>/hub-accounts.json``, ``{"account_prefix": "jupyter-"}``, written by
    ``make hub``): a submission of student ``id`` must then be a folder made by the
    account ``<prefix><id>``, whatever id the student's nbgrader was told to use. None
    for an exchange without it (students on machines of their own)."""
    declared = exchange_root(root) / ACCOUNTS_FILE
    if not (declared.exists() or declared.is_symlink()):
        return None
    info = declared.lstat()
    trusted = info.st_uid in (0, os.getuid()) and not info.st_mode & 0o022
    if not (stat.S_ISREG(info.st_mode) and trusted):
        raise SystemExit(
            f"error: {describe(declared)}: it is not the hub's (root's, not writable by others),"
            " so it cannot say whose submissions are whose; nothing was collected. Remove it"
            " and start make hub again, which writes it."
        )
    return str(json.loads(declared.read_text())["account_prefix"])


def course_folder(root: Path) -> Path:
    return exchange_root(root) / COURSE_ID


def released(root: Path) -> list[str]:
    """The assignments published to the exchange (folders of ``outbound/``)."""
    outbound = course_folder(root) / "outbound"
    if not outbound.is_dir():
        return []
    return sorted(p.name for p in outbound.iterdir() if p.is_dir() and not p.is_symlink())


# --- checking the folders -----------------------------------------------------------


def describe(path: Path) -> str:
    """``/x is drwx------ (0700), owner alice``: what a permission message shows."""
    info = path.lstat()
    mode = stat.S_IMODE(info.st_mode)
    return f"{path} is {stat.filemode(info.st_mode)} ({mode:04o}), owner {account(info.st_uid)}"


def owner(path: Path) -> str:
    """The account that owns ``path`` (not followed, if a link)."""
    return account(path.lstat().st_uid)


def account(uid: int) -> str:
    """The name of the account with ``uid``, or ``uid 1234`` when it has none."""
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):  # no user database (Windows), or a deleted user
        return f"uid {uid}"


def problems(root: Path) -> list[str]:
    """What stops students or the instructor from using the exchange, one line each
    with the fix; empty when all is well (or nothing was published yet)."""
    exchange = exchange_root(root)
    if not exchange.is_dir():
        return [f"the exchange {exchange} does not exist: `make release` makes it"]
    found = []
    if stat.S_IMODE(exchange.stat().st_mode) & 0o003 != 0o003:
        found.append(
            f"{describe(exchange)}: students' nbgrader commands refuse an exchange they "
            f"cannot write to; fix: chmod 1777 {exchange}"
        )
    course = exchange / COURSE_ID
    if not os.access(exchange, os.R_OK | os.W_OK | os.X_OK):  # nothing inside can be seen
        owner = account(exchange.stat().st_uid)
        found.append(
            f"{describe(exchange)}: you cannot use it; fix: chmod 1777 {exchange} (as {owner})"
        )
    elif course.exists() or course.is_symlink():
        mine = _check_mine(course, 0o005, "755", "students cannot reach the course")
        found += mine or _check_course(course)  # when it is sound, what it holds
    return found


def _check_course(course: Path) -> list[str]:
    found = []
    for name, (bits, fix, consequence) in STUDENTS_NEED.items():
        if (course / name).exists() or (course / name).is_symlink():
            found += _check_mine(course / name, bits, fix, consequence)
    inbound = course / "inbound"
    if inbound.is_dir() and stat.S_IMODE(inbound.stat().st_mode) & stat.S_IROTH:
        found.append(
            f"{describe(inbound)}: every student can list and copy the others' submissions; "
            f"fix: chmod 2733 {inbound}"
        )
    return found


def _check_mine(folder: Path, others: int, fix: str, consequence: str) -> list[str]:
    """A folder of the course in the exchange: the instructor's (nbgrader refuses to
    release into folders of another user), rwx for the instructor, ``others`` for students."""
    if folder.is_symlink() or not folder.is_dir():
        return [f"{folder} is not a folder: move it away; `make release` makes it again"]
    info = folder.stat()
    me = os.getuid()
    if info.st_uid != me:
        mine = account(me)
        return [f"{describe(folder)}, not you ({mine}); fix: chown -R {mine} {folder}"]
    if stat.S_IMODE(info.st_mode) & 0o700 != 0o700:
        return [f"{describe(folder)}: you cannot read or write it; fix: chmod {fix} {folder}"]
    if stat.S_IMODE(info.st_mode) & others != others:
        return [f"{describe(folder)}: {consequence}; fix: chmod {fix} {folder}"]
    return []


def unreachable(root: Path) -> str | None:
    """A note when students who are other users of this machine cannot reach the
    exchange (a folder above it without o+x, such as a home folder), else None."""
    exchange = exchange_root(root).resolve()
    for folder in [*reversed(exchange.parents), exchange]:
        if folder.is_dir() and not stat.S_IMODE(folder.stat().st_mode) & stat.S_IXOTH:
            return (
                f"note: students who are other users of this machine cannot reach the exchange: "
                f"{describe(folder)} (chmod o+x {folder} if they should); {HOW_TO_MOVE}"
            )
    return None


def stop_on_problems(root: Path, what: str) -> None:
    """Stop with every problem and its fix, before anything is done."""
    found = problems(root)
    if found:
        lines = "\n".join(f"  - {line}" for line in found)
        raise SystemExit(f"error: {what}: the exchange needs fixing first:\n{lines}\n{HOW_TO_MOVE}")


# --- publishing and returning feedback ----------------------------------------------


def publish(root: Path, assignment: str) -> None:
    """Copy ``assignments/<assignment>/`` to the exchange's ``outbound/`` (nbgrader's
    ``release_assignment --force``), where the Assignment List shows it to students.

    Publishing again replaces only ``outbound/<assignment>/``: submissions in
    ``inbound/`` stay, and students who fetched the earlier version keep theirs.
    """
    course = course_folder(root)
    if course.exists() or course.is_symlink():  # not into a folder someone else made
        stop_on_problems(root, f"{assignment} was not published")
    again = (course_folder(root) / "outbound" / assignment).is_dir()
    log = root / GRADING_DIR / "logs" / f"publish-{assignment}.log"
    code, output = nbgrader(root, "release_assignment", assignment, "--force", log=log)
    if code != 0:
        found = "\n".join(f"  - {line}" for line in problems(root))
        raise SystemExit(
            f"error: publishing {assignment} to the exchange failed; see {log}\n{found}\n"
            f"{output[-1500:]}\n{HOW_TO_MOVE}"
        )
    _sticky(exchange_root(root))
    outbound = course_folder(root) / "outbound" / assignment
    if again:
        print(
            f"published {assignment} again to {outbound}/: it replaces the earlier release "
            "(submissions in the exchange stay; a student who fetched it before keeps that copy)"
        )
    else:
        print(f"published {assignment} to {outbound}/: students fetch it from the Assignment List")


def _sticky(exchange: Path) -> None:
    """nbgrader leaves the exchange at 0777, where any student may rename the course's
    folder and put a folder of their own in its place; with the sticky bit (1777, which
    nbgrader accepts) only its owner may. Only the exchange's owner can set it."""
    info = exchange.stat()
    if info.st_uid == os.getuid() and not info.st_mode & stat.S_ISVTX:
        exchange.chmod(stat.S_IMODE(info.st_mode) | stat.S_ISVTX)


def return_feedback(root: Path, assignment: str) -> None:
    """Put the feedback of students who submitted through the exchange where they fetch
    it (nbgrader's ``release_feedback``: ``feedback/<hash>.html``, the hash made from the
    secret their submission carries). Students collected from an LMS zip have no secret:
    their feedback is named, for you to send."""
    through: list[str] = []  # students who submitted through the exchange
    other: list[str] = []
    for folder in sorted((root / "feedback").glob(f"*/{assignment}")):
        has_secret = (folder / "submission_secret.txt").is_file()
        (through if has_secret and (folder / "timestamp.txt").is_file() else other).append(
            folder.parent.name
        )
    if not through:
        return
    stop_on_problems(root, f"returning feedback for {assignment}")
    log = root / GRADING_DIR / "logs" / f"return-feedback-{assignment}.log"
    args = ["release_feedback", assignment]
    if other:  # nbgrader would stop at the first student without a secret
        args.append(f"--CourseDirectory.student_id_exclude={','.join(other)}")
    code, output = nbgrader(root, *args, log=log)
    if code != 0:
        raise SystemExit(f"error: returning feedback for {assignment} failed; see {log}")
    print(
        f"feedback for {assignment} returned through the exchange to {', '.join(through)} "
        "(Assignment List: Fetch Feedback)"
    )
    if other:
        print(f"not through the exchange (collected from a zip): {', '.join(other)}")
