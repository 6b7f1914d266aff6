"""What ``make hub`` sets up as root before it serves the class
(``deploy/hub/jupyterhub_config.py`` calls these at every start).

Root runs the hub and starts each student's server as the student's own account; nothing
else of the course runs as root. The Formgrader and every grading step run as the
*grading account*, which holds the course's grading data (``solutions/``,
``assignments/``, ``submitted/``, ``autograded/``, ``feedback/``, ``grading/``, the
gradebook) and nothing that root runs: the code, the environments and the hub's own
files stay root's, in a course folder whose sticky bit keeps the grading account from
replacing them. The grading account gets a cgroup of its own for its sandboxes
(``Cgroup.delegate``), so grading needs no root either.

Every folder is made private (or as nbgrader needs it) as it is made, never opened
later with a ``chmod``; files the hub writes where students can write are written
under a name nobody can guess and renamed into place.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import stat
import subprocess
from pathlib import Path

from .exchange import ACCOUNTS_FILE, COURSE_ID
from .safe_copy import OPEN_FOLDER

# The grading data: the grading account's. Everything else of the course stays root's.
GRADING_DATA = ("solutions", "assignments", "submitted", "autograded", "feedback", "grading")
GRADEBOOK = "grading/gradebook.db"  # on a hub's course (NBGRADER_DB_URL of the Formgrader)
MADE_EMPTY = ("submitted", "autograded", "feedback", "grading")  # made if missing
# nbgrader's modes for the course's folders in the exchange (exchange.py)
EXCHANGE_MODES = {"": 0o755, "outbound": 0o755, "inbound": 0o2733, "feedback": 0o711}


def check_state_folder(state: Path) -> None:
    """The hub's folder (homes, environments, the exchange) must stay in sight of the
    students' servers, which each mount a ``/tmp`` and ``/dev/shm`` of their own."""
    for hidden in (Path("/tmp"), Path("/dev/shm")):
        if state.resolve().is_relative_to(hidden):
            raise SystemExit(
                f"error: the hub's folder {state} is in {hidden}, which each student's server"
                f" replaces with one of its own: move the course (or HUB_STATE=/srv/...)"
            )


def grading_account(name: str, home: Path) -> pwd.struct_passwd:
    """The system account that grades (made the first time), with a private home."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir",
             str(home), "--shell", "/usr/sbin/nologin", name],
            check=True, capture_output=True,
        )  # fmt: skip
    account = pwd.getpwnam(name)
    _private_folder(home, account)
    return account


def _private_folder(folder: Path, account: pwd.struct_passwd, mode: int = 0o700) -> None:
    """``folder``, the account's, with ``mode`` from the moment it exists."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise SystemExit(f"error: {folder} should be a folder; move it away and start again")
    old = os.umask(0o077)
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
    finally:
        os.umask(old)
    os.chown(folder, account.pw_uid, account.pw_gid, follow_symlinks=False)
    folder.chmod(mode)


def hand_course_to(course: Path, state: Path, account: pwd.struct_passwd) -> None:
    """The course folder as the hub needs it: root's, and no one else may add to it
    (root imports code from it: a module the grading account could put there would
    run as root); the grading data the grading account's (the gradebook in
    ``grading/``, ``GRADEBOOK``); every other entry root's, readable by the grading
    account, closed to students."""
    os.chown(course, 0, account.pw_gid, follow_symlinks=False)
    course.chmod(0o751 if state.parent == course else 0o750)
    old, gradebook = course / "gradebook.db", course / GRADEBOOK
    if old.is_file() and not old.is_symlink() and not os.path.lexists(gradebook):
        # where make release, or an earlier hub, kept it (grading/ cannot be swapped:
        # the course folder is root's)
        gradebook.parent.mkdir(mode=0o700, exist_ok=True)
        old.rename(gradebook)
        os.chown(gradebook, account.pw_uid, account.pw_gid, follow_symlinks=False)
    for entry in course.iterdir():
        if entry == state or entry.is_symlink():
            continue
        if entry.name in GRADING_DATA:
            _give(entry, account)
        else:  # code and settings that root runs: readable by the grading account only
            os.chown(entry, 0, account.pw_gid, follow_symlinks=False)
            mode = entry.stat().st_mode
            entry.chmod(stat.S_IMODE(mode) & 0o750 | (0o050 if entry.is_dir() else 0o040))
    for name in MADE_EMPTY:  # those not there yet
        _private_folder(course / name, account)


