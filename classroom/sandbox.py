"""The OS sandbox that student code runs in while it is graded.

Grading runs a student's notebook, so it runs code the instructor has never read.
Here the kernel (and everything it starts) runs inside bubblewrap (``bwrap``,
Linux user namespaces, the tool Flatpak uses), where

* the only writable place is a private copy of the student's folder, mounted as
  ``/home/student/work``; HOME, IPython's and Jupyter's folders are new and empty;
* Python, the kit's virtual environment, the ``autodiff`` package and this one (the
  kernel runs its ``monitor``) are there read-only; the gradebook, ``solutions/``,
  ``submitted/``, ``autograded/``, ``feedback/``, backups, archives and the
  instructor's home are not there at all;
* there is no network (a new network namespace with only loopback), and a new PID
  namespace: whatever the kernel starts dies with it;
* memory, CPU time, processes, open files and file size are limited (``Limits``).

The grader talks to the kernel over Unix sockets in a folder made for that kernel
alone (ZeroMQ's ``ipc`` transport), which is the one other folder mounted.

``choose("none")`` runs kernels without a sandbox, as the instructor: only for a
course whose students are all trusted, and the run says so loudly.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from autodiff.grading import oom

HOME = "/home/student"
WORK = f"{HOME}/work"  # the kernel's working folder: the student's private copy
SUBMITTED = f"{HOME}/.submitted"  # the student's files as submitted, read-only

# Environment variables passed into the sandbox: nothing of the instructor's
# (tokens, database URLs) goes in, only what Python and OpenBLAS need.
_PASSED_ENV = ("LANG", "LC_ALL", "TZ", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

# Files of /etc that programs in the sandbox read; the rest of /etc stays out.
_ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "alternatives",
    "fonts",
    "mime.types",
    "nsswitch.conf",
    "hosts",
)


@dataclass(frozen=True)
class Limits:
    """What one graded notebook may use; each is reported by name when hit.

    Set them with environment variables (``GRADING_MEMORY_MB=2048 make autograde``).
    """

    memory_mb: int = 4096  # address space of each process (and in all, with cgroups)
    cpu_seconds: int = 900  # CPU time of each process
    processes: int = 64
    open_files: int = 256
    file_size_mb: int = 256  # largest file a notebook may write
    disk_mb: int = 512  # everything it writes in its folder (an in-memory folder that size)
    output_kb: int = 1024  # output a cell may send back to the grader
    cores: float = 0  # CPU cores all its processes may use at once (a cgroup's); 0: no cap

    @classmethod
    def from_env(cls) -> Limits:
        names = {
            "memory_mb": "GRADING_MEMORY_MB",
            "cpu_seconds": "GRADING_CPU_SECONDS",
            "processes": "GRADING_PROCESSES",
            "open_files": "GRADING_OPEN_FILES",
            "file_size_mb": "GRADING_FILE_SIZE_MB",
            "disk_mb": "GRADING_DISK_MB",
            "output_kb": "GRADING_OUTPUT_KB",
        }
        values = {}
        for attribute, variable in names.items():
            if variable in os.environ:
                values[attribute] = int(os.environ[variable])
        return cls(**values)

    @property
    def memory_in_words(self) -> str:
        """The memory limit as a student reads it: "4 GB", "1.5 GB", "512 MB"."""
        return oom.in_words(self.memory_mb * 2**20)

    def describe(self) -> str:
        return (
            f"memory {self.memory_mb} MB, CPU {self.cpu_seconds} s, "
            f"{self.processes} processes, {self.open_files} open files, "
            f"files up to {self.file_size_mb} MB, {self.disk_mb} MB of disk, "
            f"output {self.output_kb} KB a cell"
        )


@dataclass
class Sandbox:
    """How kernels are started: ``wrap`` turns a kernel's command into a sandboxed one.

    ``kind`` is ``"bwrap"`` or ``"none"``. ``wrap`` returns the command and the
    ``preexec_fn`` to start it with (the resource limits, and the cgroup).
    """

    kind: str
    limits: Limits = field(default_factory=Limits)
    groups: list[Cgroup] = field(default_factory=list)  # made by this grader process

    def wrap(
        self, command: list[str], work: Path, runtime: Path
    ) -> tuple[list[str], Callable[[], None]]:
        if self.kind == "none":
            return command, _no_limits
        group = Cgroup.make(self.limits)
        if group is not None:
            self.groups.append(group)
        command = _inside(command, self.limits)
        return _bwrap_command(command, work, runtime, self.limits), _limiter(self.limits, group)

    def remove_cgroups(self) -> None:
        """Remove the cgroups of this process's sandboxes once they have ended; those
        of other graders running at once are theirs to remove (one still empty, its
        kernel about to enter it, must not go)."""
        for group in self.groups:
            group.remove()
        self.groups.clear()

    def describe(self) -> str:
        if self.kind == "none":
            return (
                "NO SANDBOX: student code runs as you, with your files, the gradebook "
                "and the solutions within reach (--sandbox none)"
            )
        groups = "with cgroup limits" if Cgroup.available() else "with rlimits"
        return f"bubblewrap sandbox {groups}: {self.limits.describe()}"


def choose(kind: str = "auto", limits: Limits | None = None) -> Sandbox:
    """The sandbox to grade in: ``"auto"`` (bubblewrap, or an error saying how to get
    it), ``"bwrap"``, or ``"none"`` (no sandbox, on the instructor's explicit word)."""
    limits = limits or Limits.from_env()
    if kind == "none":
        return Sandbox("none", limits)
    if kind not in ("auto", "bwrap"):
        raise SystemExit(f"error: unknown sandbox {kind!r}: use bwrap or none")
    problem = bwrap_problem()
    if problem:
        raise SystemExit(
            f"error: cannot grade in a sandbox: {problem}.\n"
            "Install bubblewrap (Debian/Ubuntu: sudo apt install bubblewrap; Fedora: "
            "sudo dnf install bubblewrap), or, only if every student is trusted, "
            "grade without one: make autograde SANDBOX=none"
        )
    return Sandbox("bwrap", limits)


def bwrap_problem() -> str | None:
    """None when bubblewrap can start a sandbox here, else what stops it."""
    if sys.platform != "linux":
        return f"bubblewrap needs Linux (this is {sys.platform})"
    if shutil.which("bwrap") is None:
        return "the bwrap program is not installed"
    trial = subprocess.run(
        ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "--", "true"],
        capture_output=True,
        text=True,
    )
    if trial.returncode != 0:
        why = trial.stderr.strip() or f"exit code {trial.returncode}"
        return f"bwrap cannot make a sandbox ({why}; are user namespaces enabled?)"
    return None


