"""The student kit: what students get, made by one command.

``make student-kit`` (``python -m classroom kit``) releases the assignments, then
writes ``dist/autodiff-student-kit/`` and its zip: the lectures, the released
assignments, the ``autodiff`` package (with ``autodiff.grading``, what the notebooks'
tests and a student's server import), and the kit's own README, Makefile and settings
(``deploy/student-kit/``). Nothing of ``classroom``, this package, is in it.

The kit is built from an allow-list (``SHIPPED``), never by copying the course and
deleting what must stay home: a file added to the course reaches students only when
it is named here, or is a module of ``autodiff``, the package students are meant to
read. A shipped module that imports one the kit lacks (``classroom``, say) stops the
build. Before the kit is written, every file in it is searched for the answers and
hidden tests of ``solutions/`` (``find_leaks``), and a kit that holds one is refused.
"""

from __future__ import annotations

import ast
import io
import json
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from .course import assignments

KIT_NAME = "autodiff-student-kit"
TEMPLATES = "deploy/student-kit"  # the kit's own files, copied to its top folder

# What goes in, as patterns in the course root; each names files, never a whole tree.
SHIPPED = [
    "course/*.ipynb",
    "course/README.md",
    # The whole package, in every folder: autodiff.grading too, which the released
    # notebooks import (forbid_calls, the visible tests' checks) and a student's server
    # on the hub runs (the notice of a kernel killed for its memory).
    "autodiff/**/*.py",
    "autodiff/training/datasets/*.npz",
    "autodiff/training/datasets/*.md",
    # What a student reads beside the lectures: the reading order of the engine, the
    # library in full, the system layer, drawing (and its figures).
    "docs/reading-the-code.md",
    "docs/students.md",
    "docs/system.md",
    "docs/lecturers.md",
    "docs/figures/*.svg",
    "pyproject.toml",  # the same package: the kit installs with pip install -e ".[course]"
    "environment.yml",
]

# nbgrader's markers (it looks for them anywhere in a line, as here).
SOLUTION = ("BEGIN SOLUTION", "END SOLUTION")
HIDDEN_TESTS = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def manifest(root: Path) -> dict[str, Path]:
    """Every file of the kit: its path in the kit, and the file it is copied from."""
    files: dict[str, Path] = {}
    for pattern in SHIPPED:
        for source in sorted(root.glob(pattern)):
            files[source.relative_to(root).as_posix()] = source
    for assignment in assignments(root):  # the release: every file nbgrader wrote
        for source in sorted((root / "assignments" / assignment).rglob("*")):
            files[source.relative_to(root).as_posix()] = source
    templates = root / TEMPLATES
    for source in sorted(templates.rglob("*")):
        files[source.relative_to(templates).as_posix()] = source
    # Caches (__pycache__, .ipynb_checkpoints) and other hidden files are never shipped.
    return {
        name: source
        for name, source in files.items()
        if source.is_file()
        and not any(part.startswith((".", "__pycache__")) for part in name.split("/"))
    }


def build(root: Path, out_dir: Path) -> Path:
    """Write the kit into ``out_dir`` (a folder and its zip), replacing an older one.

    Returns the kit's folder; the zip is next to it (``.with_suffix(".zip")``). Nothing
    is written when a shipped module imports one that is not shipped, or when the kit
    would hold a line of an answer or a hidden test.
    """
    files = manifest(root)
    missing = missing_imports(root, files)
    if missing:
        raise SystemExit(
            "error: the student kit would not import: "
            + "; ".join(missing)
            + f". Add the module to SHIPPED in {__name__} or stop importing it"
            + " (classroom is never shipped)."
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".kit-", dir=out_dir))
    try:
        kit = staging / KIT_NAME
        for name, source in files.items():
            (kit / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, kit / name)
        _refuse_leaks(kit, secret_lines(root, files))
        _zip(kit, staging / f"{KIT_NAME}.zip")
        for made in (KIT_NAME, f"{KIT_NAME}.zip"):  # only now is the older kit replaced
            _remove(out_dir / made)
            (staging / made).rename(out_dir / made)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir / KIT_NAME


def _refuse_leaks(kit: Path, secrets: set[str]) -> None:
    leaks = find_leaks(kit, secrets)
    if leaks:
        shown = "\n  ".join(leaks[:10])
        raise SystemExit(
            f"error: the student kit would give away {len(leaks)} lines of solutions/"
            f" (answers or hidden tests); no kit was written:\n  {shown}\n"
            "In assignments/, the release is older than solutions/ (make release) or an"
            " answer is outside nbgrader's markers; elsewhere, take the line out of that file."
        )


def _zip(folder: Path, archive: Path) -> None:
    """The folder as a zip that unpacks into a folder of the same name."""
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                out.write(path, path.relative_to(folder.parent).as_posix())


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


# --- what the kit must import ---------------------------------------------------------


