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
  others.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner, set_user_setuid
from traitlets import Integer, Unicode

from .exchange import ACCOUNTS_FILE
from .sandbox import Cgroup, Limits


def roster(path: Path) -> set[str]:
    """The student ids in a roster file: one a line; blank lines and ``#`` comments
    are skipped."""
    ids = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            ids.add(line)
    return ids


def write_accounts(exchange: Path, prefix: str) -> None:
    """Declare in the exchange how students' accounts are named
    (``exchange.submitter_prefix`` reads it when collecting). Made afresh at every
    start, root's and 0644, so that no student's file can stand in for it."""
    declared = exchange / ACCOUNTS_FILE
    declared.unlink(missing_ok=True)  # root may, in the sticky exchange
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(declared, flags, 0o644), "w") as file:
        json.dump({"account_prefix": prefix}, file)
    declared.chmod(0o644)  # whatever the umask took away


class CourseSpawner(LocalProcessSpawner):
    """A student's server: own account, own home with the kit, capped memory and CPU."""

    account_prefix = Unicode("jupyter-", help="system account = prefix + hub name").tag(config=True)
    homes = Unicode(help="the folder holding every student's home").tag(config=True)
    kit = Unicode(help="the student kit folder copied into a new home").tag(config=True)
    processes = Integer(256, help="processes a student's server may run").tag(config=True)
    _cgroup: Cgroup | None = None  # made by start, entered by the server, gone at stop

    @property
    def account(self) -> str:
        return self.account_prefix + self.user.name

    def make_preexec_fn(self, name):  # ``name`` is the hub's; the account is ours
        become = set_user_setuid(self.account)
        group, folder = self._cgroup, self.notebook_dir

        def preexec():
            if group is not None:
                group.enter()  # as root, before the account is taken
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
        self.environment["JUPYTER_CONFIG_PATH"] = str(kit / "jupyter")  # no Formgrader
        memory_mb = max(64, (self.mem_limit or 2**31) // 2**20)
        cores = self.cpu_limit or 0  # Spawner.cpu_limit: cores; None or 0 for no cap
        limits = Limits(memory_mb=memory_mb, processes=self.processes, cores=cores)
        self._cgroup = Cgroup.make(limits, name=f"autodiff-hub-{self.account}")
        return await super().start()

    async def stop(self, now=False):
        await super().stop(now=now)
        if self._cgroup is not None:
            self._cgroup.remove()

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
            if self.kit:
                shutil.copytree(self.kit, home / Path(self.kit).name, symlinks=False)
            for path in [home, *home.rglob("*")]:
                os.chown(path, account.pw_uid, account.pw_gid, follow_symlinks=False)
        home.chmod(0o700)
        return home