def _bwrap_command(command: list[str], work: Path, runtime: Path, limits: Limits) -> list[str]:
    args = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session"]
    args += ["--uid", "1000", "--gid", "1000", "--hostname", "grading"]
    args += _system_mounts() + ["--proc", "/proc", "--dev", "/dev"]
    # The empty folders first, then what is mounted into them (a venv may be in /home).
    args += ["--size", str(256 * 2**20), "--tmpfs", "/tmp"]
    args += ["--size", str(256 * 2**20), "--tmpfs", "/home", "--dir", HOME]
    for path in _python_paths():
        args += ["--ro-bind", path, path]
    # The student's files, read-only, are copied into a folder of limited size.
    args += ["--ro-bind", str(work), SUBMITTED]
    args += ["--size", str(limits.disk_mb * 2**20), "--tmpfs", WORK]
    args += ["--bind", str(runtime), str(runtime), "--chdir", WORK]
    args += ["--clearenv"]
    for name, value in _sandbox_env().items():
        args += ["--setenv", name, value]
    return [*args, "--", *command]


def _system_mounts() -> list[str]:
    """/usr read-only, the usual top-level links to it, and a few files of /etc."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64"):
        path = Path("/") / top
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for name in _ETC:
        if (Path("/etc") / name).exists():
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return args


def _packages() -> list[Path]:
    """The autodiff package this grader runs, and this package, whose ``monitor`` the
    kernel imports (both bound into the sandbox, on its path)."""
    import autodiff

    return [Path(autodiff.__file__).parent, Path(__file__).parent]


def _python_paths() -> list[str]:
    """Python, the virtual environment, and the two packages (read-only)."""
    paths = {sys.base_prefix, sys.prefix, *(str(package) for package in _packages())}
    return sorted(p for p in paths if not p.startswith("/usr/"))


def _sandbox_env() -> dict[str, str]:
    env = {name: os.environ[name] for name in _PASSED_ENV if name in os.environ}
    bin_folder = str(Path(sys.executable).parent)
    return env | {
        # the packages bound in (the grader's own), whichever way they were installed
        "PYTHONPATH": ":".join(dict.fromkeys(str(package.parent) for package in _packages())),
        "HOME": HOME,
        "PATH": f"{bin_folder}:/usr/local/bin:/usr/bin:/bin",
        "IPYTHONDIR": f"{HOME}/.ipython",
        "JUPYTER_CONFIG_DIR": f"{HOME}/.jupyter",
        "JUPYTER_DATA_DIR": f"{HOME}/.local/share/jupyter",
        "MPLCONFIGDIR": f"{HOME}/.config/matplotlib",
        "MPLBACKEND": "Agg",
        "PYTHONNOUSERSITE": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }


def _inside(command: list[str], limits: Limits) -> list[str]:
    """``command``, started by a Python inside the sandbox that first copies the
    student's files into the working folder and limits processes.

    The working folder is an in-memory folder of ``limits.disk_mb``: files written on
    the host's disk could fill it (a file-size limit caps one file, not many).
    RLIMIT_NPROC counts every process of the user, in every user namespace below the
    one it was set in: set before bwrap, the limit would be shared by the instructor's
    own processes and by every sandbox running at once (a notebook that starts 60
    processes would stop another student's kernel from starting). Set inside the
    sandbox's user namespace, it counts that sandbox's processes. (Run as root, the
    kernel does not count processes at all: a cgroup does it there.)"""
    start = (
        "import os, resource, shutil, sys; "
        f"shutil.copytree({SUBMITTED!r}, {WORK!r}, dirs_exist_ok=True); "
        f"resource.setrlimit(resource.RLIMIT_NPROC, ({limits.processes}, {limits.processes})); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    return [sys.executable, "-P", "-c", start, *command]


def _no_limits() -> None:
    pass


def _limiter(limits: Limits, group: Cgroup | None) -> Callable[[], None]:
    """The function Popen runs in the child before bwrap starts: limits, then cgroup."""

    def apply() -> None:
        memory = limits.memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 5))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        size = limits.file_size_mb * 2**20
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if group is not None:
            group.enter()

    return apply


class Cgroup:
    """A cgroup per sandbox, where one can be made (root, cgroup v1 or v2): it caps
    the processes and the memory of the whole sandbox, not of each process.

    The account that grades a hub's class is not root: ``make hub`` hands it a cgroup
    of its own, ``DELEGATED`` (``delegate``), in which it makes its sandboxes' cgroups
    the same way, and nothing else of the machine's."""

    ROOT = oom.ROOT
    DELEGATED = "autodiff-grading"

    def __init__(self, folders: list[Path]):
        self.folders = folders

    @classmethod
    def available(cls) -> bool:
        return bool(cls._bases())

    @classmethod
    def _hierarchies(cls, cores: bool = False) -> list[Path]:
        """pids and memory, and cpu for ``cores`` where it can be (v1 has one folder
        each; v2 one for all); empty where cgroups lack what is needed."""
        if (cls.ROOT / "cgroup.controllers").exists():  # v2
            controllers = (cls.ROOT / "cgroup.controllers").read_text().split()
            return [cls.ROOT] if {"pids", "memory"} <= set(controllers) else []
        bases = [cls.ROOT / "pids", cls.ROOT / "memory"]  # v1
        if cores and (cls.ROOT / "cpu").is_dir():
            bases.append(cls.ROOT / "cpu")
        return [base for base in bases if base.is_dir()]

    @classmethod
    def _bases(cls, cores: bool = False) -> list[Path]:
        """The folders a cgroup is made in: the hierarchies themselves for root, the
        delegated cgroup in each for another account; empty where pids and memory
        cannot both be capped (cpu is left out where it cannot)."""
        if os.geteuid() != 0 and oom.unified():
            # v2 lets a process move only between cgroups below one it may write, and
            # the grading account's server starts in the hub's: not delegated there
            return []
        found = []
        for base in cls._hierarchies(cores):
            folder = base if os.geteuid() == 0 else base / cls.DELEGATED
            if os.access(folder, os.W_OK):
                found.append(folder)
            elif base.name != "cpu":
                return []
        return found

    @classmethod
    def delegate(cls, uid: int, gid: int) -> bool:
        """As root, on cgroup v1: the cgroup ``DELEGATED`` in each hierarchy, given to
        the account ``uid`` (its folder and the files that move processes), so that it
        can make cgroups below it without root. False where it cannot be (no cgroups,
        or v2: see ``_bases``), and grading caps each process with rlimits instead."""
        if os.geteuid() != 0 or not cls._hierarchies():
            return False
        if oom.unified():
            return False
        for base in cls._hierarchies(cores=True):
            folder = base / cls.DELEGATED
            folder.mkdir(exist_ok=True)
            for path in [folder, *(folder / name for name in _DELEGATED_FILES)]:
                if path.exists():
                    os.chown(path, uid, gid)
        return True

    @classmethod
    def existing(cls, name: str) -> Cgroup:
        """The cgroup ``name`` as it is now (its folders that exist; none, if gone)."""
        folders = [base / name for base in cls._hierarchies(cores=True)]
        return cls([folder for folder in folders if folder.is_dir()])

    @classmethod
    def make(cls, limits: Limits, name: str = "") -> Cgroup | None:
        """A new cgroup with ``limits`` (a fresh one named ``name``, if given), or None
        where none can be made."""
        if not cls.available():
            return None
        name = name or f"autodiff-grading-{uuid.uuid4().hex[:12]}"
        folders = []
        try:
            for base in cls._bases(cores=limits.cores > 0):
                folder = base / name
                folder.mkdir(exist_ok=True)
                folders.append(folder)
                cls._write_limits(folder, limits)
        except OSError:
            Cgroup(folders).remove()
            return None
        return cls(folders)

    @staticmethod
    def _write_limits(folder: Path, limits: Limits) -> None:
        memory = str(limits.memory_mb * 2**20)
        period = 100_000  # microseconds; the quota is the CPU time allowed in each
        quota = str(round(limits.cores * period)) if limits.cores > 0 else "max"
        settings = {
            "pids.max": str(limits.processes),
            "memory.max": memory,  # v2
            "memory.limit_in_bytes": memory,  # v1
            "cpu.max": f"{quota} {period}",  # v2, where the cpu controller is on
            "cpu.cfs_period_us": str(period),  # v1
            "cpu.cfs_quota_us": quota if limits.cores > 0 else "-1",
        }
        for name, value in settings.items():
            if (folder / name).exists():
                (folder / name).write_text(value)

    def readable_by(self, gid: int) -> None:
        """Let the group ``gid`` (a student's own) read the cgroup's files, its memory
        limit and how many of its processes were killed for it, and no one else: a
        cgroup's folder is made with the maker's umask (the hub's is 077)."""
        for folder in self.folders:
            os.chown(folder, 0, gid)
            folder.chmod(0o750)

    def enter(self) -> None:
        for folder in self.folders:
            (folder / "cgroup.procs").write_text("0")

    def kill(self) -> None:
        """End every process in the cgroup: those started with ``nohup`` or ``setsid``
        too, which leave their parent's session but never its cgroup."""
        for folder in self.folders:
            if (folder / "cgroup.kill").exists():  # v2 ends them all at once
                (folder / "cgroup.kill").write_text("1")
                continue
            for _ in range(50):  # v1: a process may fork while the others end
                pids = _pids(folder)
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.05)

    def oom_kills(self) -> int:
        """How many of the cgroup's processes Linux killed for its memory limit."""
        return sum(oom.kills(folder) for folder in self.folders)

    def remove(self) -> None:
        for folder in self.folders:
            try:
                folder.rmdir()
            except OSError:
                pass


_DELEGATED_FILES = ("cgroup.procs", "tasks")


def _pids(folder: Path) -> list[int]:
    try:
        return [int(pid) for pid in (folder / "cgroup.procs").read_text().split()]
    except OSError:  # removed meanwhile
        return []


def remove_stale_cgroups() -> None:
    """Remove the empty cgroups that graders killed on the way left behind. Called by
    autograde under its run lock, before any sandbox of the run starts."""
    if Cgroup.available():
        stale = [folder for base in Cgroup._bases() for folder in base.glob("autodiff-grading-*")]
        Cgroup(stale).remove()  # a cgroup still in use is not empty: rmdir refuses it
