"""What ``make hub`` sets up as root before serving (``classroom/hub_setup.py``),
against what a hostile student can leave in its way: each test plays the student with
a real account of this machine, then checks the hub's start-up as root."""

import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection
from system_parts import require
from traitlets.utils.importstring import import_item

from classroom import hub_setup
from classroom.exchange import ACCOUNTS_FILE, COURSE_ID
from classroom.sandbox import Cgroup

GRADING = Path(__file__).parents[2] / "autodiff" / "grading"  # oom.py, which sandbox imports


@pytest.fixture
def place():
    """A folder the test's accounts can reach (pytest's own is root's, 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="autodiff-hub-setup-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def accounts():
    """Two system accounts made for the test (a student and the grading account),
    removed afterwards with anything they left running."""
    if os.geteuid() != 0:
        pytest.skip("makes system accounts: run as root")
    prefix = f"ads{secrets.token_hex(3)}-"
    made = {}
    for role in ("student", "grader"):
        name = prefix + role
        subprocess.run(["useradd", "--system", "--user-group", name], check=True)
        made[role] = pwd.getpwnam(name)
    yield made
    for account in made.values():
        subprocess.run(["pkill", "-KILL", "-u", account.pw_name], capture_output=True)
        subprocess.run(["userdel", account.pw_name], capture_output=True)


def as_student(account, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", account.pw_name, "--", *command], capture_output=True)


def test_a_course_folder_a_student_made_before_the_hub_is_moved_aside(place, accounts):
    """Before the first release, a student made the course's folder in the exchange (a
    link to ``.`` and an ``inbound`` of hers): the hub's start puts its own in place,
    with nbgrader's modes, owned by the grading account, and says what it moved."""
    student, grader = accounts["student"], accounts["grader"]
    exchange = place / "exchange"
    exchange.mkdir(mode=0o1777)
    exchange.chmod(0o1777)
    place.chmod(0o755)
    planted = as_student(student, "sh", "-c", f"ln -s . {exchange}/{COURSE_ID}")
    assert planted.returncode == 0, planted.stderr
    moved = hub_setup.make_exchange(exchange, grader)
    course = exchange / COURSE_ID
    assert not course.is_symlink() and course.is_dir()
    assert any("moved" in line for line in moved), moved
    for name, mode in hub_setup.EXCHANGE_MODES.items():
        info = (course / name).lstat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (grader.pw_uid, mode), name
    # a student can now neither replace the course folder nor read the inbound
    renamed = as_student(student, "mv", str(course), str(exchange / "mine"))
    assert renamed.returncode != 0, "a student renamed the course's folder"
    assert as_student(student, "ls", str(course / "inbound")).returncode != 0


def test_a_students_folder_inside_the_course_folder_is_moved_aside_too(place, accounts):
    student, grader = accounts["student"], accounts["grader"]
    exchange = place / "exchange"
    hub_setup.make_exchange(exchange, grader)
    inbound = exchange / COURSE_ID / "inbound"
    inbound.rmdir()
    (exchange / COURSE_ID).chmod(0o777)  # as if the course folder had been open
    assert as_student(student, "mkdir", str(inbound)).returncode == 0
    hub_setup.make_exchange(exchange, grader)
    assert inbound.lstat().st_uid == grader.pw_uid
    assert stat.S_IMODE(inbound.lstat().st_mode) == 0o2733
    assert stat.S_IMODE((exchange / COURSE_ID).lstat().st_mode) == 0o755


