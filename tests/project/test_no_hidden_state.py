"""Ops hold no state: nothing passes between ops outside the graph. No module of
``autodiff/ops/`` keeps a dict, list or set at its top level that one call could fill
and another read; a constant table is read-only (``types.MappingProxyType``, a tuple).

(A ``functools.lru_cache`` of read-only constants, such as losses' vectors of ones,
is a cache of what a call would compute anyway, not a hand-over between ops.)
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
from collections.abc import MutableMapping, MutableSequence, MutableSet
from pathlib import Path
from types import ModuleType

import pytest

OPS = Path(__file__).resolve().parents[2] / "autodiff" / "ops"


def mutable_globals(module: ModuleType) -> list[str]:
    """The names ``module`` assigns at its top level to a mutable container (imports,
    which the module does not own, and dunders such as ``__all__`` aside)."""
    found = []
    for statement in ast.parse(inspect.getsource(module)).body:
        if isinstance(statement, ast.Assign):
            targets = statement.targets
        elif isinstance(statement, ast.AnnAssign | ast.AugAssign):
            targets = [statement.target]
        else:
            continue
        for target in targets:
            for node in ast.walk(target):
                if isinstance(node, ast.Name) and not node.id.startswith("__"):
                    value = getattr(module, node.id, None)
                    if isinstance(value, MutableMapping | MutableSequence | MutableSet):
                        found.append(node.id)
    return found


@pytest.mark.parametrize("path", sorted(OPS.glob("*.py")), ids=lambda path: path.name)
def test_no_ops_module_keeps_state_between_calls(path):
    name = "autodiff.ops" + ("" if path.stem == "__init__" else f".{path.stem}")
    found = mutable_globals(importlib.import_module(name))
    assert not found, f"{name} keeps {found} at its top level: ops must hold no state"


def test_the_check_finds_a_planted_dict_and_passes_a_read_only_table(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from types import MappingProxyType\n"
        "from collections import OrderedDict\n"
        "_saved: dict[int, tuple] = {}\n"
        "pending = []\n"
        "recent = OrderedDict()\n"
        "TABLE = MappingProxyType({'f': 1.0})\n"
        "SIZES = (1, 2)\n"
        "__all__ = ['TABLE']\n"
    )
    spec = importlib.util.spec_from_file_location("planted", planted)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert mutable_globals(module) == ["_saved", "pending", "recent"]
