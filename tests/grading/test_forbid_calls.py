"""forbid_calls, the watch the assignments' hidden tests use against delegation."""

import concurrent.futures
import contextlib
import inspect
import subprocess
import sys
import textwrap
import threading
import types

import pytest

import autodiff as ad
from autodiff.grading import forbid_calls


def delegate(x):
    return ad.gradients(x * x, [x])


def quietly(function, *args):
    """Run function in a thread, hiding its error as a student's code could."""
    with contextlib.suppress(BaseException):
        function(*args)


def test_a_call_through_an_alias_is_caught():
    from autodiff import gradients as g

    x = ad.tensor(2.0)
    with pytest.raises(AssertionError, match="your code called autodiff.gradients"):
        with forbid_calls(ad.gradients, why="Write it yourself."):
            g(x * x, [x])


def test_the_reason_is_in_the_message():
    x = ad.tensor(2.0)
    with pytest.raises(AssertionError, match="Write it yourself"):
        with forbid_calls(ad.gradients, why="Write it yourself."):
            delegate(x)


def test_an_error_the_code_swallows_still_fails_the_block():
    x = ad.tensor(2.0)
    with pytest.raises(AssertionError, match="your code called"):
        with forbid_calls(ad.gradients):
            with contextlib.suppress(BaseException):
                delegate(x)


def test_switching_the_watch_off_fails_the_block():
    x = ad.tensor(2.0)
    with pytest.raises(AssertionError, match="switched off the call watch"):
        with forbid_calls(ad.gradients):
            sys.setprofile(None)
            delegate(x)


def test_replacing_the_watch_fails_the_block():
    with pytest.raises(AssertionError, match="switched off the call watch"):
        with forbid_calls(ad.gradients):
            sys.setprofile(lambda *args: None)


def test_a_call_from_a_thread_is_caught():
    x = ad.tensor(2.0)
    with pytest.raises(AssertionError, match="your code called autodiff.gradients"):
        with forbid_calls(ad.gradients):
            thread = threading.Thread(target=quietly, args=(delegate, x))
            thread.start()
            thread.join()


def test_a_call_from_a_thread_pool_is_caught():
    x = ad.tensor(2.0)
    with pytest.raises(AssertionError, match="your code called autodiff.gradients"):
        with forbid_calls(ad.gradients):
            with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
                future = pool.submit(delegate, x)
                concurrent.futures.wait([future])  # its error is never looked at


def test_allowed_calls_pass():
    x = ad.tensor(3.0)
    with forbid_calls(ad.gradients):
        y = x * x + ad.sin(x)
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            values = list(pool.map(lambda t: float(t.value), [x, y]))
    assert values == [3.0, float(y.value)]
    (grad,) = ad.gradients(y, [x])  # allowed again after the block
    assert grad.value == pytest.approx(6.0 + float(ad.cos(x).value))


@pytest.mark.parametrize("fails", [False, True])
def test_the_previous_profile_functions_are_restored(fails):
    def outer(frame, event, arg):
        return None

    def outer_threads(frame, event, arg):
        return None

    x = ad.tensor(2.0)
    before = sys.getprofile(), threading.getprofile()
    sys.setprofile(outer)
    threading.setprofile(outer_threads)
    try:
        with contextlib.suppress(AssertionError):
            with forbid_calls(ad.gradients):
                if fails:
                    delegate(x)
        assert sys.getprofile() is outer
        assert threading.getprofile() is outer_threads
    finally:
        sys.setprofile(before[0])
        threading.setprofile(before[1])


def run_again(source: str, name: str, first_line: int = 1):
    """Define a function again from source, in autodiff.gradients' globals, as a
    student could: ``exec(compile(...))`` of the reference's source."""
    namespace = dict(vars(sys.modules["autodiff.gradients"]))
    exec(compile("\n" * (first_line - 1) + source, "<student>", "exec"), namespace)
    return namespace[name]


def same_code_elsewhere(function, **changes):
    code = function.__code__.replace(**changes)
    return types.FunctionType(code, function.__globals__, function.__name__, function.__defaults__)


REFERENCE = inspect.getsource(ad.gradients)
COPIES = {
    "line-shifted exec": lambda: run_again(REFERENCE, "gradients", first_line=8),
    "renamed": lambda: run_again(REFERENCE.replace("def gradients(", "def mine("), "mine"),
    "co_firstlineno": lambda: same_code_elsewhere(ad.gradients, co_firstlineno=1000),
    "co_filename": lambda: same_code_elsewhere(ad.gradients, co_filename="mine.py"),
}


@pytest.mark.parametrize("copy", COPIES.values(), ids=COPIES.keys())
def test_a_copy_of_the_reference_is_caught(copy):
    gradients = copy()
    assert gradients is not ad.gradients
    x = ad.tensor(2.0)
    with pytest.raises(AssertionError, match="your code called autodiff.gradients, which"):
        with forbid_calls(ad.gradients):
            gradients(x * x, [x])


def test_a_one_line_rule_written_like_the_library_is_not_caught():
    """Exp.gradient is ``return [output_grad * node]``: a student writes the same,
    and a class of the same name, as assignment 2 asks for Dual."""

    class Exp(ad.Op, register=False):
        def compute(self, x):
            return ad.backend.namespace(x).exp(x)

        def gradient(self, node, output_grad):
            return [output_grad * node]

    x = ad.tensor(1.0)
    y = Exp.apply(x)
    with forbid_calls(ad.ops.elementwise.Exp.gradient):
        (dx,) = ad.gradients(y, [x])
    assert dx.value == pytest.approx(2.718281828459045)


def test_a_forbidden_call_is_named_even_when_what_follows_it_fails():
    """The watch notes the call and the block fails as it ends, with the call as the
    reason, whatever the called code did next (here: an error of its own)."""

    def gradient(self, node, output_grad):  # a forbidden method's copy, called wrongly
        return node.inputs

    gradient.__code__ = ad.ops.linalg.MatMul.gradient.__code__
    with pytest.raises(AssertionError, match="MatMul.gradient, which this exercise asks"):
        with forbid_calls(ad.ops.linalg.MatMul.gradient):
            gradient(None, None, None)  # AttributeError inside, after the call began


def test_the_watch_never_makes_python_switch_profiling_off():
    """Python switches profiling off, in the name of the running function, when a
    profile function raises: for a pasted copy (notebook code) the grading monitor
    would take that for the student switching the watch off. The watch never raises.
    (In a process of its own: an audit hook stays for the life of its process.)"""
    program = textwrap.dedent(
        """
        import inspect, sys, textwrap
        import autodiff as ad
        from autodiff.grading import forbid_calls

        callers = []
        def audit(event, args):
            if event == "sys.setprofile":
                callers.append(sys._getframe(1).f_code.co_filename)
        sys.addaudithook(audit)
        source = textwrap.dedent(inspect.getsource(ad.ops.linalg.MatMul.gradient))
        pasted = {}
        exec(compile(source, "<answer cell>", "exec"), vars(ad.ops.linalg), pasted)
        try:
            with forbid_calls(ad.ops.linalg.MatMul.gradient):
                pasted["gradient"](None, None, None)
        except AssertionError as error:
            print("failed:", error)
        print("callers:", callers)
        """
    )
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert "failed: your code called autodiff.ops.linalg.MatMul.gradient" in ran.stdout, ran
    assert "<answer cell>" not in ran.stdout.split("callers:")[1], ran.stdout
