"""The visible tests' checks (autodiff/grading/checks.py): what their messages say."""

import linecache

import numpy as np
import pytest

import autodiff as ad
from autodiff.grading import calling, checks, expect, expect_error, expect_true


def message_of(check, *args, **kwargs) -> str:
    with pytest.raises(AssertionError) as caught:
        check(*args, **kwargs)
    return str(caught.value)


def test_a_match_passes_silently():
    expect("f(1)", np.array([1.0, 2.0]), [1.0, 2.0 + 1e-12])
    expect("node", ad.tensor([1.0, 2.0]), [1.0, 2.0], dtype=np.float64)
    expect_true(True, "never shown")


@pytest.mark.parametrize(
    ("got", "want", "diagnosis"),
    [
        ([[1.0, 0.0], [3.0, 4.0]], [[1.0, 3.0], [0.0, 4.0]], "the transpose"),
        ([-1.0, 2.0], [1.0, -2.0], "sign flipped"),
        ([1.0, 2.0], [2.0, 4.0], "half the expected value"),
        ([4.0, 8.0], [2.0, 4.0], "twice the expected value"),
        ([0.0, 0.0], [2.0, 4.0], "all zeros"),
        ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], np.ones((2, 3)), "the expected shape is (2, 3)"),
        ([[1.0, 2.0, 3.0], [0.0, 4.0, -4.0]], [[1, 0], [2, 4], [3, -4]], "the transpose"),
    ],
)
def test_a_mismatch_says_what_came_back_what_was_expected_and_its_shape(got, want, diagnosis):
    text = message_of(expect, "my_call(x)", got, want, hint="Hint: think again.")
    assert text.startswith("my_call(x) returned\n")
    assert "but the expected value is" in text
    assert diagnosis in text
    assert text.endswith("Hint: think again.")
    assert np.array2string(np.asarray(got), separator=", ").splitlines()[0] in text


def test_a_wrong_dtype_and_a_non_number_are_named():
    text = message_of(expect, "f(x32)", np.ones(2), np.ones(2, np.float32), dtype=np.float32)
    assert "Its dtype is float64; the expected dtype is float32." in text
    assert "which is not numbers" in message_of(expect, "f()", "abc", [1.0])
    assert "which is not numbers" in message_of(expect, "f()", None, [1.0])


def as_cell(source: str, name: str, namespace: dict) -> None:
    """Run ``source`` as IPython runs a cell: code of a file of its own, its source in
    linecache."""
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    exec(compile(source, name, "exec"), namespace)


def test_an_error_in_notebook_code_names_the_call_and_the_students_line():
    namespace = {"np": np, "calling": calling}
    as_cell("def rule(g):\n    return np.broadcast_to(g, (2, 3))\n", "<ipython-input-7>", namespace)
    test_cell = "with calling('rule(g)', hint='Hint: axes.'):\n    rule(np.ones(2))\n"
    with pytest.raises(AssertionError) as caught:
        as_cell(test_cell, "<ipython-input-8>", namespace)
    text = str(caught.value)
    assert text.startswith("rule(g) raised ValueError: ")
    assert (
        "The last line of your code that ran, in rule(): return np.broadcast_to(g, (2, 3))" in text
    )
    assert text.endswith("Hint: axes.")
    assert caught.value.__suppress_context__
    # the traceback a student reads: the test cell, then the check; no contextlib
    assert [str(entry.path) for entry in caught.traceback][-2:] == [
        "<ipython-input-8>",
        checks.__file__,
    ]


def test_a_failed_assert_inside_calling_goes_through_unchanged():
    with pytest.raises(AssertionError, match="^the student's own check$"):
        with calling("f()"):
            raise AssertionError("the student's own check")


def test_expect_error_wants_that_error_and_no_other():
    expect_error("f([1], [1, 2])", ValueError, lambda: int("x"))
    text = message_of(expect_error, "f()", ValueError, lambda: 1 / 0, hint="Hint: shapes.")
    assert "f() raised ZeroDivisionError: division by zero; expected ValueError" in text
    assert "f() returned 3; expected it to raise ValueError" in message_of(
        expect_error, "f()", ValueError, lambda: 3
    )


def test_the_test_cell_itself_is_not_named_as_the_students_code():
    # An error raised by the library after the student's code has returned leaves
    # only the test cell's own frame: nothing of the student's to point at.
    cell = "with calling('f()'):\n    raise ValueError('in the library')\n"
    with pytest.raises(AssertionError) as caught:
        as_cell(cell, "<ipython-input-9>", {"calling": calling})
    assert str(caught.value) == "f() raised ValueError: in the library"
