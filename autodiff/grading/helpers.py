"""Helpers for the graded tests in the assignments.

An assignment asks a student to write, say, their own ``gradients()``. The
library has a reference ``gradients()``, and a student could simply call it.
A hidden test catches that by running the student's code under
``forbid_calls``: if any forbidden function starts running, even through an
alias such as ``from autodiff import gradients as g``, the test fails with a
message that says what was called.

>>> import autodiff as ad
>>> def my_gradients(y, xs):
...     return ad.gradients(y, xs)          # delegating to the reference
>>> x = ad.tensor(2.0)
>>> with forbid_calls(ad.gradients):  # doctest: +ELLIPSIS
...     my_gradients(x * x, [x])
Traceback (most recent call last):
AssertionError: your code called autodiff.gradients, ...
"""

from __future__ import annotations

import inspect
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def _code_objects(target: Any) -> dict[types.CodeType, str]:
    """The code objects of a function, of every method of a class, or of every
    function and class defined in a module, each with a readable name."""
    codes: dict[types.CodeType, str] = {}
    if inspect.ismodule(target):
        for value in vars(target).values():
            defined_here = getattr(value, "__module__", None) == target.__name__
            if defined_here and (inspect.isfunction(value) or inspect.isclass(value)):
                codes.update(_code_objects(value))
    elif inspect.isclass(target):
        for value in vars(target).values():
            if isinstance(value, staticmethod | classmethod):
                value = value.__func__
            elif isinstance(value, property):
                value = value.fget
            if inspect.isfunction(value):
                codes.update(_code_objects(value))
    else:
        function = inspect.unwrap(target)
        code = getattr(function, "__code__", None)
        if code is None:
            raise TypeError(f"forbid_calls: cannot watch {target!r}; pass Python functions")
        codes[code] = _public_name(function)
    return codes


def _public_name(function: Any) -> str:
    """The name a student knows a function by: ``autodiff.gradients`` where the package
    exports it, else where it is defined (``autodiff.ops.linalg.MatMul.gradient``)."""
    module, name = str(function.__module__), str(function.__qualname__)
    package = module.partition(".")[0]
    exported = getattr(sys.modules.get(package), name, None)
    return f"{package}.{name}" if exported is function else f"{module}.{name}"


# Lines of code from which a copy of a forbidden function is caught too. Shorter
# rules, such as Exp.gradient's ``return [output_grad * node]`` or a Dual's
# ``__neg__``, are what a student writes word for word; only the functions
# themselves are caught there.
SUBSTANTIAL_LINES = 8


def _fingerprint(code: types.CodeType) -> tuple:
    """What a copy of a function keeps however it was made (its source run again
    after blank lines, ``code.replace(co_firstlineno=...)``): its bytecode, the
    names it uses and its constants, nested code compared the same way; not its
    line numbers nor its file."""
    constants = []
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            constants.append(_fingerprint(constant))
        else:
            constants.append((type(constant), constant))
    return code.co_code, code.co_names, tuple(constants)


def _substantial(code: types.CodeType) -> bool:
    lines = {line for _, _, line in code.co_lines() if line is not None}
    return len(lines) >= SUBSTANTIAL_LINES


def _matcher(codes: dict[types.CodeType, str]) -> Callable[[types.CodeType], str | None]:
    """A function telling which forbidden function some running code is: one of
    ``codes`` (equal code objects), or a copy of a substantial one (the same
    fingerprint). It runs on every call in the block, so it looks at the bytecode
    first and remembers its verdict for each code object."""
    by_bytecode: dict[bytes, list[tuple[types.CodeType, tuple | None, str]]] = {}
    for code, name in codes.items():
        fingerprint = _fingerprint(code) if _substantial(code) else None
        by_bytecode.setdefault(code.co_code, []).append((code, fingerprint, name))
    verdicts: dict[int, tuple[types.CodeType, str | None]] = {}

    def match(code: types.CodeType) -> str | None:
        candidates = by_bytecode.get(code.co_code)
        if candidates is None:
            return None
        known = verdicts.get(id(code))
        if known is not None and known[0] is code:
            return known[1]
        found = None
        for forbidden, fingerprint, name in candidates:
            if code == forbidden or (fingerprint and fingerprint == _fingerprint(code)):
                found = name
        verdicts[id(code)] = (code, found)  # code kept alive: its id stays its own
        return found

    return match


@contextmanager
def forbid_calls(*targets: Any, why: str = "") -> Iterator[None]:
    """Fail with ``AssertionError`` if any of ``targets`` runs inside the block.

    Parameters
    ----------
    targets : functions, classes (all their methods) or modules (everything
        defined in them).
    why : a sentence added to the error, saying what to do instead.

    The watch uses ``sys.setprofile``, so it sees a call however the function
    was reached (alias, attribute, method). Library functions that the
    forbidden ones do not call remain free to use. Threads started inside the
    block are watched too (``threading.setprofile``), and the block fails if
    the code inside it switched the watch off with ``sys.setprofile``. A copy of
    a forbidden function (its source run again, its code given another file or
    other line numbers) counts as the function itself.
    """
    codes: dict[types.CodeType, str] = {}
    for target in targets:
        codes.update(_code_objects(target))
    forbidden = _matcher(codes)
    caught: list[str] = []  # shared by every thread the watch runs in

    def message() -> str:
        text = f"your code called {caught[0]}, which this exercise asks you to write"
        return text + (f". {why}" if why else ".")

    # The watch only notes the call, and the block fails when it ends. Raising from
    # a profile function would make Python switch profiling off in the called
    # function's name: for a pasted copy, that is notebook code, and the grading
    # monitor would take it for the student switching the watch off.
    def watch(frame: types.FrameType, event: str, arg: object) -> None:
        if event == "call" and not caught:
            name = forbidden(frame.f_code)
            if name is not None:
                caught.append(name)

    previous = sys.getprofile()
    previous_threads = threading.getprofile()
    threading.setprofile(watch)
    sys.setprofile(watch)
    try:
        yield
        switched_off = sys.getprofile() is not watch
    except Exception:
        if not caught:
            raise
        switched_off = False  # what the forbidden call led to: the call is the reason
    finally:
        sys.setprofile(previous)
        threading.setprofile(previous_threads)
    if caught:
        raise AssertionError(message())
    if switched_off:
        raise AssertionError(
            "your code switched off the call watch (sys.setprofile), which the "
            "tests use to check that you write this exercise yourself."
        )
