"""The grading kernel's monitor (classroom.monitor), in real IPython kernels.

Every trick an answer cell could play on the tests runs in a watched kernel, and
the next check must name it; honest work (the instructor's notebooks run top to
bottom, a release whose tests fail, everyday notebook habits) must check clean.
Kernels start in seconds, so the tricks share a few kernels: each trick must add
its own finding to those of the tricks before it.
"""

import hmac
import secrets
from pathlib import Path

import pytest

from classroom import monitor

pytest.importorskip("ipykernel")
manager = pytest.importorskip("jupyter_client.manager")
nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENTS = sorted(p.parent.name for p in (ROOT / "solutions").glob("*/*.ipynb"))
KEY = secrets.token_hex(16)
TIMEOUT = 120  # seconds a cell may take


class Kernel:
    """A fresh IPython kernel with the monitor started, as the grader runs one."""

    def __init__(self, cwd: Path = ROOT):
        self.manager, self.client = manager.start_new_kernel(kernel_name="python3", cwd=str(cwd))
        output, error = self.run(monitor.start_source(KEY), silent=True)
        assert error is None, error

    def run(self, code: str, silent: bool = False) -> tuple[str, str | None]:
        """Run a cell: its stream output, and its error ('Name: message') or None."""
        msg_id = self.client.execute(code, silent=silent)
        output, error = [], None
        while True:
            message = self.client.get_iopub_msg(timeout=TIMEOUT)
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            content = message["content"]
            if message["msg_type"] == "stream":
                output.append(content["text"])
            elif message["msg_type"] == "error":
                error = f"{content['ename']}: {content['evalue']}"
            elif message["msg_type"] == "status" and content["execution_state"] == "idle":
                break
        self.client.get_shell_msg(timeout=TIMEOUT)
        return "".join(output), error

    def answer(self) -> list[str] | None:
        """What a check cell tells the grader: the findings, or None (tampering)."""
        nonce = secrets.token_hex(8)
        output, error = self.run(monitor.check_source(nonce))
        assert error is None, error
        return monitor.read_answer(output, nonce, KEY)

    def check(self) -> list[str]:
        findings = self.answer()
        assert findings is not None, "the check's answer line is missing or badly signed"
        return findings

    def close(self):
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture
def kernel():
    started = Kernel()
    yield started
    started.close()


def play(kernel: Kernel, tricks: list[tuple[str, str]]) -> None:
    """Run each trick as a cell; the next check must add a finding naming it."""
    before = kernel.check()
    assert before == [], f"a fresh kernel: {before}"
    for cell, named in tricks:
        output, error = kernel.run(cell)
        assert error is None, f"{cell!r} failed: {error}"
        findings = kernel.check()
        new = [finding for finding in findings if finding not in before]
        assert any(named in finding for finding in new), f"{cell!r}: {new}"
        before = findings


