"""The student kit (classroom/kit.py, `make student-kit`): everything a student
needs, nothing of solutions/ (in any file, in the zip, in notebooks' cells) or of the
instructor's classroom/, and its JupyterLab and nbgrader set up for a student: no
formgrader, the course's exchange."""

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

import nbformat
import pytest
from servers import free_port, serving

from classroom import kit as student_kit
from classroom.course import assignments

pytest.importorskip("nbgrader")
ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENTS = assignments(ROOT)
LECTURES = sorted(path.name for path in (ROOT / "course").glob("*.ipynb"))

# Names no kit holds anywhere, whatever the folder ("grading" is checked at the top
# only: autodiff/grading/ ships what notebooks and a student's server import).
FORBIDDEN = {
    "classroom",
    "solutions",
    "submitted",
    "autograded",
    "feedback",
    "downloaded",
    "gradebook.db",
    ".exchange",
    "tests",
    "benchmarks",
    "deploy",
    ".ci",
    ".git",
    ".venv",
    "__pycache__",
    ".ipynb_checkpoints",
    "nbgrader_config.py.orig",
}
# Answers whose every line is open material (the rule in kit.secret_lines): a copy of
# them gives away nothing the kit does not show anyway.
OPEN_ANSWERS = {"finite_differences"}  # the formulas of autodiff/numerical.py
# The plugins a student must not see; the Assignment List stays.
INSTRUCTOR_PLUGINS = {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment"}


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    return student_kit.build(ROOT, tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def secrets() -> set[str]:
    return student_kit.secret_lines(ROOT, student_kit.manifest(ROOT))


def files_in(folder: Path) -> dict[str, bytes]:
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in folder.rglob("*")
        if path.is_file()
    }


def unzip(kit: Path, where: Path) -> Path:
    """The student's first command: the zip unpacked into a folder of the kit's name."""
    with zipfile.ZipFile(kit.with_suffix(".zip")) as archive:
        archive.extractall(where)
    return where / kit.name


def solution_cells(assignment: str) -> list[nbformat.NotebookNode]:
    path = ROOT / "solutions" / assignment / f"{assignment}.ipynb"
    return nbformat.read(path, as_version=4).cells


# --- what is in it --------------------------------------------------------------------


def test_kit_holds_what_a_student_needs(kit):
    files = files_in(kit)
    for name in ["README.md", "Makefile", "nbgrader_config.py", "pyproject.toml"]:
        assert name in files, f"the kit has no {name}"
    assert "environment.yml" in files
    for lecture in LECTURES:
        assert f"course/{lecture}" in files
    for assignment in ASSIGNMENTS:
        name = f"assignments/{assignment}/{assignment}.ipynb"
        assert files[name] == (ROOT / name).read_bytes(), f"{name} is not the release"
    # The package's data (the bundled data sets), as the installed package has it.
    data = [p for p in (ROOT / "autodiff").rglob("*") if p.is_file() and p.suffix in (".npz",)]
    assert data, "the package ships data sets"
    for path in data:
        name = path.relative_to(ROOT).as_posix()
        assert files.get(name) == path.read_bytes(), f"the kit lacks {name}"


def test_every_page_of_the_kit_links_only_to_files_in_it(kit):
    """The kit's README sends students to the reading order; no link of a page in the
    kit leads out of it (to instructors' pages, say)."""
    files = files_in(kit)
    assert "docs/reading-the-code.md" in files
    assert "docs/reading-the-code.md" in files["README.md"].decode()
    for name in [n for n in files if n.endswith(".md")]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", files[name].decode()):
            if "://" in target:
                continue
            linked = (Path(name).parent / target).as_posix()
            resolved = Path(os.path.normpath(linked)).as_posix()
            assert resolved in files, f"{name} links {target}, which the kit lacks"


def test_zip_unpacks_into_the_kit_folder(kit, tmp_path):
    assert files_in(unzip(kit, tmp_path)) == files_in(kit)


def test_kit_holds_nothing_that_stays_with_the_instructor(kit, tmp_path):
    for name in [*files_in(kit), *files_in(unzip(kit, tmp_path))]:
        parts = name.split("/")
        assert not FORBIDDEN & set(parts), f"the kit holds {name}"
        assert parts[0] != "grading", f"the kit holds {name}"
    modules = (ROOT / "autodiff").rglob("*.py")
    package = {m.relative_to(ROOT).as_posix() for m in modules if "__pycache__" not in m.parts}
    assert package <= set(files_in(kit)), "the kit lacks modules of autodiff"
    # Only what a student uses for the class is in autodiff.grading: one more module
    # there reaches every student.
    grading = {name for name in files_in(kit) if name.startswith("autodiff/grading/")}
    assert grading == {
        "autodiff/grading/__init__.py",
        "autodiff/grading/checks.py",
        "autodiff/grading/helpers.py",
        "autodiff/grading/lab_notice.py",  # a student's server on the hub runs it
        "autodiff/grading/oom.py",
    }


def test_package_imports_from_the_kit_folder(kit, tmp_path):
    """What the released notebooks import works, and the instructor tooling is not there."""
    program = (
        "import sys, autodiff, autodiff.grading\n"
        "from autodiff.grading import forbid_calls\n"
        "print(autodiff.__file__)\n"
        "print(sorted(m for m in sys.modules if m.startswith('autodiff.grading')))\n"
        "import importlib.util\n"
        "print(getattr(importlib.util.find_spec('classroom'), 'origin', None))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(kit))
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    where, grading, classroom = done.stdout.splitlines()
    assert Path(where).is_relative_to(kit)
    assert grading == "['autodiff.grading', 'autodiff.grading.checks', 'autodiff.grading.helpers']"
    # None, or the one installed here for the tests: never one in the kit
    assert classroom == "None" or not Path(classroom).is_relative_to(kit)


def test_building_again_replaces_the_older_kit(kit, tmp_path):
    out = kit.parent
    (kit / "left-over.txt").write_text("from an older kit")
    assert student_kit.build(ROOT, out) == kit
    assert not (kit / "left-over.txt").exists()
    assert sorted(path.name for path in out.iterdir()) == [kit.name, f"{kit.name}.zip"]


# --- nothing of solutions/ ------------------------------------------------------------


def test_no_answer_and_no_hidden_test_anywhere_in_the_kit(kit, secrets):
    assert student_kit.find_leaks(kit, secrets) == []
    assert student_kit.find_leaks(kit.with_suffix(".zip"), secrets) == []


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_answer_and_hidden_test_has_lines_to_look_for(secrets, assignment):
    """The rule skips open lines: each answer and hidden test keeps lines of its own."""
    for cell in solution_cells(assignment):
        hidden, _ = student_kit.split_cell(cell)
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if hidden and grade_id not in OPEN_ANSWERS:
            assert set(hidden) & secrets, f"{assignment} {grade_id}: no line to look for"


def without_markers(source: str) -> str:
    """An answer or a test as it would read had nbgrader not removed it."""
    markers = student_kit.SOLUTION + student_kit.HIDDEN_TESTS
    return "\n".join(
        line for line in source.splitlines() if not any(marker in line for marker in markers)
    )


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_checker_finds_answers_planted_in_a_released_notebook(kit, secrets, tmp_path, assignment):
    """Every answer cell of solutions/, its markers taken out, pasted into the kit's
    release: each is found (its own lines, not just the markers)."""
    planted = shutil.copytree(kit, tmp_path / kit.name)
    path = planted / "assignments" / assignment / f"{assignment}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    answers = [
        cell
        for cell in solution_cells(assignment)
        if cell.metadata.get("nbgrader", {}).get("solution")
        and cell.metadata.nbgrader["grade_id"] not in OPEN_ANSWERS
    ]
    for answer in answers:
        notebook.cells.append(nbformat.v4.new_code_cell(without_markers(answer.source)))
    nbformat.write(notebook, path)
    leaks = student_kit.find_leaks(planted, secrets)
    found = {leak.split(": ", 1)[1] for leak in leaks}
    for answer in answers:
        hidden, _ = student_kit.split_cell(answer)
        assert set(hidden) & found, f"{answer.metadata.nbgrader['grade_id']} was not found"
    assert all(leak.startswith(f"{kit.name}/assignments/{assignment}/") for leak in leaks)


def hidden_test_line(secrets: set[str]) -> str:
    """A hidden test line with quotes, which a notebook's JSON escapes."""
    for assignment in ASSIGNMENTS:
        for cell in solution_cells(assignment):
            if student_kit.HIDDEN_TESTS[0] in cell.source:
                hidden, _ = student_kit.split_cell(cell)
                quoted = [line for line in hidden if line in secrets and '"' in line]
                if quoted:
                    return quoted[0]
    raise AssertionError("no hidden test line with quotes")


def test_checker_finds_a_hidden_test_line_in_any_file_and_in_the_zip(kit, secrets, tmp_path):
    line = hidden_test_line(secrets)
    planted = shutil.copytree(kit, tmp_path / kit.name)
    with (planted / "jupyter" / "jupyter_server_config.py").open("a") as file:
        file.write(f"# {line}\n")  # inside another line
    lecture = planted / "course" / LECTURES[0]
    notebook = nbformat.read(lecture, as_version=4)
    code = next(cell for cell in notebook.cells if cell.cell_type == "code")
    code.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=line + "\n"))
    nbformat.write(notebook, lecture)
    assert line.replace('"', '\\"') in lecture.read_text()  # escaped in the file itself
    found = {leak.split(": ", 1)[0] for leak in student_kit.find_leaks(planted, secrets)}
    assert found == {
        f"{kit.name}/jupyter/jupyter_server_config.py",
        f"{kit.name}/course/{LECTURES[0]} (decoded)",
    }

    archive = tmp_path / "planted.zip"
    with zipfile.ZipFile(kit.with_suffix(".zip")) as clean, zipfile.ZipFile(archive, "w") as out:
        for member in clean.namelist():
            data = clean.read(member)
            readme = member == f"{kit.name}/README.md"
            out.writestr(member, data + line.encode() if readme else data)
    found = {leak.split(": ", 1)[0] for leak in student_kit.find_leaks(archive, secrets)}
    assert found == {f"planted.zip:{kit.name}/README.md"}