@pytest.mark.parametrize("planted", ["loop", "folder", "file", "link to a root file"])
def test_the_accounts_file_is_written_whatever_a_student_left_there(place, accounts, planted):
    """A student plants something where the hub writes ``hub-accounts.json`` in the
    (world-writable) exchange: the hub still starts, writes its own, root's and 0644,
    and follows no link."""
    student = accounts["student"]
    exchange = place / "exchange"
    exchange.mkdir()
    exchange.chmod(0o1777)
    place.chmod(0o755)
    target = exchange / ACCOUNTS_FILE
    secret = place / "root-only"
    secret.write_text("root's")
    commands = {
        "loop": f"ln -s {target} {target}",
        "folder": f"mkdir {target} && touch {target}/x",
        "file": f'echo \'{{"account_prefix": ""}}\' > {target}',
        "link to a root file": f"ln -s {secret} {target}",
    }
    made = as_student(student, "sh", "-c", commands[planted])
    assert made.returncode == 0, made.stderr
    hub_setup.write_accounts(exchange, "jupyter-")
    info = target.lstat()
    assert stat.S_ISREG(info.st_mode), f"{target} is not a file after the hub wrote it"
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o644)
    assert json.loads(target.read_text()) == {"account_prefix": "jupyter-"}
    assert secret.read_text() == "root's"


def test_the_course_is_the_grading_accounts_data_and_roots_code(place, accounts):
    """The grading account gets the grading data (the gradebook moves into
    ``grading/``), not the code root runs: it can neither replace ``classroom/`` or
    ``autodiff/`` nor add a module beside them (root imports from the course folder);
    students reach none of it."""
    student, grader = accounts["student"], accounts["grader"]
    course, state = place / "course", place / "course" / "hub"
    for folder in ("autodiff", "classroom", "solutions/a1", "submitted/alice/a1", "hub"):
        (course / folder).mkdir(parents=True)
    (course / "autodiff" / "__init__.py").write_text("")
    (course / "classroom" / "__init__.py").write_text("")
    (course / "solutions" / "a1" / "a1.ipynb").write_text("{}")
    (course / "gradebook.db").write_text("grades")
    hub_setup.hand_course_to(course, state, grader)
    gradebook = course / hub_setup.GRADEBOOK
    assert gradebook.read_text() == "grades" and not (course / "gradebook.db").exists()
    for data in ("solutions/a1/a1.ipynb", "submitted/alice/a1", hub_setup.GRADEBOOK):
        assert (course / data).lstat().st_uid == grader.pw_uid, data
    assert (course / "autodiff").lstat().st_uid == (course / "classroom").lstat().st_uid == 0
    moves = ("mv autodiff moved", "mv classroom moved", "touch bcrypt.py")
    for attempt in (*moves, "touch grading/gradebook.db-journal"):
        as_student(grader, "sh", "-c", f"cd {course} && {attempt}")
    for package in ("autodiff", "classroom"):
        assert (course / package).is_dir(), "the grading account replaced root's code"
    assert not (course / "bcrypt.py").exists(), "the grading account added a module root imports"
    assert (course / "grading" / "gradebook.db-journal").exists(), "the gradebook cannot write"
    code = ("autodiff/__init__.py", "classroom/__init__.py")
    for path in ("solutions/a1/a1.ipynb", "submitted", "grading", *code):
        shown = as_student(student, "cat" if "." in path else "ls", str(course / path))
        assert shown.returncode != 0, f"a student reads {path}"


def test_a_tree_the_grading_account_owns_is_not_walked_by_root(place, accounts):
    """At a later start, root leaves alone what the grading account owns: a link it
    put in ``solutions/`` is not followed, and nothing outside changes owner."""
    grader = accounts["grader"]
    course, state = place / "course", place / "course" / "hub"
    (course / "solutions").mkdir(parents=True)
    state.mkdir()
    hub_setup.hand_course_to(course, state, grader)
    outside = place / "roots-file"
    outside.write_text("root's")
    planted = as_student(grader, "ln", "-s", str(outside), str(course / "solutions" / "x"))
    assert planted.returncode == 0, planted.stderr
    hub_setup.hand_course_to(course, state, grader)
    assert outside.lstat().st_uid == 0, "root gave away a file through a link"