def missing_imports(root: Path, files: dict[str, Path]) -> list[str]:
    """Modules of the package that a shipped module imports but the kit lacks, and
    imports of ``classroom``, which no kit holds (also imports inside functions,
    which ``import autodiff`` alone would not show)."""
    missing = []
    for name, source in files.items():
        if not (name.startswith("autodiff/") and name.endswith(".py")):
            continue
        package = name.rsplit("/", 1)[0].replace("/", ".")
        for module in _imports(ast.parse(source.read_text()), package):
            if module.split(".")[0] == "classroom":
                missing.append(f"{name} imports classroom, which students never get")
            path = _module_file(root, module)
            if path is not None and path not in files:
                missing.append(f"{name} imports {module}, which is not shipped")
    return sorted(set(missing))


def _imports(tree: ast.Module, package: str) -> Iterator[str]:
    """Absolute names of what a module imports; ``from a import b`` gives ``a`` and
    ``a.b``, since ``b`` may be a submodule."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _module_file(root: Path, module: str) -> str | None:
    """The course file that holds ``module`` of the package, or None (not ours, or a
    name inside a module)."""
    if module.split(".")[0] != "autodiff":
        return None
    stem = module.replace(".", "/")
    for candidate in (f"{stem}.py", f"{stem}/__init__.py"):
        if (root / candidate).is_file():
            return candidate
    return None


# --- what the kit must not hold -------------------------------------------------------


def secret_lines(root: Path, files: dict[str, Path]) -> set[str]:
    """The lines of ``solutions/`` that a student must not get, as ``find_leaks`` looks
    for them.

    The rule: a line is secret when it is in an answer (between the solution markers,
    or a whole solution cell without markers, which nbgrader replaces) or a hidden test,
    and it is *distinctive*: stripped, it occurs nowhere in the open material, which is
    every file the kit ships except the released notebooks (the library, the lectures,
    the kit's own files) plus what the instructor notebooks show students. ``pass``,
    ``)``, ``return x`` or ``import autodiff as ad`` are open, so they are not looked
    for; an answer or a hidden test still has lines that are its own (``test_student_kit``
    checks that each one has), and a copy of it is caught by those. The released
    notebooks are not open material: they are what is being checked.
    """
    secret, shown = set(SOLUTION + HIDDEN_TESTS), []
    for notebook in sorted((root / "solutions").glob("*/*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            hidden, open_lines = split_cell(cell)
            secret.update(hidden)
            shown.append("\n".join(open_lines))
    for name, source in files.items():
        if not name.startswith("assignments/"):
            shown.extend(text for _, text in texts(name, source.read_bytes()))
    open_text = "\n".join(shown)
    return {line for line in secret if line and line not in open_text}


def split_cell(cell: dict) -> tuple[list[str], list[str]]:
    """A ``solutions/`` cell's stripped lines: (what the release hides, what it shows)."""
    lines = [line.strip() for line in _source(cell["source"]).splitlines()]
    markers = SOLUTION + HIDDEN_TESTS
    marked = any(marker in line for line in lines for marker in markers)
    if cell.get("metadata", {}).get("nbgrader", {}).get("solution") and not marked:
        return lines, []  # nbgrader replaces the whole cell
    hidden: list[str] = []
    shown: list[str] = []
    inside = False
    for line in lines:
        if any(begin in line for begin in (SOLUTION[0], HIDDEN_TESTS[0])):
            inside = True
        elif any(end in line for end in (SOLUTION[1], HIDDEN_TESTS[1])):
            inside = False
        else:
            (hidden if inside else shown).append(line)
    return hidden, shown


def find_leaks(path: Path, secrets: set[str]) -> list[str]:
    """``where: line`` for every secret line found in a folder's files or a zip,
    looking inside zips and into notebooks' decoded cells."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    leaks: list[str] = []
    for file in files:
        name = file.relative_to(path.parent).as_posix()
        for where, text in texts(name, file.read_bytes()):
            leaks.extend(f"{where}: {line}" for line in sorted(secrets) if line in text)
    return leaks


def texts(name: str, data: bytes) -> Iterator[tuple[str, str]]:
    """The text a file holds, as (where, text) pairs: the file as it is, and for
    JSON (notebooks) every string in it decoded, since JSON escapes quotes and
    newlines; a zip's members one by one."""
    if name.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for member in archive.namelist():
                yield from texts(f"{name}:{member}", archive.read(member))
        return
    text = data.decode("utf-8", errors="replace")
    yield name, text
    if name.endswith((".ipynb", ".json")):
        yield f"{name} (decoded)", "\n".join(_strings(json.loads(text)))


def _strings(value: object) -> Iterator[str]:
    """Every string in a JSON value; a list of strings (a cell's source) as one."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        yield "".join(value)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def _source(source: str | list[str]) -> str:
    return source if isinstance(source, str) else "".join(source)