def course_copy(tmp_path: Path) -> Path:
    """What the kit is built from, in a folder a test may change."""
    root = tmp_path / "course"
    for name in ["autodiff", "course", "assignments", "solutions", "deploy"]:
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ["pyproject.toml", "environment.yml", "nbgrader_config.py"]:
        shutil.copy(ROOT / name, root / name)
    return root


def test_build_refuses_a_release_that_leaks_and_keeps_the_older_kit(tmp_path):
    root, out = course_copy(tmp_path), tmp_path / "dist"
    kit = student_kit.build(root, out)
    before = files_in(kit)
    assignment = ASSIGNMENTS[0]
    name = f"{assignment}/{assignment}.ipynb"
    shutil.copy(root / "solutions" / name, root / "assignments" / name)  # never released
    with pytest.raises(SystemExit, match="would give away .* lines of solutions/"):
        student_kit.build(root, out)
    assert files_in(kit) == before
    assert sorted(path.name for path in out.iterdir()) == [kit.name, f"{kit.name}.zip"]


def test_build_refuses_a_module_that_imports_one_not_shipped(tmp_path):
    root = course_copy(tmp_path)
    init = root / "autodiff" / "grading" / "__init__.py"
    init.write_text(init.read_text() + "from classroom.pipeline import release\n")
    with pytest.raises(SystemExit, match="grading/__init__.py imports classroom, which"):
        student_kit.build(root, tmp_path / "dist")
    assert not (tmp_path / "dist").exists()


