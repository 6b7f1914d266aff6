"""``ad.backend`` as users call it: the core's backend (core/backend.py: arrays, devices,
Python numbers) and what a GPU adds around it: the device new leaves go to by default
(``set_default_device``), whether a GPU is here (``gpu_problem``), waiting for it
(``synchronize``), its memory pool (``memory_info``), and checks of values on it that
wait for the next read instead of making the CPU wait at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..core import backend as core
from ..core.backend import *  # noqa: F403  (ad.backend is the core's, and the names below)
from ..core.backend import Array, import_cupy, is_weak_scalar, normalize_device

_kernel_problem: str | None = None  # the test kernel's verdict, once it has run


def get_default_device() -> str:
    """The device of new leaves made from lists, numbers or NumPy arrays ('cpu' at start)."""
    return core.DEFAULT["device"]


def set_default_device(device: str) -> None:
    """Make ``ad.tensor`` and ``ad.constant`` put new leaves on ``device`` by default.

    >>> set_default_device("cpu"); get_default_device()
    'cpu'
    """
    device = normalize_device(device)
    if device == "gpu":
        import_cupy()  # fail now, with the install hint, rather than at the first op
    core.DEFAULT["device"] = device


@contextmanager
def using_device(device: str) -> Iterator[str]:
    """``with using_device("gpu"):`` new leaves default to the GPU inside the block."""
    previous = core.DEFAULT["device"]
    set_default_device(device)
    try:
        yield core.DEFAULT["device"]
    finally:
        set_default_device(previous)


def gpu_problem() -> str | None:
    """Why the 'gpu' device cannot be used here, in words; None when it can. A GPU counts
    once CuPy has compiled (with NVRTC) and run a tiny kernel, checked once per process."""
    global _kernel_problem
    try:
        cupy = import_cupy()
        if cupy.cuda.runtime.getDeviceCount() == 0:
            return "CuPy sees no CUDA device on this machine."
    except Exception as exc:  # no CuPy, or no driver
        return f"{type(exc).__name__}: {exc}"
    if _kernel_problem is None:
        try:
            x = cupy.arange(4, dtype="float32")
            wrong = float((x * x).sum()) != 14.0
            _kernel_problem = "a test kernel gave a wrong sum on the GPU." if wrong else ""
        except Exception as exc:  # typically NVRTC or a CUDA library that is missing
            _kernel_problem = (
                f"CuPy found a GPU but could not compile (with NVRTC) or run a kernel on it "
                f"({type(exc).__name__}: {exc}). The gpu extra installs CuPy with the CUDA "
                f"libraries it needs: pip install -e '.[gpu]'; `nvidia-smi` must show a "
                f"driver for CUDA 12 or newer."
            )
    return _kernel_problem or None


def available_devices() -> list[str]:
    """The devices this machine can run on: always 'cpu', plus 'gpu' where it works."""
    return ["cpu"] if gpu_problem() else ["cpu", "gpu"]


def synchronize() -> None:
    """Wait for the GPU to finish queued work (a no-op without CuPy): GPU calls return
    before the kernels finish, so timings must synchronise first."""
    if "gpu" in available_devices():
        import_cupy().cuda.Device().synchronize()
        core.device_checks.before_read()


def memory_info() -> dict[str, int]:
    """The CuPy memory pool: bytes held by live arrays, and bytes the pool keeps for reuse.

    Freed GPU arrays go back to the pool, not to the driver, so ``held_bytes`` stays
    flat across training steps once the pool has warmed up.
    """
    pool = import_cupy().get_default_memory_pool()
    return {"used_bytes": int(pool.used_bytes()), "held_bytes": int(pool.total_bytes())}


def copy_of(value: Any) -> Any:
    """A copy of an array (on its device); a Python number as it is."""
    return value if is_weak_scalar(value) else value.copy()


class DeferredChecks(core.CheckNow):
    """Checks of values on the GPU that do not wait for it (``core.device_checks``).

    Reading a device flag (are all labels class indices?) makes the CPU wait for the
    GPU, at every step. Instead the flag stays on the device, and the next read of a
    value by the host (``to_numpy``, ``synchronize``) raises its error if it was set.
    Checks with the same message share one flag.
    """

    def __init__(self) -> None:
        self.pending: dict[str, tuple[Array, Exception]] = {}

    def check(self, failed: Array, error: Exception) -> None:
        key = f"{type(error).__name__}: {error}"
        if key in self.pending:
            failed = self.pending[key][0] | failed
        self.pending[key] = (failed, error)

    def before_read(self) -> None:
        """Raise the first check that failed (one read from the GPU for them all)."""
        if not self.pending:
            return
        checks = list(self.pending.values())
        self.pending.clear()
        failed = import_cupy().stack([flag for flag, _ in checks]).get()
        for (_, error), bad in zip(checks, failed, strict=True):
            if bad:
                raise error


deferred = core.device_checks = DeferredChecks()


def check_later(failed: Array, error: Exception) -> None:
    """Raise ``error`` at the next read from the GPU if ``failed`` (a 0-d device bool) is
    true then."""
    core.device_checks.check(failed, error)


@contextmanager
def collected_checks() -> Iterator[dict]:
    """The deferred checks made inside the block, kept apart from the others: a CUDA
    graph's recording sets its flags at each replay, not when it is recorded."""
    outer, deferred.pending = deferred.pending, {}
    try:
        yield deferred.pending
    finally:
        deferred.pending = outer