IPYTHON_HOOKS = [
    (
        "import ast\nclass MyTransformer(ast.NodeTransformer):\n    pass\n"
        "get_ipython().ast_transformers.append(MyTransformer())",
        "an AST transformer was added (MyTransformer)",
    ),
    (
        "def strip(lines):\n    return lines\n"
        "get_ipython().input_transformers_cleanup.append(strip)",
        "an input transformer (cleanup) was added (strip)",
    ),
    (
        "get_ipython().input_transformers_post.append(lambda lines: lines)",
        "an input transformer (post) was added",
    ),
    (
        "def before(info):\n    pass\nget_ipython().events.register('pre_run_cell', before)",
        "a callback of the 'pre_run_cell' event was added (before)",
    ),
    (
        "ip = get_ipython()\nrun_cell = ip.run_cell\n"
        "ip.run_cell = lambda *a, **k: run_cell(*a, **k)",
        "get_ipython().run_cell was replaced",
    ),
    (
        "cls = type(get_ipython())\nrun_code = cls.run_code\n"
        "cls.run_code = lambda *a, **k: run_code(*a, **k)",
        "ipykernel.zmqshell.ZMQInteractiveShell.run_code was replaced",
    ),
    (
        "get_ipython().showtraceback = lambda *a, **k: None",
        "get_ipython().showtraceback was replaced",
    ),
    (
        "get_ipython().set_custom_exc((AssertionError,), lambda *a, **k: None)",
        "get_ipython().custom_exceptions was replaced",
    ),
    (
        "get_ipython().excepthook = lambda *a, **k: None",  # run_code installs it
        "sys.excepthook was replaced",
    ),
    (
        "ip = get_ipython()\nip.display_trap.hook = ip.displayhook.__call__",
        "sys.displayhook was replaced",
    ),
    (
        "kernel = get_ipython().kernel\ndo_execute = kernel.do_execute\n"
        "kernel.do_execute = lambda *a, **k: do_execute(*a, **k)",
        "get_ipython().kernel.do_execute was replaced",
    ),
    (
        "import jupyter_client.session as s\nsend = s.Session.send\n"
        "s.Session.send = lambda *a, **k: send(*a, **k)",
        "jupyter_client.session.Session.send was replaced",
    ),
]
TRACE_AND_AUDIT = [
    # a trace function taken out before the check: the audit hook saw it
    (
        "import sys\ndef tracer(*args):\n    return None\nsys.settrace(tracer)\nsys.settrace(None)",
        "sys.settrace was called by the notebook's code",
    ),
    ("sys.settrace(tracer)", "sys.settrace is set (tracer)"),
    (
        "def profiler(*args):\n    pass\nsys.setprofile(profiler)",
        "sys.setprofile is set (profiler)",
    ),
    ("import threading\nthreading.settrace(tracer)", "threading.settrace is set (tracer)"),
    ("threading.setprofile(profiler)", "threading.setprofile is set (profiler)"),
    ("sys.addaudithook(lambda event, args: None)", "sys.addaudithook was called"),
    (
        "def later():\n    pass\nthreading.Timer(60, later).start()",
        "the notebook's code runs in another thread",
    ),
]
LIBRARIES = [
    ("import builtins\nbuiltins.abs = lambda x: 0", "builtins.abs was replaced"),
    (
        "builtins.AssertionError = type('AssertionError', (Exception,), {})",
        "builtins.AssertionError was replaced",
    ),
    ("__builtins__.__dict__['round'] = lambda *a: 0", "builtins.round was replaced"),
    ("import numpy as np\nnp.allclose = lambda *a, **k: True", "numpy.allclose was replaced"),
    (
        "np.testing.assert_allclose = lambda *a, **k: None",
        "numpy.testing.assert_allclose was replaced",
    ),
    (
        "import numpy._core.numeric as numeric\nnumeric.isclose = lambda *a, **k: True",
        "numpy._core.numeric.isclose was replaced",
    ),
    ("del np.isclose", "numpy.isclose was deleted"),
    (
        "np.array_equal._implementation.__code__ = (lambda *a, **k: True).__code__",
        "numpy.array_equal.__code__ was changed",
    ),
    (
        "np.testing.assert_array_less.__defaults__ = ('', False)",
        "numpy.testing.assert_array_less.__defaults__ was changed",
    ),
    ("import math\nmath.isclose = lambda *a, **k: True", "math.isclose was replaced"),
    ("import autodiff as ad\nad.gradients = lambda *a, **k: []", "autodiff.gradients was replaced"),
    ("ad.Node.__mul__ = lambda a, b: a", "autodiff.core.graph.Node.__mul__ was replaced"),
    ("ad.Node.__eq__ = lambda a, b: True", "autodiff.core.graph.Node.__eq__ was replaced"),
    (
        "import autodiff.grading, contextlib\n"
        "autodiff.grading.forbid_calls = lambda *a, **k: contextlib.nullcontext()",
        "autodiff.grading.forbid_calls was replaced",
    ),
    (
        "import autodiff.grading.helpers as helpers\nhelpers._code_objects = lambda t: {}",
        "autodiff.grading.helpers._code_objects was replaced",
    ),
    (
        "contextlib._GeneratorContextManager.__exit__ = lambda *a: True",
        "contextlib._GeneratorContextManager.__exit__ was replaced",
    ),
    ("import bdb\nbdb.BdbQuit = AssertionError", "bdb.BdbQuit was replaced"),
]
MEMORY = [
    (
        "import ctypes\nx = 123456\nctypes.c_long.from_address(id(x))",
        "ctypes was used to read or write memory (ctypes.cdata)",
    ),
    ("ctypes.string_at(id(x), 8)", "ctypes was used to read or write memory (ctypes.string_at)"),
    ("ctypes.pythonapi.Py_IncRef", "ctypes was used to read or write memory (ctypes.dlsym)"),
    (
        "import gc\nfound = gc.get_referrers(x)",
        "gc was used to reach the interpreter's objects (gc.get_referrers)",
    ),
]
NAMESPACE = [
    (
        "class FakeNumpy:\n    pass\nnp = FakeNumpy()",
        "the notebook's name np no longer refers to numpy",
    ),
    ("zip = lambda *args: []", "the notebook's name zip hides the builtin zip"),
    ("__builtins__ = dict(__builtins__.__dict__)", "the notebook's __builtins__ was replaced"),
    (
        "import sys, types\nsys.modules['numpy'] = types.ModuleType('numpy')",
        "sys.modules['numpy'] was replaced",
    ),
]


@pytest.mark.parametrize(
    "tricks",
    [IPYTHON_HOOKS, TRACE_AND_AUDIT, LIBRARIES, MEMORY, NAMESPACE],
    ids=["ipython-hooks", "trace-and-audit", "libraries", "memory", "namespace"],
)
def test_every_trick_is_named(kernel, tricks):
    play(kernel, tricks)