# --- the kit's nbgrader and JupyterLab ------------------------------------------------


def released_exchange(where: Path, assignment: str) -> Path:
    """An nbgrader exchange, as the instructor's release leaves it, holding one assignment."""
    exchange = where / "exchange"
    outbound = exchange / "autodiff" / "outbound" / assignment
    outbound.mkdir(parents=True)
    shutil.copy(ROOT / "assignments" / assignment / f"{assignment}.ipynb", outbound)
    (exchange / "autodiff" / "inbound").mkdir()
    return exchange


def test_kit_nbgrader_config_names_the_course_and_the_exchange(kit, tmp_path):
    folder = unzip(kit, tmp_path)
    assignment = ASSIGNMENTS[0]
    env = dict(os.environ, NBGRADER_EXCHANGE=str(released_exchange(tmp_path, assignment)))
    env["JUPYTER_DATA_DIR"] = str(tmp_path / "data")
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", "list"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert f"autodiff {assignment}" in done.stderr  # nbgrader logs the list
    # Without NBGRADER_EXCHANGE: nbgrader's default, where a JupyterHub keeps it.
    del env["NBGRADER_EXCHANGE"]
    program = (
        "from nbgrader.apps import NbGrader\n"
        "app = NbGrader()\n"
        "app.load_config_file()\n"
        "print(app.config.CourseDirectory.course_id, app.config.Exchange.root)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=folder, env=env, capture_output=True, text=True
    )
    assert done.stdout.split() == ["autodiff", "/srv/nbgrader/exchange"], done.stderr


