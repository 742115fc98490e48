"""Every name a benchmark imports from attnroute exists — in functions too, where no import of the module
would notice: benchmarks/patching.py imported `bundled_prompts` inside its IOI function after that name had
moved to attnroute.bundled.prompts_path, and the benchmark behind the README's patch row could not run."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[2] / "benchmarks").glob("*.py"))


def _attnroute_imports(path: Path) -> list[tuple[str, str, int]]:
    """(module, name, line) of every `from attnroute… import name` anywhere in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "attnroute":
            found += [(node.module, alias.name, node.lineno) for alias in node.names]
    return found


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_every_attnroute_name_a_benchmark_imports_exists(path):
    assert BENCHMARKS, "no benchmarks found"
    missing = []
    for module, name, line in _attnroute_imports(path):
        mod = importlib.import_module(module)
        if not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")  # a submodule
            except ImportError:
                missing.append(f"{path.name}:{line} from {module} import {name}")
    assert missing == []


def test_the_check_finds_a_moved_name(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from attnroute.promptset import bundled_prompts\n")
    assert _attnroute_imports(bad) == [("attnroute.promptset", "bundled_prompts", 2)]
    assert not hasattr(importlib.import_module("attnroute.promptset"), "bundled_prompts")
