"""The package reads one way down: no import cycle, no import of another module's
private names, each folder importing only the layers below it, and a line budget for
the files a student reads to learn the engine (tests/project/budget.toml). Imports between the
two packages go one way too: ``classroom`` (the instructor's tooling) imports
``autodiff``, nothing in ``autodiff`` imports ``classroom``, and ``classroom`` has no
import cycle either.

The imports are read from the source with ``ast`` (every import statement, also those
inside functions: a lazy import is still a dependency), not by importing anything.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "autodiff"
CLASSROOM = ROOT / "classroom"


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(path, package): path for path in sorted(package.rglob("*.py"))}


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, str, int]]:
    """(module imported, name taken from it or "", line) for each import of the package."""
    found = []
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, "", node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in known:  # from . import ops: the module itself
                    found.append((submodule, "", node.lineno))
                else:
                    found.append((source, alias.name, node.lineno))
    return [item for item in found if item[0] in known]


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    known = modules(package)
    return {
        name: {target for target, _, _ in imports(name, path, known) if target != name}
        for name, path in known.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path back to its start) per strongly connected group of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []
    for start in sorted(graph):  # Tarjan's algorithm, iteratively
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(group)
    return [_cycle_in(set(group), graph) for group in groups]


def _cycle_in(group: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A path a -> b -> ... -> a through the modules of one strongly connected group."""
    start = min(group)
    path, seen = [start], {start}
    while True:
        targets = sorted(graph[path[-1]] & group)
        if start in targets and len(path) > 1:
            return [*path, start]
        fresh = [t for t in targets if t not in seen]
        nxt = fresh[0] if fresh else targets[0]
        if nxt in seen:  # closes a smaller loop: report that one
            return [*path[path.index(nxt) :], nxt]
        path.append(nxt)
        seen.add(nxt)


def private_imports(package: Path = PACKAGE) -> list[str]:
    known = modules(package)
    found = []
    for name, path in known.items():
        for source, taken, line in imports(name, path, known):
            if taken.startswith("_") and not taken.startswith("__") and source != name:
                where = path.relative_to(package.parent)
                found.append(f"{where}:{line} imports {taken} from {source}")
    return found


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_module_imports_another_modules_private_names():
    found = private_imports()
    assert not found, "\n".join(found)


def imports_of_classroom(package: Path = PACKAGE) -> list[str]:
    """Where a module of the package imports ``classroom``, as ``path:line``."""
    found = []
    for path in modules(package).values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                targets = [node.module or ""]
            else:
                continue
            if any(target.split(".")[0] == "classroom" for target in targets):
                found.append(f"{path.relative_to(package.parent)}:{node.lineno}")
    return found


def test_the_library_never_imports_the_instructors_tooling():
    """Students get autodiff without classroom: an import of it would fail on their side."""
    found = imports_of_classroom()
    assert not found, "autodiff imports classroom at " + ", ".join(found)


