"""The grading sandbox: what a student's kernel can see, reach and use.

Each test runs a small notebook through ``execute.execute`` (what ``make autograde``
runs for every submission) in bubblewrap and reads back what the kernel saw, or
which limit it hit. The course folder, the instructor's home and a server on the
host's loopback are all things the kernel must not reach.
"""

import inspect
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import nbformat
import pytest
from system_parts import require

from classroom import sandbox as sandboxing
from classroom.execute import execute

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module", autouse=True)
def bubblewrap():
    require(sandboxing.bwrap_problem(), "apt install bubblewrap (Debian/Ubuntu)")


def _meta(**fields):
    nbgrader = {"grade": False, "locked": False, "schema_version": 3, "solution": False}
    return {"nbgrader": {**nbgrader, "task": False, **fields}}


def run(tmp_path, *sources, limits=None, files=None, tests=()):
    """Run cells (a test cell for each index in ``tests``) in the sandbox; returns the
    executed notebook and each cell's printed text."""
    notebook = nbformat.v4.new_notebook()
    for index, source in enumerate(sources):
        meta = _meta(grade_id=f"c{index}")
        if index in tests:
            meta = _meta(grade_id=f"t{index}", grade=True, locked=True, points=1)
        notebook.cells.append(nbformat.v4.new_code_cell(source, metadata=meta))
    nbformat.write(notebook, tmp_path / "nb.ipynb")
    folder = tmp_path / "student"
    folder.mkdir(exist_ok=True)
    for name, text in (files or {}).items():
        (folder / name).write_text(text)
    box = sandboxing.Sandbox("bwrap", limits or sandboxing.Limits())
    ran = execute(tmp_path / "nb.ipynb", folder, tmp_path / "out.ipynb", box)
    printed = [_text(cell) for cell in ran.cells]
    return ran, printed


def _text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", "") or f"{out.get('ename', '')}: {out.get('evalue', '')}")
    return "".join(parts)


def test_the_kernel_sees_its_own_folder_and_nothing_of_the_course(tmp_path, monkeypatch):
    monkeypatch.setenv("NBGRADER_DB_URL", "postgresql://grader:secret@db/course")
    secret = tmp_path / "gradebook.db"
    secret.write_text("grades")
    home = str(Path.home())
    probe = (
        "import os, pathlib\n"
        "print(os.getcwd(), sorted(os.listdir('.')))\n"
        f"print('course', os.path.exists({str(tmp_path)!r}), os.path.exists({str(secret)!r}))\n"
        f"print('home', sorted(os.listdir({home!r})) if os.path.isdir({home!r}) else [])\n"
        "print('env', 'NBGRADER_DB_URL' in os.environ, os.environ['HOME'])\n"
    )
    write = "open('mine.txt', 'w').write('changed'); print(open('data.csv').read())"
    outside = (
        "import autodiff, pathlib\n"
        "target = pathlib.Path(autodiff.__file__).parent / 'planted.py'\n"
        "try:\n    target.write_text('x = 1')\nexcept OSError as error:\n"
        "    print('refused', error.strerror)"
    )
    _, printed = run(tmp_path, probe, write, outside, files={"data.csv": "1,2", "mine.txt": "v1"})
    assert printed[0].splitlines()[0] == "/home/student/work ['data.csv', 'mine.txt']"
    assert "course False False" in printed[0]
    # Python may live under the instructor's home: then only its own folder is there.
    listed = printed[0].split("home ", 1)[1].splitlines()[0]
    assert set(eval(listed)) <= {".pyenv", ".local"}
    assert "env False /home/student" in printed[0]
    assert printed[1].strip() == "1,2"
    assert (tmp_path / "student" / "mine.txt").read_text() == "v1"  # a private copy changed
    assert "refused Read-only file system" in printed[2]
    assert not (Path(__import__("autodiff").__file__).parent / "planted.py").exists()