def test_folders_the_grading_account_makes_are_private_from_the_start(place, accounts):
    """The Formgrader runs with umask 077 (its command in the hub's config): a folder
    it makes is never readable by students, not even for a moment."""
    grader, student = accounts["grader"], accounts["student"]
    place.chmod(0o755)
    config = (Path(__file__).parents[2] / "deploy/hub/jupyterhub_config.py").read_text()
    assert "umask 077 && exec" in config
    (place / "g").mkdir()
    os.chown(place / "g", grader.pw_uid, grader.pw_gid)
    made = as_student(grader, "sh", "-c", f"umask 077 && mkdir -p {place}/g/autograded/x")
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE((place / "g" / "autograded").stat().st_mode) == 0o700
    assert as_student(student, "ls", str(place / "g" / "autograded")).returncode != 0


def test_students_settings_put_kernels_on_unix_sockets_and_keep_path(tmp_path):
    folder = hub_setup.write_student_settings(tmp_path / "settings")
    server = json.loads((folder / "jupyter_server_config.json").read_text())
    grading = json.loads((folder / "nbgrader_config.json").read_text())
    assert server["KernelManager"]["transport"] == grading["KernelManager"]["transport"] == "ipc"
    shell = server["ServerApp"]["terminado_settings"]["shell_command"]
    # a login shell (-l) reads /etc/profile, which puts PATH back without the class's venv
    env = {"PATH": f"/opt/class-venv/bin:{os.environ['PATH']}", "HOME": str(tmp_path)}
    shown = subprocess.run([*shell, "-i", "-c", "echo $PATH"], env=env, capture_output=True)
    assert shown.stdout.decode().startswith("/opt/class-venv/bin:"), shown.stdout
    for name in ("jupyter_server_config.json", "nbgrader_config.json"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o644
    # the kernel websocket that says when a kernel was killed for its memory
    named = server["ServerApp"]["kernel_websocket_connection_class"]
    assert issubclass(import_item(named), ZMQChannelsWebsocketConnection), named
    assert named.startswith("autodiff.grading."), f"{named}: not in the kit a student's server has"


def test_hidepid_note_says_how_to_hide_processes(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n")
    assert "hidepid=invisible" in hub_setup.hidepid_note(mounts)
    mounts.write_text("proc /proc proc rw,relatime,hidepid=invisible 0 0\n")
    assert hub_setup.hidepid_note(mounts) is None


def test_the_grading_account_caps_its_sandboxes_in_a_cgroup_of_its_own(accounts):
    """No root for grading: the hub hands the grading account a cgroup, in which it
    makes a sandbox's cgroup with a memory cap, enters it, and removes it."""
    require(None if Cgroup.available() else "no cgroup can be made here", "run as root")
    grader = accounts["grader"]
    assert Cgroup.delegate(grader.pw_uid, grader.pw_gid)
    code = (
        # classroom/sandbox.py (and autodiff/grading/oom.py, which it imports) without
        # autodiff/__init__.py: the system Python has no NumPy
        "import sys, types\n"
        "sys.modules['autodiff'] = types.ModuleType('autodiff')\n"
        "sys.modules['autodiff.grading'] = types.ModuleType('autodiff.grading')\n"
        f"sys.modules['autodiff.grading'].__path__ = [{str(GRADING)!r}]\n"
        "from classroom.sandbox import Cgroup, Limits\n"
        "group = Cgroup.make(Limits(memory_mb=300, processes=20))\n"
        "assert group is not None, 'no cgroup'\n"
        "print(*group.folders)\n"
        "group.remove()\n"
    )
    root = Path(__file__).parents[2]
    python = _python_every_account_runs()
    ran = subprocess.run(
        ["runuser", "-u", grader.pw_name, "--", python, "-c", code],
        capture_output=True, text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    folders = ran.stdout.split()
    assert folders and all(f"/{Cgroup.DELEGATED}/" in folder for folder in folders), folders


def _python_every_account_runs() -> str:
    """The system's Python (the test's may be in root's home, as pyenv puts it)."""
    for python in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if subprocess.run(["runuser", "-u", "nobody", "--", python, "-c", ""]).returncode == 0:
            return python
    pytest.skip("no Python that every account can run")


def test_stopping_a_cgroup_ends_what_left_its_session(accounts):
    """``nohup setsid sleep`` leaves the server's session, never its cgroup: ``kill``
    ends it."""
    require(None if Cgroup.available() else "no cgroup can be made here", "run as root")
    from classroom.sandbox import Limits

    student = accounts["student"]
    group = Cgroup.make(Limits(memory_mb=256, processes=20), name=f"ads-{student.pw_name}")
    assert group is not None
    procs = group.folders[0] / "cgroup.procs"
    started = subprocess.Popen(
        ["runuser", "-u", student.pw_name, "--", "sh", "-c", "setsid nohup sleep 300 &"],
        preexec_fn=lambda: procs.write_text("0"),
    )
    started.wait()
    time.sleep(0.5)
    running = subprocess.run(["pgrep", "-u", student.pw_name, "sleep"], capture_output=True)
    assert running.returncode == 0, "the detached sleep did not start"
    group.kill()
    group.remove()
    alive = ["pgrep", "-u", student.pw_name, "--runstates", "D,R,S,T"]  # zombies are gone
    left = subprocess.run(alive, capture_output=True, text=True)
    assert left.returncode == 1, f"still running after kill: {left.stdout}"


def test_publishing_into_a_course_folder_a_student_made_is_refused(place, accounts):
    """Had a student made the course's folder (on a machine without make hub's start-up),
    releasing stops before anything is written into it, and says how to fix it."""
    from classroom import exchange as course_exchange

    student = accounts["student"]
    root, shared = place / "course", place / "exchange"
    root.mkdir()
    shared.mkdir()
    shared.chmod(0o1777)
    config = f"c = get_config()  # noqa\nc.Exchange.root = {str(shared)!r}\n"
    (root / "nbgrader_config.py").write_text(config)
    planted = as_student(student, "ln", "-s", ".", str(shared / COURSE_ID))
    assert planted.returncode == 0, planted.stderr
    with pytest.raises(SystemExit, match="is not a folder: move it away") as stopped:
        course_exchange.publish(root, "a1")
    assert "was not published" in str(stopped.value)
    assert not (root / "grading").exists(), "publishing went ahead"


@pytest.mark.parametrize("folder", ["/tmp/course/hub", "/dev/shm/hub"])
def test_the_hubs_folder_cannot_be_where_servers_mount_their_own(folder):
    with pytest.raises(SystemExit, match="replaces with one of its own"):
        hub_setup.check_state_folder(Path(folder))
    hub_setup.check_state_folder(Path("/srv/course/hub"))  # elsewhere: no word


def test_disk_use_counts_what_is_on_disk_without_following_links(tmp_path):
    from classroom.hub import MAX_DEPTH, disk_use

    home = tmp_path / "home"
    folder = home / "a" / "b"
    folder.mkdir(parents=True)
    (folder / "data").write_bytes(b"x" * 3_000_000)
    (home / "elsewhere").symlink_to("/usr")  # not followed: not hers
    used = disk_use([home], stop_at=10**12)
    assert 3_000_000 <= used < 3_100_000, used
    assert disk_use([home], stop_at=1000) < used  # stops counting past the cap
    single = tmp_path / "left-in-the-exchange.bin"  # a file, not a folder, of hers
    single.write_bytes(b"y" * 200_000)
    assert disk_use([single], stop_at=10**12) >= 200_000
    empties = tmp_path / "inodes"
    empties.mkdir()
    for number in range(100):  # no blocks, but an inode each
        (empties / str(number)).touch()
    assert disk_use([empties], stop_at=10**12) >= 100 * 4096
    deep = tmp_path / "deep"
    os.makedirs(deep / "/".join(["d"] * (MAX_DEPTH + 5)))
    assert disk_use([deep], stop_at=10**9) == 10**9 + 1, "a deep tree hides what it holds"