def test_classroom_has_no_import_cycle():
    found = cycles(import_graph(CLASSROOM))
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def layers(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each module's floor: 0 imports no other module of the package, and every module
    stands one floor above the highest it imports (defined when there is no cycle)."""
    floor: dict[str, int] = {}

    def floor_of(name: str) -> int:
        if name not in floor:
            floor[name] = 1 + max((floor_of(t) for t in graph[name]), default=-1)
        return floor[name]

    for name in graph:
        floor_of(name)
    return floor


# The core from the bottom up, each module on a higher floor than the one before: the
# Executor needs no op, and the reverse pass needs the ops its rules are written with.
CORE_UPWARDS = [
    "core.backend",
    "core.graph",
    "core.schedule",
    "core.executor",
    "ops",
    "core.gradients",
]


def test_the_core_stands_on_floors_in_reading_order():
    """``pytest -s -k floors`` draws the package's import structure, a floor per line."""
    floor = layers(import_graph())
    print("\nthe package's floors (a module imports only from floors below it):")
    for k in sorted(set(floor.values()), reverse=True):
        names = sorted(n.removeprefix("autodiff.") for n in floor if floor[n] == k)
        print(f"  {k:2d} | {', '.join(names).replace('autodiff', '__init__')}")
    core = [floor[f"autodiff.{name}"] for name in CORE_UPWARDS]
    assert core == sorted(set(core)), dict(zip(CORE_UPWARDS, core, strict=True))


def _write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = folder / "autodiff" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder / "autodiff"


def test_the_checks_find_a_planted_cycle_and_a_private_import(tmp_path):
    package = _write(
        tmp_path,
        {
            "__init__.py": "from . import a\n",
            "a.py": "from .b import thing\n",
            "b.py": "def thing():\n    from .c import _secret\n",
            "c.py": "import autodiff.a\n_secret = 1\n",
            "d.py": "from . import a, b\n",
            "e.py": "def grade():\n    from classroom.kit import build\n",
        },
    )
    assert cycles(import_graph(package)) == [
        ["autodiff.a", "autodiff.b", "autodiff.c", "autodiff.a"]
    ]
    assert private_imports(package) == ["autodiff/b.py:2 imports _secret from autodiff.c"]
    assert imports_of_classroom(package) == ["autodiff/e.py:2"]


# --- the layers, one way up ----------------------------------------------------------

# What each folder of the package may import besides itself: the core only the ops its
# gradient rules are written with, the ops only the core, the system layer both, and the
# layers above them what lies below. Nothing below imports what lies above it.
MAY_IMPORT = {
    "core": {"ops"},
    "ops": {"core"},
    "system": {"core", "ops"},
    "other_ways": {"core", "ops", "system"},
    "training": {"core", "ops", "system"},
    "drawing": {"core", "ops", "system"},
    "grading": {"core"},
}


def folder_of(module: str) -> str | None:
    """The folder of autodiff/ a module is in (None: autodiff/*.py, the public API)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else None


def imports_across_layers(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, targets in sorted(graph.items()):
        folder = folder_of(module)
        for target in sorted(targets):
            other = folder_of(target) or "autodiff/__init__.py"
            if folder is not None and other != folder and other not in MAY_IMPORT[folder]:
                wrong.append(f"{module} imports {target}")
    return wrong


def test_each_folder_imports_only_the_layers_below_it():
    graph = import_graph()
    folders = {folder_of(m) for m in graph} - {None}
    assert folders == set(MAY_IMPORT), f"folders without a rule: {folders - set(MAY_IMPORT)}"
    wrong = imports_across_layers(graph)
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_the_layer_check_finds_an_import_from_above():
    planted = {
        "autodiff.core.gradients": {"autodiff.system.gradient_cache", "autodiff.ops"},
        "autodiff.system.gradient_cache": {"autodiff.core.graph"},
        "autodiff.ops": {"autodiff.core.graph"},
        "autodiff.core.graph": {"autodiff"},
    }
    assert imports_across_layers(planted) == [
        "autodiff.core.gradients imports autodiff.system.gradient_cache",
        "autodiff.core.graph imports autodiff",
    ]


# --- the reading set's line budget --------------------------------------------------------

BUDGET = tomllib.loads(Path(__file__).with_name("budget.toml").read_text())
ONE_SITTING = 1600  # the most lines of the core and ops/elementwise.py a student reads at once
READING = ROOT / "docs" / "reading-the-code.md"


def lines_of(path: str) -> int:
    return len((ROOT / path).read_text().splitlines())


def test_the_reading_set_keeps_its_line_budget():
    """``pytest -s -k budget`` prints each file's lines against its budget."""
    files: dict[str, int] = BUDGET["files"]
    counts = {path: lines_of(path) for path in files}
    width = max(map(len, files))
    print("\nthe reading set's lines (budget: tests/project/budget.toml):")
    for path, allowed in files.items():
        print(f"  {path:<{width}} {counts[path]:>5} / {allowed}")
    print(f"  {'total':<{width}} {sum(counts.values()):>5} / {BUDGET['total']}")
    over = [f"{p}: {counts[p]} lines, budget {files[p]}" for p in files if counts[p] > files[p]]
    assert not over, (
        "the reading set grew past its budget: " + "; ".join(over) + ". Make it smaller, "
        "or raise the budget in tests/project/budget.toml and say why in the commit."
    )
    assert sum(counts.values()) <= BUDGET["total"], f"{sum(counts.values())} lines in all"
    assert BUDGET["total"] <= ONE_SITTING, f"budget.toml's total rose past {ONE_SITTING}"


def test_the_reading_set_is_the_whole_core_and_the_elementwise_ops():
    core = sorted(str(p.relative_to(ROOT)) for p in (PACKAGE / "core").glob("*.py"))
    assert sorted(BUDGET["files"]) == sorted([*core, "autodiff/ops/elementwise.py"])


def test_the_reading_order_gives_every_file_with_its_true_line_count():
    """docs/reading-the-code.md: a row per file, | 1 | `autodiff/core/graph.py` | 595 | ..."""
    rows = re.findall(r"^\| (\d+) \| `([^`]+)` \| (\d+) \|", READING.read_text(), re.MULTILINE)
    assert [path for _, path, _ in rows] == list(BUDGET["files"]), "the order of budget.toml"
    assert [int(k) for k, _, _ in rows] == list(range(1, len(rows) + 1))
    wrong = [f"{p}: says {n}, has {lines_of(p)}" for _, p, n in rows if int(n) != lines_of(p)]
    assert not wrong, "docs/reading-the-code.md's line counts: " + "; ".join(wrong)