def test_no_network_not_even_the_hosts_loopback(tmp_path):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    reached = []

    def wait_for_a_connection():
        try:
            reached.append(server.accept())
        except OSError:  # the server closed at the end of the test: nobody came
            pass

    threading.Thread(target=wait_for_a_connection, daemon=True).start()
    probe = (
        "import socket\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
        "    print('connected')\n"
        "except OSError as error:\n    print('refused', error.errno)\n"
        "try:\n    socket.getaddrinfo('pypi.org', 443)\n    print('resolved')\n"
        "except OSError:\n    print('no names')"
    )
    _, printed = run(tmp_path, probe)
    server.close()
    assert "refused" in printed[0] and "no names" in printed[0]
    assert reached == []


def test_what_a_notebook_starts_ends_with_it(tmp_path):
    marker = f"autodiff-sandbox-{os.getpid()}"
    start = f"import subprocess\nsubprocess.Popen(['sh', '-c', 'exec -a {marker} sleep 300'])"
    run(tmp_path, start, "print('done')")
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert found.stdout == ""


@pytest.mark.parametrize(
    "limits, source, name",
    [
        (
            sandboxing.Limits(memory_mb=1536),  # an idle kernel takes ~0.9 GB of addresses
            "import numpy as np\nblock = np.ones(2**29)",  # 4 GiB
            "the memory limit (1.5 GB)",
        ),
        (
            sandboxing.Limits(processes=16),
            "import os, time\nkids = []\nfor _ in range(64):\n"
            "    pid = os.fork()\n    if pid == 0:\n        time.sleep(5)\n        os._exit(0)\n"
            "    kids.append(pid)",
            "the process limit (16)",
        ),
        (
            sandboxing.Limits(open_files=64),
            "files = [open(f'f{i}', 'w') for i in range(200)]",
            "the open-files limit (64)",
        ),
        (
            sandboxing.Limits(file_size_mb=1),
            "open('big', 'wb').write(b'x' * 3 * 2**20)",
            "the file-size limit (1 MB)",
        ),
        (
            sandboxing.Limits(disk_mb=64),
            "for i in range(4):\n    open(f'part{i}', 'wb').write(b'x' * 30 * 2**20)",
            "the disk limit (64 MB)",
        ),
        (
            sandboxing.Limits(output_kb=64),
            "for i in range(4000):\n    print('x' * 100)",
            "the output limit (64 KB a cell) was hit",
        ),
        (
            sandboxing.Limits(cpu_seconds=3),
            "while True:\n    pass",
            "the CPU-time limit (3 s)",
        ),
    ],
    ids=["memory", "processes", "open-files", "file-size", "disk", "output", "cpu-time"],
)
def test_each_limit_is_reported_by_name(tmp_path, monkeypatch, limits, source, name):
    monkeypatch.setenv("GRADING_CELL_TIMEOUT", "30")
    ran, printed = run(tmp_path, source, "print('next cell ran')", limits=limits)
    assert name in ran.metadata["autodiff"]["limits_hit"]
    assert "next cell ran" in printed[1]  # grading went on


def test_a_kernel_killed_for_its_memory_is_told_so_in_words(tmp_path, monkeypatch):
    """Past its cgroup's memory (the files it wrote to its in-memory folder count, and
    address-space rlimits do not see them), the kernel is killed: the cell says the
    notebook used more than the limit, the limit is named, and grading goes on."""
    if not sandboxing.Cgroup.available():
        pytest.skip("cgroups are made only when run as root with cgroups writable")
    monkeypatch.setenv("GRADING_CELL_TIMEOUT", "60")
    ballast = "for i in range(5):\n    open(f'ballast{i}', 'wb').write(b'x' * 220 * 2**20)"
    grow = "import numpy as np\nblock = np.ones(60 * 2**20)"  # 480 MB more: past 1.5 GB
    limits = sandboxing.Limits(memory_mb=1536, disk_mb=2048)
    ran, printed = run(tmp_path, ballast + "\n" + grow, "print('next cell ran')", limits=limits)
    expected = "the notebook used more than 1.5 GB of memory, the limit, so its kernel was stopped"
    assert expected in printed[0], f"the cell said {printed[0]!r}"
    assert "the memory limit (1.5 GB)" in ran.metadata["autodiff"]["limits_hit"]
    assert "next cell ran" in printed[1]


