"""A class on one machine's JupyterHub (``make hub``, ``deploy/hub/jupyterhub_config.py``).

``CourseSpawner`` is JupyterHub's ``LocalProcessSpawner`` with what a class needs:

* each student's server runs as a system account of its own (``jupyter-<id>``, made at
  the first start, as The Littlest JupyterHub names them), with a home folder only that
  account can open, holding a copy of the student kit;
* it runs the students' environment (``<state>/venv``: the kit installed, nothing of the
  instructor's), sees the course's exchange, and the kit's Jupyter settings (no
  Formgrader);
* its memory, CPU cores and processes are capped by a cgroup of its own (where one
  can be made: root, cgroup v1 or v2), so one student's runaway server is stopped by
  the kernel's OOM killer, and a busy loop slows only its own, without touching the
  others;
* it has a mount namespace of its own: a small ``/tmp`` and ``/dev/shm`` of its own
  (memory its cgroup pays for, gone when the server stops) and a ``/proc`` that shows
  only the student's own processes;
* when it stops, every process of the student's ends with it, those started with
  ``nohup`` or ``setsid`` too;
* the student's files (home, submissions in the exchange) have a size limit: a server
  whose student passes it is stopped, and does not start again until there is room.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import os
import pwd
import shutil
import stat
import subprocess
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner, set_user_setuid
from tornado import web
from traitlets import Integer, Unicode

from .safe_copy import OPEN_FOLDER
from .sandbox import Cgroup, Limits

_CLONE_NEWNS, _CLONE_NEWIPC = 0x00020000, 0x08000000
NO_LOGIN = "/usr/sbin/nologin"
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: not in a child forked from threads
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 0x4000, 0x40000


def roster(path: Path) -> set[str]:
    """The student ids in a roster file: one a line; blank lines and ``#`` comments
    are skipped."""
    ids = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            ids.add(line)
    return ids


def private_mounts(tmp_mb: int, shm_mb: int) -> None:
    """As root, in the server's process before it becomes the student: a mount
    namespace of its own, with a fresh ``/tmp`` and ``/dev/shm`` (tmpfs of the given
    sizes, whose pages the student's cgroup pays for) and a ``/proc`` where the
    student sees only their own processes. All of it goes when the last process of the
    server ends."""
    if _LIBC.unshare(_CLONE_NEWNS | _CLONE_NEWIPC) != 0:  # IPC: System V shared memory
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS): the hub needs root")
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE)  # nothing leaks back out
    for folder, megabytes in (("/tmp", tmp_mb), ("/dev/shm", shm_mb)):
        _mount("tmpfs", folder, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={megabytes}m,mode=1777")
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    try:
        _mount("proc", "/proc", "proc", flags, "hidepid=invisible")
    except OSError as error:  # kernels before 5.8 know only the number
        if error.errno != errno.EINVAL:
            raise
        _mount("proc", "/proc", "proc", flags, "hidepid=2")


def _mount(source: str, target: str, kind: str | None, flags: int, data: str = "") -> None:
    encoded = [None if x is None else x.encode() for x in (source, target, kind, data or None)]
    if _LIBC.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"mount {kind or ''} on {target}: {os.strerror(code)}")


MAX_DEPTH = 256  # folders deeper than this are counted as over any limit


def disk_use(folders: list[Path], stop_at: int) -> int:
    """Bytes on disk of everything under ``folders``, counted until ``stop_at`` is
    passed. Each folder is opened relative to its parent's descriptor, links not
    followed, so neither a link nor a path too long to name hides anything; a tree
    deeper than ``MAX_DEPTH`` counts as ``stop_at + 1`` (no student needs one)."""
    used = 0
    for top in folders:
        try:
            info = top.lstat()
            if not stat.S_ISDIR(info.st_mode):  # a file (or a link) of hers
                used += _on_disk(info)
                continue
            stack = [(os.open(top, OPEN_FOLDER), None)]
        except OSError:  # gone meanwhile
            continue
        try:
            while stack and used <= stop_at:
                if len(stack) > MAX_DEPTH:
                    return stop_at + 1
                used += _next_entry(stack)
        finally:
            for descriptor, _ in stack:
                os.close(descriptor)
    return used


def _next_entry(stack: list) -> int:
    """One step of the walk: the bytes of the next entry of the deepest open folder
    (a folder is entered), or 0 when that folder is done (and closed)."""
    descriptor, entries = stack[-1]
    if entries is None:
        entries = iter(list(os.scandir(descriptor)))
        stack[-1] = (descriptor, entries)
    entry = next(entries, None)
    if entry is None:
        os.close(stack.pop()[0])
        return 0
    try:
        info = entry.stat(follow_symlinks=False)
        if entry.is_dir(follow_symlinks=False):
            stack.append((os.open(entry.name, OPEN_FOLDER, dir_fd=descriptor), None))
    except OSError:  # removed meanwhile
        return 0
    return _on_disk(info)


def _owned_by(folder: Path, uid: int) -> list[Path]:
    """The entries of ``folder`` that ``uid`` owns (those removed meanwhile left out)."""
    found = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        try:
            if entry.stat(follow_symlinks=False).st_uid == uid:
                found.append(Path(entry.path))
        except OSError:
            continue
    return found


def _on_disk(info: os.stat_result) -> int:
    """What an entry takes: its blocks, and at least one block for its inode (a
    million empty files fill a disk's inodes)."""
    return max(info.st_blocks * 512, 4096)


class CourseSpawner(LocalProcessSpawner):
    """A student's server: own account, own home with the kit, capped memory and CPU."""

    account_prefix = Unicode("jupyter-", help="system account = prefix + hub name").tag(config=True)
    homes = Unicode(help="the folder holding every student's home").tag(config=True)
    kit = Unicode(help="the student kit folder copied into a new home").tag(config=True)
    settings = Unicode(help="Jupyter settings of the hub's (hub_setup)").tag(config=True)
    processes = Integer(256, help="processes a student's server may run").tag(config=True)
    tmp_mb = Integer(512, help="size of the server's own /tmp (memory), MB").tag(config=True)
    shm_mb = Integer(64, help="size of the server's own /dev/shm (memory), MB").tag(config=True)
    disk_mb = Integer(2048, help="the student's files: home and exchange, MB (0: no limit)").tag(
        config=True
    )
    exchange = Unicode(help="the course's folder in the exchange").tag(config=True)
    group = Unicode(help="a group of every student's account (for sshd, cron)").tag(config=True)
    _cgroup: Cgroup | None = None  # made by start, entered by the server, gone at stop

    @property
    def account(self) -> str:
        return self.account_prefix + self.user.name

    def make_preexec_fn(self, name):  # ``name`` is the hub's; the account is ours
        become = set_user_setuid(self.account)
        group, folder = self._cgroup, self.notebook_dir
        tmp_mb, shm_mb = self.tmp_mb, self.shm_mb

        def preexec():
            try:
                if group is not None:
                    group.enter()  # as root, before the account is taken
                private_mounts(tmp_mb, shm_mb)
            except Exception as error:  # Popen hides it: the hub's log shows this line
                os.write(2, f"the server of {name} cannot start: {error}\n".encode())
                raise
            become()  # which goes to the home folder
            # The kit's folder, whose nbgrader_config.py the Assignment List reads: it
            # looks in the server's working folder, not in its root_dir.
            if folder:
                os.chdir(folder)

        return preexec

    def user_env(self, env):
        account = pwd.getpwnam(self.account)
        env.update(USER=self.account, HOME=account.pw_dir, SHELL="/bin/bash")
        return env

    async def start(self):
        home = self._make_account()
        problem = await asyncio.to_thread(self._over_disk_limit)
        if problem:
            text = f"{problem}; ask the course team to make room"
            refused = web.HTTPError(403, text)  # the hub passes these on to the student
            refused.jupyterhub_message = text  # shown as it is
            raise refused
        kit = home / Path(self.kit).name if self.kit else home
        self.notebook_dir = str(kit)  # where the kit's nbgrader_config.py is read
        # the kit's (no Formgrader) and the hub's (kernels on Unix sockets, the terminal)
        folders = [str(kit / "jupyter"), *([self.settings] if self.settings else [])]
        self.environment["JUPYTER_CONFIG_PATH"] = os.pathsep.join(folders)
        # Kernels' Unix sockets there: the server's own /tmp, which no other account
        # sees, and a short path (a socket's path is at most 107 bytes; a home's
        # .local/share/jupyter/runtime/kernel-<uuid>-ipc-N is close to that)
        self.environment["JUPYTER_RUNTIME_DIR"] = "/tmp/jupyter-runtime"
        memory_mb = max(64, (self.mem_limit or 2**31) // 2**20)
        cores = self.cpu_limit or 0  # Spawner.cpu_limit: cores; None or 0 for no cap
        limits = Limits(memory_mb=memory_mb, processes=self.processes, cores=cores)
        self._cgroup = Cgroup.make(limits, name=self._cgroup_name)
        if self._cgroup is not None:  # the server tells of kernels killed for memory
            self._cgroup.readable_by(pwd.getpwnam(self.account).pw_gid)
        return await super().start()

    async def poll(self):
        """Running, or its exit status; a server whose student's files passed the
        limit is ended here (the hub polls every ``poll_interval``, 30 s)."""
        status = await super().poll()
        if status is not None or not self.disk_mb:
            return status
        problem = await asyncio.to_thread(self._over_disk_limit)
        if not problem:
            return None
        self.log.warning("stopping %s's server: %s", self.user.name, problem)
        self._end_every_process()
        return 1

    def _over_disk_limit(self) -> str:
        """What the student's files take past the limit, or ""."""
        if not self.disk_mb:
            return ""
        limit = self.disk_mb * 2**20
        folders = [Path(self.homes) / self.user.name]
        if self.exchange:  # hers in inbound, and in the exchange's root, where all may write
            uid = pwd.getpwnam(self.account).pw_uid
            for place in (Path(self.exchange) / "inbound", Path(self.exchange).parent):
                folders += _owned_by(place, uid)
        used = disk_use(folders, stop_at=limit + 1)
        if used <= limit:
            return ""
        return (
            f"{self.user.name}'s files take more than {self.disk_mb} MB"
            f" (home and submissions), the limit of each student"
        )

    async def stop(self, now=False):
        await super().stop(now=now)
        self._end_every_process().remove()
        self._cgroup = None

    def _end_every_process(self) -> Cgroup:
        """Kill whatever the server left running, in its cgroup (which a hub restarted
        since knows only by name) and of its account; returns the cgroup."""
        group = self._cgroup or Cgroup.existing(self._cgroup_name)
        group.kill()
        subprocess.run(["pkill", "-KILL", "-u", self.account], capture_output=True)
        return group

    @property
    def _cgroup_name(self) -> str:
        return f"autodiff-hub-{self.account}"

    def _make_account(self) -> Path:
        """The student's account and home (0700, theirs), with the kit the first time."""
        homes = Path(self.homes)
        homes.mkdir(parents=True, exist_ok=True)
        homes.chmod(0o711)  # each student passes through to their own, lists none
        home = homes / self.user.name
        # No login shell: the account is for the hub's server alone (no ssh session,
        # which would run outside its cgroup); the group lets sshd and cron refuse it.
        groups = ["--groups", self.group] if self.group else []
        try:
            pwd.getpwnam(self.account)
        except KeyError:
            subprocess.run(
                ["useradd", "--no-create-home", "--home-dir", str(home), "--shell",
                 NO_LOGIN, "--user-group", *groups, self.account],
                check=True, capture_output=True,
            )  # fmt: skip
        account = pwd.getpwnam(self.account)
        if account.pw_shell != NO_LOGIN:  # made by an earlier hub
            append = [*groups, "--append"] if groups else []
            subprocess.run(["usermod", "--shell", NO_LOGIN, *append, self.account],
                           check=True, capture_output=True)  # fmt: skip
        if not home.exists():
            home.mkdir(parents=True)
            if self.kit:  # links stay links: the student reads through them as themselves
                shutil.copytree(self.kit, home / Path(self.kit).name, symlinks=True)
            for path in [home, *home.rglob("*")]:
                os.chown(path, account.pw_uid, account.pw_gid, follow_symlinks=False)
        home.chmod(0o700)
        return home
