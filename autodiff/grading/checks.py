"""What the visible tests of the assignments use to say what went wrong.

A visible test calls a student's function on an input and compares what came back
with what was expected. When they differ, the message says all three, and names the
mistake when the difference has a common shape (a transpose, a flipped sign, a factor
of two, the wrong shape or dtype):

>>> expect("jacobian(f, [1, 2])", [[1.0, 0.0], [3.0, 4.0]], [[1.0, 3.0], [0.0, 4.0]])
Traceback (most recent call last):
AssertionError: jacobian(f, [1, 2]) returned
  [[1., 0.],
   [3., 4.]]
but the expected value is
  [[1., 3.],
   [0., 4.]]
That is the transpose of the expected value: rows and columns are swapped.

When the student's code raises instead, ``calling`` turns the error into one that
names the call and the last line of the student's own code that ran, so the message
is about their code and not about the library function where the error surfaced.
The helpers' own frames are hidden from IPython's tracebacks (``__tracebackhide__``):
a failing check ends in the test cell that made it.
"""

from __future__ import annotations

import linecache
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core import backend
from ..core.graph import Node


def _in_notebook(filename: str) -> bool:
    """Code from a notebook cell (IPython files each cell's code under one of these)."""
    return filename.startswith("<") or "/ipykernel_" in filename


def _numbers(value: Any, what: str) -> np.ndarray:
    """``value`` as a NumPy array of numbers (a Node gives its value)."""
    __tracebackhide__ = True
    if isinstance(value, Node):
        value = value.value
    try:
        array = backend.to_numpy(value)  # off the GPU too
    except Exception:  # a ragged list, an object that refuses
        array = np.asarray(None)
    if array.dtype.kind not in "biufc":
        raise AssertionError(f"{what} returned {value!r}, which is not numbers")
    return array


def _show(array: np.ndarray) -> str:
    text = np.array2string(array, precision=6, separator=", ", threshold=40)
    return "  " + text.replace("\n", "\n  ")


def _diagnosis(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str:
    """The common shape of a wrong answer, when the difference has one."""

    def close(a: np.ndarray) -> bool:
        return a.shape == want.shape and bool(np.allclose(a, want, rtol=rtol, atol=atol))

    if not np.any(want):
        return ""
    if got.ndim == 2 and close(got.T) and not close(got):
        return "That is the transpose of the expected value: rows and columns are swapped."
    if close(-got):
        return "That is the expected value with its sign flipped."
    for factor, words in ((2.0, "half"), (0.5, "twice")):
        if close(factor * got):
            return f"That is {words} the expected value: a factor is missing or extra."
    if got.shape == want.shape and not np.any(got):
        return "That is all zeros."
    return ""


def expect(
    call: str,
    got: Any,
    want: Any,
    hint: str = "",
    *,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    dtype: Any = None,
) -> None:
    """Fail unless ``got`` (what ``call`` returned) has ``want``'s shape and values,
    and the dtype ``dtype`` when one is given. ``hint`` says which idea to revisit."""
    __tracebackhide__ = True
    got_array, want_array = _numbers(got, call), np.asarray(want)
    problem = ""
    if got_array.shape != want_array.shape:
        problem = f"Its shape is {got_array.shape}; the expected shape is {want_array.shape}."
        transposed = _diagnosis(got_array, want_array, rtol, atol) if got_array.ndim == 2 else ""
        if transposed:
            problem += " " + transposed
        elif got_array.size == want_array.size and got_array.size > 1:
            problem += " (The same number of entries: a reshape, transpose or axis mix-up?)"
    elif dtype is not None and got_array.dtype != np.dtype(dtype):
        problem = f"Its dtype is {got_array.dtype}; the expected dtype is {np.dtype(dtype)}."
    elif not np.allclose(got_array, want_array, rtol=rtol, atol=atol, equal_nan=True):
        problem = _diagnosis(got_array, want_array, rtol, atol)
    else:
        return
    message = f"{call} returned\n{_show(got_array)}\nbut the expected value is\n{_show(want_array)}"
    raise AssertionError("\n".join(line for line in (message, problem, hint) if line))


def expect_true(condition: Any, message: str, hint: str = "") -> None:
    """``assert condition, message`` with a hint on its own line."""
    __tracebackhide__ = True
    if not condition:
        raise AssertionError(f"{message}\n{hint}" if hint else message)


def _where_in_student_code(error: BaseException) -> str:
    """The last line of notebook code (not library code) in the error's traceback."""
    cells = [f for f in traceback.extract_tb(error.__traceback__) if _in_notebook(f.filename)]
    # the first is the test cell that made the call: not the student's code
    own = [frame for frame in cells if frame.filename != cells[0].filename]
    if not own:
        return ""
    frame = own[-1]
    line = (frame.line or linecache.getline(frame.filename, frame.lineno or 0)).strip()
    return f"The last line of your code that ran, in {frame.name}(): {line}"


class calling:  # noqa: N801 (used as a function: ``with calling(...):``)
    """Run the block (a call of the student's code); an error other than a failed
    ``assert`` becomes one that says which call raised what, and where in the
    student's code. (A class, not a generator: no frame of contextlib's in the
    traceback the student reads.)"""

    def __init__(self, call: str, hint: str = ""):
        self.call, self.hint = call, hint

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, trace) -> None:
        if error is None or not isinstance(error, Exception) or isinstance(error, AssertionError):
            return  # nothing raised, a failed assert, or KeyboardInterrupt: as it is
        lines = [
            f"{self.call} raised {type(error).__name__}: {error}",
            _where_in_student_code(error),
            self.hint,
        ]
        raise AssertionError("\n".join(line for line in lines if line)) from None


def expect_error(call: str, error: type[BaseException], run: Callable[[], Any], hint: str = ""):
    """Fail unless ``run()`` raises ``error`` (the error the exercise asks for)."""
    __tracebackhide__ = True
    try:
        result = run()
    except error:
        return
    except Exception as other:
        wrong = f"{call} raised {type(other).__name__}: {other}; expected {error.__name__}"
        raise AssertionError("\n".join(t for t in (wrong, hint) if t)) from None
    text = f"{call} returned {result!r}; expected it to raise {error.__name__}"
    raise AssertionError("\n".join(t for t in (text, hint) if t))