def test_a_grader_in_a_smaller_cgroup_names_that_limit(tmp_path):
    """A grader in a container or pod whose memory is capped below the sandbox's
    (its sandboxes get rlimits only, no cgroup of their own): the kernel past the
    container's memory is killed by it, and the cell names that limit."""
    if not sandboxing.Cgroup.available():
        pytest.skip("cgroups are made only when run as root with cgroups writable")
    container = sandboxing.Cgroup.make(sandboxing.Limits(memory_mb=768, processes=256))
    assert container is not None
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("hog = b'x' * (1200 * 2**20)"),
        nbformat.v4.new_code_cell("print('next cell ran')"),
    ]
    nbformat.write(notebook, tmp_path / "nb.ipynb")
    (tmp_path / "student").mkdir()
    grader = (
        "import sys; from pathlib import Path\n"
        "from classroom import sandbox\n"
        "from classroom.execute import execute\n"
        "sandbox.Cgroup.make = classmethod(lambda cls, limits, name='': None)  # rlimits only\n"
        "box = sandbox.Sandbox('bwrap', sandbox.Limits(memory_mb=4096))\n"
        "folder = Path(sys.argv[1])\n"
        "execute(folder / 'nb.ipynb', folder / 'student', folder / 'out.ipynb', box)\n"
    )
    enter = "".join(f"echo $$ > {folder}/cgroup.procs; " for folder in container.folders)
    try:
        ran = subprocess.run(
            ["sh", "-c", f'{enter}exec "$@"', "sh", sys.executable, "-c", grader, str(tmp_path)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        container.kill()
        container.remove()
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    printed = [_text(cell) for cell in out.cells]
    expected = "the notebook used more than 768 MB of memory, the limit, so its kernel was stopped"
    assert expected in printed[0], f"the cell said {printed[0]!r}"
    assert "the memory limit (768 MB)" in out.metadata["autodiff"]["limits_hit"]
    assert "next cell ran" in printed[1]


def test_a_pasted_copy_costs_only_the_test_that_forbids_it(tmp_path):
    """An answer holding a pasted copy of MatMul.gradient: the test that forbids it
    fails (as calling the library's would), and the tests after it are graded as
    usual, not marked as tampering."""
    import autodiff as ad

    pasted = textwrap.dedent(inspect.getsource(ad.ops.linalg.MatMul.gradient))
    answer = "import autodiff as ad\nfrom autodiff.ops.linalg import matmul\n\n" + pasted
    forbidding = (
        "from autodiff.grading import forbid_calls\n"
        "with forbid_calls(ad.ops.linalg.MatMul.gradient):\n"
        "    gradient(None, None, None)  # the student's function, which is the copy\n"
    )
    ran, printed = run(tmp_path, answer, forbidding, "assert 1 + 1 == 2", tests=(1, 2))
    verdicts = [cell.metadata.get("autodiff", {}) for cell in ran.cells]
    assert verdicts[1]["verdict"] == "failed", verdicts[1]
    assert "MatMul.gradient, which this exercise asks you to write" in printed[1], printed[1]
    assert verdicts[2] == {"verdict": "passed"}, f"the later test: {verdicts[2]}"
    assert ran.metadata["autodiff"]["tampering"] == []


def test_verdicts_come_from_the_grader(tmp_path):
    """A test passes when it raises nothing; a value it shows is not partial credit,
    and a warning on stderr is not a failure."""
    ran, _ = run(
        tmp_path,
        "def f(x):\n    return 2 * x",
        "assert f(2) == 4",
        "assert f(2) == 5, 'f(2) should be 5'",
        "import sys\nprint('careful', file=sys.stderr)\nf(1)",
        tests=(1, 2, 3),
    )
    verdicts = [cell.metadata.get("autodiff") for cell in ran.cells]
    assert verdicts[1] == {"verdict": "passed"}
    assert verdicts[2] == {"verdict": "failed", "error": "AssertionError"}
    assert verdicts[3] == {"verdict": "passed"}
    kinds = [out.output_type for out in ran.cells[3].outputs]
    assert "execute_result" not in kinds and "stream" in kinds


def test_no_sandbox_only_when_asked_and_said_loudly():
    box = sandboxing.choose("none")
    assert box.kind == "none" and box.describe().startswith("NO SANDBOX")
    with pytest.raises(SystemExit, match="unknown sandbox 'docker-ish'"):
        sandboxing.choose("docker-ish")


def test_validate_prints_each_tests_verdict(tmp_path, capsys, monkeypatch):
    from classroom import __main__ as grading_main

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("x = 2", metadata=_meta(grade_id="setup")),
        nbformat.v4.new_code_cell(
            "assert x == 2", metadata=_meta(grade_id="ok", grade=True, locked=True, points=1)
        ),
        nbformat.v4.new_code_cell(
            "assert x == 3", metadata=_meta(grade_id="bad", grade=True, locked=True, points=1)
        ),
    ]
    nbformat.write(notebook, tmp_path / "mine.ipynb")
    monkeypatch.chdir(tmp_path)  # anywhere, not only in a course
    assert grading_main.main(["validate", "mine.ipynb"]) == 1
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert lines == [["ok", "passed"], ["bad", "failed", "AssertionError"]]


def test_a_link_in_a_submission_brings_nothing_in(tmp_path):
    secret = tmp_path / "instructor-only.txt"
    secret.write_text("the answers")
    (tmp_path / "student").mkdir()
    (tmp_path / "student" / "notes.txt").symlink_to(secret)
    _, printed = run(tmp_path, "import os\nprint(sorted(os.listdir('.')))")
    assert printed[0].strip() == "[]"


def test_an_error_that_ipython_does_not_show_still_fails_the_test(tmp_path):
    # IPython's run_code swallows bdb.BdbQuit without an error output
    answer = "def square(x):\n    raise __import__('bdb').BdbQuit"
    ran, _ = run(tmp_path, answer, "assert square(3) == 9", "assert True", tests=(1, 2))
    assert ran.cells[1].metadata["autodiff"]["verdict"] == "failed"
    # nbgrader scores by error outputs: there must be one
    assert [out.output_type for out in ran.cells[1].outputs] == ["error"]
    assert ran.cells[2].metadata["autodiff"] == {"verdict": "passed"}


def test_feedback_names_only_known_errors(tmp_path):
    # a class name of the student's choosing could carry a hidden test, encoded
    answer = "class HGEZDGNBVGY3TQOJQ(Exception):\n    pass"
    tests = (
        "raise HGEZDGNBVGY3TQOJQ()",
        "assert False",
        "import numpy; numpy.linalg.inv(0 * numpy.eye(2))",
    )
    ran, _ = run(tmp_path, answer, *tests, tests=(1, 2, 3))
    errors = [cell.metadata["autodiff"].get("error") for cell in ran.cells[1:]]
    assert errors == ["an error", "AssertionError", "LinAlgError"]


def test_a_kernel_launcher_in_the_folder_is_not_the_kernel(tmp_path):
    fake = (
        "import sys; sys.path.pop(0)\n"
        "import IPython.core.interactiveshell as m\n"
        "m.InteractiveShell.showtraceback = lambda *a, **k: None\n"
        "from ipykernel import kernelapp; kernelapp.launch_new_instance()\n"
    )
    files = {"ipykernel_launcher.py": fake}
    ran, _ = run(tmp_path, "x = 1", "assert x == 2", files=files, tests=(1,))
    assert ran.cells[1].metadata["autodiff"]["verdict"] == "failed"


# An answer that plants a monitor of its own in the working folder, then crashes
# the kernel so that the next one imports it: it would sign "clean" and hide errors.
PLANT = '''
FAKE = """
import hmac
_k = {}
def start(key=''):
    _k['k'] = key
    import IPython.core.interactiveshell as m
    m.InteractiveShell.showtraceback = lambda *a, **k: None
def check(nonce):
    sig = hmac.new(_k['k'].encode(), (nonce + ' []').encode(), 'sha256').hexdigest()
    print('AUTODIFF-CHECK', nonce, '[]', sig)
"""
import os
if not os.path.exists('classroom'):
    os.makedirs('classroom')
    open('classroom/__init__.py', 'w').close()
    open('classroom/monitor.py', 'w').write(FAKE)
    os._exit(1)
'''


def test_a_package_planted_in_the_folder_does_not_replace_the_monitor(tmp_path):
    ran, _ = run(tmp_path, PLANT, "assert False", tests=(1,))
    assert ran.cells[1].metadata["autodiff"]["verdict"] == "failed"


def test_the_process_limit_is_set_inside_the_sandbox(monkeypatch, tmp_path):
    # Set before bwrap, RLIMIT_NPROC counts all of the user's processes, those of
    # other sandboxes running at once too; set inside, only the sandbox's own.
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    box = sandboxing.Sandbox("bwrap", sandboxing.Limits(processes=7))
    command, _ = box.wrap(["python", "-m", "kernel"], tmp_path, tmp_path)
    inside = command[command.index("--") + 1 :]
    assert "RLIMIT_NPROC, (7, 7)" in inside[3] and inside[4:] == ["python", "-m", "kernel"]


def test_a_star_import_costs_only_the_tests_it_can_change(tmp_path):
    """``from numpy import *`` hides the builtins ``all``, ``abs``...: a test calling
    one of them is not run (np.all of a generator is always true), the others are."""
    ran, _ = run(
        tmp_path,
        "from numpy import *\ndef f(x):\n    return 2 * x",
        "assert f(2) == 4",
        "assert all(f(x) == 2 * x for x in range(3))",
        tests=(1, 2),
    )
    assert ran.cells[1].metadata["autodiff"] == {"verdict": "passed"}
    assert ran.cells[2].metadata["autodiff"]["verdict"] == "tampered"
    assert "hides the builtin all" in ran.cells[2].metadata["autodiff"]["findings"][0]


def test_a_notebook_of_many_chatty_cells_is_cut_too(tmp_path):
    """Each cell under its own limit, but many of them: the notebook's total is
    capped as well (at 16 cells' worth), so the grader's memory is."""
    chatty = "print('x' * 50_000)"
    ran, printed = run(tmp_path, *[chatty] * 24, limits=sandboxing.Limits(output_kb=64))
    hits = ran.metadata["autodiff"]["limits_hit"]
    assert any("output limit of a notebook" in hit for hit in hits)
    assert sum(len(text) for text in printed) < 17 * 64 * 1024


@pytest.mark.parametrize(
    "answer, finding",
    [
        (
            "import sys\nsys.path.insert(0, '')",
            "sys.path looks in the notebook's folder before installed packages",
        ),
        (
            "import sys\nclass Finder:\n    def find_spec(self, name, path, target=None):\n"
            "        return None\nsys.meta_path.insert(0, Finder())",
            "an importer was added to sys.meta_path",
        ),
    ],
    ids=["sys.path", "meta_path"],
)
def test_the_notebooks_own_modules_cannot_stand_in_for_the_tests(tmp_path, answer, finding):
    ran, _ = run(tmp_path, answer, "import json\nassert json.loads('1') == 1", tests=(1,))
    verdict = ran.cells[1].metadata["autodiff"]
    assert verdict["verdict"] == "tampered"
    assert any(finding in text for text in verdict["findings"])


def test_a_graders_cgroups_go_with_it(tmp_path, monkeypatch):
    """Run as root, each sandbox gets a cgroup; the grader that made it removes it
    when the notebook is done (and only its own: another grader's may be in use)."""
    if not sandboxing.Cgroup.available():
        pytest.skip("cgroups are made only when run as root with cgroups writable")
    made = []
    real = sandboxing.Cgroup.make
    monkeypatch.setattr(
        sandboxing.Cgroup, "make", lambda limits: made.append(real(limits)) or made[-1]
    )
    run(tmp_path, "import os; os._exit(1)", "print('restarted')")  # two sandboxes
    assert len(made) == 2
    assert all(not folder.exists() for group in made for folder in group.folders)