TOKEN = "test-token-for-the-student-kit"


def call(port: int, path: str, form: dict | None = None) -> tuple[int, str]:
    """GET, or POST ``form``, to the lab server; (status, body)."""
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data, headers={"Authorization": f"token {TOKEN}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture
def kit_lab(kit, tmp_path):
    """The unzipped kit's `make lab` on a free port, its exchange in tmp_path. The kit's
    .venv is this test run's environment (no pip install here); -o tells make that it
    is installed."""
    if not (Path(sys.prefix) / "bin" / "jupyter").exists():
        pytest.skip(f"no jupyter in {sys.prefix}")
    folder = unzip(kit, tmp_path)
    (folder / ".venv").symlink_to(sys.prefix)
    exchange = released_exchange(tmp_path, ASSIGNMENTS[0])
    env = dict(os.environ, NBGRADER_EXCHANGE=str(exchange))
    env.update(JUPYTER_RUNTIME_DIR=str(tmp_path / "run"), JUPYTER_DATA_DIR=str(tmp_path / "data"))
    port = free_port()
    args = f"--no-browser --ip=127.0.0.1 --port={port} --ServerApp.token={TOKEN}"
    command = ["make", "-o", ".venv/.installed-course", "lab", f"LAB_ARGS={args}"]
    with serving(command, folder, env, port, tmp_path / "lab.log"):
        yield port, folder, exchange


def test_kit_lab_has_no_instructor_parts(kit_lab):
    port, _, _ = kit_lab
    assert call(port, "/formgrader")[0] == 404
    assert call(port, "/formgrader/api/assignments")[0] == 404
    status, page = call(port, "/lab")
    assert status == 200
    found = re.search(
        r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S
    )
    config = json.loads(found.group(1))
    disabled = set(config["disabledExtensions"])
    assert INSTRUCTOR_PLUGINS <= disabled
    assert "@jupyter/nbgrader:assignment-list" not in disabled
    assert "@jupyter/nbgrader" in {ext["name"] for ext in config["federated_extensions"]}


def test_kit_lab_fetches_and_submits_through_the_exchange(kit_lab):
    """The Assignment List's calls, as the README tells a student to make them."""
    port, folder, exchange = kit_lab
    assignment = ASSIGNMENTS[0]
    status, body = call(port, "/assignments?course_id=autodiff")
    assert status == 200 and json.loads(body)["success"], body
    released = json.loads(body)["value"]
    assert [(a["course_id"], a["assignment_id"]) for a in released] == [("autodiff", assignment)]
    form = {"course_id": "autodiff", "assignment_id": assignment}
    assert call(port, "/assignments/fetch", form)[0] == 200
    assert (folder / assignment / f"{assignment}.ipynb").is_file()
    status, body = call(port, "/assignments/submit", form)
    assert status == 200 and json.loads(body)["success"], body
    submitted = list((exchange / "autodiff" / "inbound").glob(f"*+{assignment}+*/*.ipynb"))
    assert [path.name for path in submitted] == [f"{assignment}.ipynb"]
