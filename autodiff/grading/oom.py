"""Out of memory: how many processes a cgroup lost to its memory limit, and what a
student reads when one of them was their kernel.

Linux kills the biggest process of a cgroup that goes past its memory limit, and
counts it (``oom_kill`` in cgroup v2's ``memory.events``, v1's ``memory.oom_control``).
A kernel killed that way just dies: nothing inside it can say why. Grading reads
the count of the sandbox's cgroup (``classroom.execute``); a student's server on the hub
reads its own (``lab_notice.py``). The student kit ships this file.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def unified() -> bool:
    """Whether this machine's cgroups are v2's single hierarchy (else v1's, one a
    controller)."""
    return (ROOT / "cgroup.controllers").exists()


def own_cgroup() -> Path | None:
    """The folder of the memory cgroup this process is in; None where there is none."""
    v2 = unified()
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if v2 and controllers == "":
                return ROOT / path.lstrip("/")
            if not v2 and "memory" in controllers.split(","):
                return ROOT / "memory" / path.lstrip("/")
    return None


def kills(folder: Path | None) -> int:
    """How many processes the cgroup at ``folder`` lost to its memory limit so far."""
    if folder is None:
        return 0
    for name in ("memory.events", "memory.oom_control"):  # v2, v1
        with contextlib.suppress(OSError, ValueError):
            for line in (folder / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    return 0


def limit(folder: Path | None) -> int | None:
    """The memory limit of the cgroup at ``folder`` in bytes; None where it has none."""
    if folder is None:
        return None
    for name in ("memory.max", "memory.limit_in_bytes"):  # v2 ("max": none), v1
        with contextlib.suppress(OSError, ValueError):
            size = int((folder / name).read_text())
            return size if size < 2**62 else None  # v1's "no limit" is near 2**63
    return None


def in_words(size: int) -> str:
    """A size in bytes as a student reads it: "2 GB", "1.5 GB", "512 MB"."""
    if size >= 2**30:
        return f"{size / 2**30:.3g} GB"
    return f"{size / 2**20:.3g} MB"


def used_too_much(limit: str) -> str:
    """What a student reads when their kernel was killed for its memory."""
    return f"the notebook used more than {limit} of memory, the limit, so its kernel was stopped"
