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
AssertionError: your code called autodiff.gradients.gradients, ...
"""

from __future__ import annotations

import inspect
import sys
import threading
import types
from collections.abc import Iterator
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
        codes[code] = f"{function.__module__}.{function.__qualname__}"
    return codes


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
    the code inside it switched the watch off with ``sys.setprofile``.
    """
    codes: dict[types.CodeType, str] = {}
    for target in targets:
        codes.update(_code_objects(target))
    caught: list[str] = []  # shared by every thread the watch runs in

    def message() -> str:
        text = f"your code called {caught[0]}, which this exercise asks you to write"
        return text + (f". {why}" if why else ".")

    def watch(frame: types.FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code in codes and not caught:
            caught.append(codes[frame.f_code])
            sys.setprofile(None)  # the error below must not be watched itself
            raise AssertionError(message())

    previous = sys.getprofile()
    previous_threads = threading.getprofile()
    threading.setprofile(watch)
    sys.setprofile(watch)
    try:
        yield
        switched_off = sys.getprofile() is not watch
    finally:
        sys.setprofile(previous)
        threading.setprofile(previous_threads)
    # an error raised in another thread, or one the code swallowed, ends here
    if caught:
        raise AssertionError(message())
    if switched_off:
        raise AssertionError(
            "your code switched off the call watch (sys.setprofile), which the "
            "tests use to check that you write this exercise yourself."
        )
