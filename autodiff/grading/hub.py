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
  ``nohup`` or ``setsid`` too.
"""

from __future__ import annotations

import ctypes
import errno
import os
import pwd
import shutil
import subprocess
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner, set_user_setuid
from traitlets import Integer, Unicode

from .sandbox import Cgroup, Limits

_CLONE_NEWNS = 0x00020000
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
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS): the hub needs root")
    _mount(libc, "none", "/", None, _MS_REC | _MS_PRIVATE)  # nothing leaks back out
    for folder, megabytes in (("/tmp", tmp_mb), ("/dev/shm", shm_mb)):
        _mount(
            libc, "tmpfs", folder, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={megabytes}m,mode=1777"
        )
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    try:
        _mount(libc, "proc", "/proc", "proc", flags, "hidepid=invisible")
    except OSError as error:  # kernels before 5.8 know only the number
        if error.errno != errno.EINVAL:
            raise
        _mount(libc, "proc", "/proc", "proc", flags, "hidepid=2")


def _mount(libc, source: str, target: str, kind: str | None, flags: int, data: str = "") -> None:
    encoded = [None if x is None else x.encode() for x in (source, target, kind, data or None)]
    if libc.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"mount {kind or ''} on {target}: {os.strerror(code)}")


class CourseSpawner(LocalProcessSpawner):
    """A student's server: own account, own home with the kit, capped memory and CPU."""

    account_prefix = Unicode("jupyter-", help="system account = prefix + hub name").tag(config=True)
    homes = Unicode(help="the folder holding every student's home").tag(config=True)
    kit = Unicode(help="the student kit folder copied into a new home").tag(config=True)
    settings = Unicode(help="Jupyter settings of the hub's (hub_setup)").tag(config=True)
    processes = Integer(256, help="processes a student's server may run").tag(config=True)
    tmp_mb = Integer(512, help="size of the server's own /tmp (memory), MB").tag(config=True)
    shm_mb = Integer(64, help="size of the server's own /dev/shm (memory), MB").tag(config=True)
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
        env.update(USER=self.account, HOME=account.pw_dir, SHELL=account.pw_shell)
        return env

    async def start(self):
        home = self._make_account()
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
        return await super().start()

    async def stop(self, now=False):
        await super().stop(now=now)
        # Whatever the server left running (a hub restarted since has no _cgroup)
        group = self._cgroup or Cgroup.existing(self._cgroup_name)
        group.kill()
        subprocess.run(["pkill", "-KILL", "-u", self.account], capture_output=True)
        group.remove()
        self._cgroup = None

    @property
    def _cgroup_name(self) -> str:
        return f"autodiff-hub-{self.account}"

    def _make_account(self) -> Path:
        """The student's account and home (0700, theirs), with the kit the first time."""
        homes = Path(self.homes)
        homes.mkdir(parents=True, exist_ok=True)
        homes.chmod(0o711)  # each student passes through to their own, lists none
        home = homes / self.user.name
        try:
            pwd.getpwnam(self.account)
        except KeyError:
            subprocess.run(
                ["useradd", "--no-create-home", "--home-dir", str(home), "--shell",
                 "/bin/bash", "--user-group", self.account],
                check=True, capture_output=True,
            )  # fmt: skip
        account = pwd.getpwnam(self.account)
        if not home.exists():
            home.mkdir(parents=True)
            if self.kit:  # links stay links: the student reads through them as themselves
                shutil.copytree(self.kit, home / Path(self.kit).name, symlinks=True)
            for path in [home, *home.rglob("*")]:
                os.chown(path, account.pw_uid, account.pw_gid, follow_symlinks=False)
        home.chmod(0o700)
        return home