def _give(top: Path, account: pwd.struct_passwd) -> None:
    """``top`` and what it holds to the account, private (0700), links not followed.

    Only a tree that is not the account's yet is walked, deepest entries first, so
    that every folder above the entry being changed is still root's: the account
    cannot swap a folder for a link under root's hands. A tree that is already the
    account's is left as it is (the account could have put anything there)."""
    uid, gid = account.pw_uid, account.pw_gid
    if top.lstat().st_uid != uid:
        if top.is_dir():
            for folder, names, files in os.walk(top, topdown=False):
                for name in names + files:
                    os.chown(os.path.join(folder, name), uid, gid, follow_symlinks=False)
        os.chown(top, uid, gid, follow_symlinks=False)
    top.chmod(stat.S_IMODE(top.stat().st_mode) & 0o700)


def make_exchange(exchange: Path, account: pwd.struct_passwd) -> list[str]:
    """The exchange and the course's folders in it, made before any student can: the
    exchange root's (1777, as nbgrader needs), the course's folders the grading
    account's with nbgrader's modes. Anything else in their place (a student's
    folder, a link) is moved aside, and named in what is returned.

    Each folder is opened relative to the one above it, without following links,
    and changed through what was opened: the grading account owns the course's
    folder, and could otherwise swap one for a link while root changes it."""
    moved: list[str] = []
    exchange.mkdir(mode=0o755, parents=True, exist_ok=True)
    top = os.open(exchange, OPEN_FOLDER)
    try:
        os.fchown(top, 0, 0)
        os.fchmod(top, 0o1777)
        course = _course_folder_at(top, COURSE_ID, EXCHANGE_MODES[""], account, moved)
        try:
            for name, mode in EXCHANGE_MODES.items():
                if name:
                    os.close(_course_folder_at(course, name, mode, account, moved))
        finally:
            os.close(course)
    finally:
        os.close(top)
    return [f"{exchange}/{line}" for line in moved]


def _course_folder_at(
    parent: int, name: str, mode: int, account: pwd.struct_passwd, moved: list[str]
) -> int:
    """The folder ``name`` in the open folder ``parent``, opened, the account's with
    ``mode``: the one there if it is a folder of root's or the account's, else made
    anew in place of what was there (which is moved aside and named in ``moved``)."""
    folder = _open_folder_of(parent, name, (0, account.pw_uid))
    if folder is None:
        if _exists_at(parent, name):
            aside = f".{name}.moved-{secrets.token_hex(4)}"
            os.rename(name, aside, src_dir_fd=parent, dst_dir_fd=parent)
            moved.append(f"{name} (not the course's) was moved to {aside}")
        os.mkdir(name, 0o700, dir_fd=parent)
        folder = os.open(name, OPEN_FOLDER, dir_fd=parent)
    os.fchown(folder, account.pw_uid, account.pw_gid)
    os.fchmod(folder, mode)
    return folder


def _open_folder_of(parent: int, name: str, owners: tuple[int, int]) -> int | None:
    """``name`` in ``parent`` opened, if it is a folder (not a link) one of ``owners``
    owns; else None."""
    try:
        folder = os.open(name, OPEN_FOLDER, dir_fd=parent)
    except OSError:  # missing, a link, or not a folder
        return None
    if os.fstat(folder).st_uid in owners:
        return folder
    os.close(folder)
    return None


