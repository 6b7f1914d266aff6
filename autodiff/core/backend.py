"""Where arrays live: NumPy on the CPU, CuPy on the GPU, one code path.

Ops ask for the *array namespace* of their inputs (``xp = namespace(x)``) and call
functions that exist in both (``xp.exp``, ``xp.sum``, ...): that is how one op class
runs on the CPU and on the GPU. CuPy is imported only when a GPU is asked for.

Python numbers stay Python numbers inside graphs, "weak" as NumPy treats them, so that
``2 * x`` never changes the dtype of ``x``: ``numbers`` holds that rule.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import numpy as np

Array = Any  # a numpy.ndarray or a cupy.ndarray
DEVICES = ("cpu", "gpu")
_DEVICE_ALIASES = {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu"}
_cupy = None
# The device new leaves go to when made from lists, numbers or NumPy arrays ("cpu" at
# start; ad.backend.set_default_device, in system/backend.py, changes it).
DEFAULT = {"device": "cpu"}


def import_cupy():
    """Import CuPy on first use, so that ``import autodiff`` never needs it."""
    global _cupy
    if _cupy is None:
        try:
            _cupy = importlib.import_module("cupy")
        except ImportError as exc:
            raise RuntimeError(
                "The 'gpu' device needs CuPy, which is not installed. "
                "Install it with: pip install -e '.[gpu]' (it brings the CUDA 12 libraries; "
                "the machine needs an NVIDIA driver)."
            ) from exc
    return _cupy


NUMBER_TYPES = (int, float, bool)  # Python's numbers: weak, dtype-less (NEP 50)


def is_weak_scalar(x: Any) -> bool:
    """True for Python numbers, which NumPy treats as dtype-less ("weak")."""
    return type(x) in NUMBER_TYPES


def numbers(values: Sequence[Any], as_arrays: bool = False, device: str | None = None) -> list:
    """The rule for numbers, in one place: ``values`` (an op's inputs, the feeds) with

    * each NumPy scalar (``np.int64(3)``, what indexing or ``.sum()`` gives) as the Python
      number it holds, so that ``x * np.int64(3)`` mixes as ``x * 3`` does;
    * each Python number kept as it is: NumPy treats it as "weak" (NEP 50), so
      ``float32_array * 2.0`` stays float32, where a 0-d float64 array would upcast it;
    * or, with ``as_arrays`` (for ops that call array methods, ``x.sum()``, and for a
      float fed to a placeholder), each number as a 0-d array, weak still: a float in
      the real dtype of the floating arrays beside it (else NumPy's float64), an int or
      a bool in NumPy's own; on the GPU if an array beside it is (with none beside it:
      on ``device``, else on the CPU).

    >>> numbers([np.int64(3), 2.5])
    [3, 2.5]
    >>> numbers([np.ones(2, "float32"), 2.0], as_arrays=True)[1].dtype
    dtype('float32')
    """
    values = [
        v.item() if isinstance(v, np.generic) and v.dtype.kind in "biuf" else v for v in values
    ]
    if not as_arrays or not any(is_weak_scalar(v) for v in values):
        return values
    arrays = [v for v in values if hasattr(v, "dtype")]
    floating = [v for v in arrays if v.dtype.kind in "fc"]
    dtype = np.finfo(np.result_type(*(v.dtype for v in floating))).dtype if floating else None
    if arrays:
        device = "gpu" if any(device_of(v) == "gpu" for v in arrays) else "cpu"
    return [
        asarray(v, dtype if type(v) is float else None, device or "cpu") if is_weak_scalar(v) else v
        for v in values
    ]


def namespace(*arrays: Any):
    """The array module (numpy or cupy) that the given arrays belong to.

    >>> namespace(np.ones(3)).__name__
    'numpy'
    """
    for x in arrays:
        if type(x) is not np.ndarray and type(x).__module__.startswith("cupy"):
            return import_cupy()
    return np


def normalize_device(device: str | None) -> str:
    """'cpu', 'gpu' (alias 'cuda'); raises for anything else."""
    if device is None:
        return "cpu"
    key = str(device).lower()
    if key not in _DEVICE_ALIASES:
        raise ValueError(f"Unknown device {device!r}: use 'cpu' or 'gpu' (alias 'cuda').")
    return _DEVICE_ALIASES[key]


def device_of(x: Any) -> str:
    """'gpu' for a CuPy array, 'cpu' for anything else."""
    return "gpu" if type(x).__module__.startswith("cupy") else "cpu"


def leaf_device(data: Any, device: str | None) -> str:
    """Where a new leaf goes: the device asked for; else a GPU array stays on the GPU,
    and anything else goes to the default device."""
    if device is not None:
        return normalize_device(device)
    return "gpu" if device_of(data) == "gpu" else DEFAULT["device"]


def asarray(data: Any, dtype: Any = None, device: str | None = None, copy: bool = False) -> Array:
    """An array on ``device`` (default: where ``data`` already is, else the CPU).

    ``copy=True`` always makes a new array, so later changes to ``data`` do not leak in.
    On the GPU, data with no dtype of its own (Python numbers, lists) becomes float32,
    the GPU's working precision; arrays keep their dtype, and ``dtype=`` always wins.
    """
    target = normalize_device(device) if device is not None else device_of(data)
    if target == "gpu":
        cupy = import_cupy()
        if dtype is None and not hasattr(data, "dtype"):
            dtype = _GPU_DEFAULT_DTYPE if _is_floating_data(data) else None
        return cupy.array(data, dtype=dtype) if copy else cupy.asarray(data, dtype=dtype)
    if device_of(data) == "gpu":
        device_checks.before_read()
        data = data.get()
    return np.array(data, dtype=dtype) if copy else np.asarray(data, dtype=dtype)


_GPU_DEFAULT_DTYPE = "float32"


def _is_floating_data(data: Any) -> bool:
    return np.asarray(data).dtype.kind == "f"


class CheckNow:
    """Checks of values on the GPU (are all labels class indices?), made at once: reading
    the flag makes the CPU wait for the GPU. The system layer puts in ``device_checks``
    checks that wait for the next read of a value instead (system/backend.py)."""

    def check(self, failed: Array, error: Exception) -> None:
        if bool(failed):
            raise error

    def before_read(self) -> None:
        """Called before a value is copied off the GPU."""


device_checks = CheckNow()


def check_on_device(failed: Array, error: Exception) -> None:
    """Raise ``error`` if ``failed``, a 0-d bool on the GPU, is true (see CheckNow)."""
    device_checks.check(failed, error)


def to_device(x: Array, device: str) -> Array:
    """Copy an array to 'cpu' or 'gpu' (no copy if it is already there)."""
    return asarray(x, device=device)


def to_numpy(x: Any) -> np.ndarray:
    """A NumPy array with the same values (copied off the GPU if needed)."""
    return asarray(x, device="cpu")


def dtype_of(x: Any):
    """The dtype of an array, or None for a weak Python number."""
    return None if is_weak_scalar(x) else getattr(x, "dtype", None)


def is_floating_array(x: Any) -> bool:
    """True for an array (not a Python number) of a floating-point or complex dtype."""
    dtype = dtype_of(x)
    return dtype is not None and dtype.kind in "fc"


def is_floating(dtype: Any) -> bool:
    """True for float16/32/64 and complex dtypes (the ones derivatives make sense for)."""
    return dtype is None or np.dtype(dtype).kind in "fc"


def result_dtype(*dtypes: Any):
    """The dtype NumPy gives when combining arrays of these dtypes; None stands for a
    Python number, which does not change it (NEP 50). None if all are Python numbers."""
    strong = [d for d in dtypes if d is not None]
    return np.result_type(*strong) if strong else None


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The shape that arrays of these shapes broadcast to (ValueError if they do not).

    >>> broadcast_shapes((3, 1), (4,))
    (3, 4)
    """
    return tuple(np.broadcast_shapes(*shapes))


def empty(shape: tuple[int, ...], dtype: Any, like: Any) -> Array:
    """An uninitialised array on the device of ``like`` (an array, or a list of them)."""
    arrays = like if isinstance(like, (list, tuple)) else [like]
    return namespace(*arrays).empty(shape, dtype=dtype)


def random_normal(shape: tuple[int, ...], dtype: Any, device: str, seed: int) -> Array:
    """Standard normal samples, reproducible from ``seed``, on ``device``."""
    values = np.random.default_rng(seed).standard_normal(shape)
    return asarray(values.astype(dtype), device=device)


def generator(seed: Any = None) -> np.random.Generator:
    """A NumPy random Generator from ``seed`` (None, an int, or a Generator, kept as it is)."""
    return np.random.default_rng(seed)


def random_uniform(shape: tuple[int, ...], dtype: Any, device: str, seed: Any = None) -> Array:
    """Uniform samples in [0, 1) on ``device``; ``seed``: None (fresh), an int, or a
    ``numpy.random.Generator`` (drawn from, so successive calls differ)."""
    values = np.random.default_rng(seed).random(shape)
    return asarray(values.astype(dtype), device=device)


def float_dtype(name: str):
    """The dtype object for a name such as 'float32'."""
    return np.dtype(name)


def index_dtype():
    """The dtype of indices (argmax's output): int64 on every device, as CuPy gives."""
    return np.dtype("int64")


def inf() -> float:
    return float(np.inf)