HONEST_HABITS = [
    "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()",
    "1 / 0",
    "assert False, 'a failing test'",
    "import numpy as np\nnp.testing.assert_allclose(1.0, 2.0)",
    "%load_ext autoreload\n%autoreload 2",
    "import tracemalloc\ntracemalloc.start()\nblocks = [bytes(10) for _ in range(9)]",
    "import warnings\nwith warnings.catch_warnings(record=True):\n    warnings.warn('x')",
    "%prun sum([1, 2])",
    "import sys, io, contextlib\nwith contextlib.redirect_stdout(io.StringIO()):\n    print(1)",
    "from concurrent.futures import ThreadPoolExecutor\n"
    "with ThreadPoolExecutor(2) as pool:\n    total = sum(pool.map(abs, [-1, 2]))",
    "import autodiff as ad\nfrom autodiff.grading import forbid_calls\nx = ad.tensor(2.0)\n"
    "with forbid_calls(ad.gradients):\n    y = x * x\ntry:\n    with forbid_calls(ad.gradients):\n"
    "        ad.gradients(y, [x])\nexcept AssertionError:\n    pass",
    "picture = ad.viz.draw(y)\npicture._repr_svg_()[:10]",  # Graphviz in WebAssembly: ctypes
    "import doctest\ndoctest.run_docstring_examples('>>> 1 + 1\\n2', {})",
    "def sum(values):\n    return 0\nlen = 3",  # shadowing builtins the tests do not need
]


def test_honest_habits_check_clean(kernel):
    assert kernel.check() == []
    for cell in HONEST_HABITS:
        kernel.run(cell)
        assert kernel.check() == [], cell


def test_a_stand_in_for_check_cannot_answer_clean(kernel):
    steps = [
        # the monitor's own functions: check uses sealed copies
        (
            "import classroom.monitor as m\nm.findings_now = lambda: []",
            "monitor.findings_now was replaced",
        ),
        # a transformer that wraps every cell, check cells too
        (
            "import ast\nclass Around(ast.NodeTransformer):\n    def visit_Module(self, node):\n"
            "        node.body.append(ast.parse('seen = 1').body[0])\n        return node\n"
            "get_ipython().ast_transformers.append(Around())",
            "the check cell was changed before it ran",
        ),
        # a wrapper that could take hooks out around the real check
        (
            "real = m.check\ndef check(nonce):\n    return real(nonce)\nm.check = check",
            "check() was called by other code than the check cell",
        ),
    ]
    play(kernel, steps)
    kernel.run("m.check = lambda nonce: print('AUTODIFF-CHECK', nonce, '[]')")
    assert kernel.answer() is None  # unsigned: the grader sees tampering


def test_start_is_once_and_the_key_stays_out_of_the_notebook(kernel):
    kernel.run(monitor.start_source("another key"), silent=True)
    assert kernel.check() == []  # still signed with the first key
    output, _ = kernel.run(
        f"import linecache\nkey = {KEY[:8]!r} + {KEY[8:]!r}\n"
        "print(any(key in line for entry in linecache.cache.values() for line in entry[2]))"
    )
    assert output.strip() == "False"


def test_read_answer_refuses_what_the_kernel_did_not_sign():
    nonce = "n0"
    payload = '["numpy.allclose was replaced"]'
    signature = hmac.digest(KEY.encode(), f"{nonce} {payload}".encode(), "sha256").hex()
    line = f"AUTODIFF-CHECK {nonce} {payload} {signature}"
    assert monitor.read_answer(line, nonce, KEY) == ["numpy.allclose was replaced"]
    assert monitor.read_answer(line + "\n" + line, nonce, KEY) is None  # two answers
    assert monitor.read_answer(line.replace("numpy", "math"), nonce, KEY) is None
    assert monitor.read_answer(f"AUTODIFF-CHECK {nonce} []", nonce, KEY) is None
    assert monitor.read_answer("", nonce, KEY) is None
    assert monitor.read_answer(f"AUTODIFF-CHECK {nonce} []", nonce) == []  # no key


def graded_run(kernel: Kernel, notebook) -> list[str]:
    """Run a notebook as the grader does: a check before every graded test cell
    and after the last cell. Returns the errors of the cells."""
    errors = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        if cell.metadata.get("nbgrader", {}).get("grade"):
            assert kernel.check() == [], f"before cell {index}"
        _, error = kernel.run(cell.source)
        if error:
            errors.append(f"cell {index}: {error}")
    assert kernel.check() == [], "after the last cell"
    return errors


@pytest.mark.notebooks
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_instructor_notebooks_check_clean(assignment):
    """No false positives on honest work, and forbid_calls lets the solutions be."""
    folder = ROOT / "solutions" / assignment
    notebook = nbformat.read(folder / f"{assignment}.ipynb", as_version=4)
    kernel = Kernel(cwd=folder)
    try:
        assert graded_run(kernel, notebook) == []
    finally:
        kernel.close()


@pytest.mark.notebooks
def test_a_release_whose_tests_fail_checks_clean():
    folder = ROOT / "assignments" / "a3_reverse_mode"
    notebook = nbformat.read(folder / "a3_reverse_mode.ipynb", as_version=4)
    kernel = Kernel(cwd=folder)
    try:
        assert graded_run(kernel, notebook)  # the blank answers fail their tests
    finally:
        kernel.close()