def _exists_at(parent: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def write_accounts(exchange: Path, prefix: str) -> None:
    """Declare in the exchange how students' accounts are named
    (``exchange.submitter_prefix`` reads it when collecting): root's and 0644, written
    under a random name and renamed into place, so that whatever a student left under
    that name (a file, a link, a link loop) is replaced, never followed."""
    declared = exchange / ACCOUNTS_FILE
    if declared.is_dir() and not declared.is_symlink():
        declared.rename(exchange / f".{ACCOUNTS_FILE}.moved-{secrets.token_hex(4)}")
    write_atomically(declared, json.dumps({"account_prefix": prefix}), 0o644)


def write_atomically(path: Path, data: str | bytes, mode: int) -> None:
    """``path`` holding ``data``, whole or not at all: written under a name nobody can
    guess beside it, synced, and renamed over whatever had the name (a file, a link:
    never followed), with ``mode`` whatever the umask."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(temporary, flags, 0o600), "wb") as file:
        file.write(data.encode() if isinstance(data, str) else data)
        file.flush()
        os.fchmod(file.fileno(), mode)
        os.fsync(file.fileno())
    os.replace(temporary, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename itself survives a crash
    finally:
        os.close(folder)


def students_group(name: str) -> str:
    """A system group every student's account is in (made the first time): sshd's
    ``DenyGroups`` and cron's and at's deny lists can name it."""
    if subprocess.run(["getent", "group", name], capture_output=True).returncode != 0:
        subprocess.run(["groupadd", "--system", name], check=True, capture_output=True)
    return name


def write_student_settings(folder: Path) -> Path:
    """Jupyter settings every student's server reads beside the kit's (root's, 0755):
    kernels talk over Unix sockets in the student's private runtime folder (ZeroMQ's
    ``ipc``), not over TCP ports any account of the machine could connect to, for the
    server's kernels and for nbgrader's validate alike; a kernel killed for its memory
    is said to be, in the cell that ran (``autodiff.grading.lab_notice``: the kit's, since
    a student's environment has no ``classroom``); and the terminal starts the
    shell without a login profile, so the class's environment stays first on PATH."""
    folder.mkdir(mode=0o755, exist_ok=True)
    os.chown(folder, 0, 0)
    folder.chmod(0o755)
    kernels = {"KernelManager": {"transport": "ipc"}}
    server = {
        **kernels,
        "ServerApp": {
            "kernel_websocket_connection_class": "autodiff.grading.lab_notice.MemoryNotice",
            "terminado_settings": {"shell_command": ["/bin/bash"]},
        },
    }
    write_atomically(folder / "jupyter_server_config.json", json.dumps(server, indent=1), 0o644)
    write_atomically(folder / "nbgrader_config.json", json.dumps(kernels, indent=1), 0o644)
    return folder


ONE_ORIGIN_NOTE = (
    "note: the hub and every student's server share one web origin: a page a student's"
    " server answers with runs with the hub's rights in the browser of a staff member who"
    " opens it. Give each server a host of its own: SUBDOMAIN_HOST=https://hub.example.org"
    " (with wildcard DNS for *.hub.example.org and a wildcard certificate; on one machine,"
    " http://hub.localhost:PORT works in browsers without either)"
)


def hidepid_note(mounts: Path = Path("/proc/mounts")) -> str | None:
    """A note when this machine's ``/proc`` shows every account's processes (each
    student's server mounts a ``/proc`` of its own that hides them, but logins outside
    the hub see the machine's)."""
    for line in mounts.read_text().splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[1] == "/proc" and fields[2] == "proc":
            if "hidepid" in fields[3]:
                return None
    return (
        "note: /proc on this machine shows every account's processes and command lines;"
        " students' servers on this hub each see only their own, but for any other login"
        " set it machine-wide: mount -o remount,hidepid=invisible /proc (and in /etc/fstab:"
        " proc /proc proc defaults,hidepid=invisible 0 0)"
    )
