"""Docstrings that list a folder's modules or the CLI's commands say what is there: a module added, moved or
removed fails here until its package's list says so (the CLI's docstring once named 12 of 15 commands)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

import attnroute

SRC = Path(attnroute.__file__).parent
# packages whose docstring lists its modules, one per line: 4 spaces, the name(s), 2+ spaces, its job
LISTED = [
    "models",
    "read",
    "read/ground",
    "read/circuits",
    "read/patching",
    "read/corpus",
    "read/experiments",
    "read/speech",
    "show",
    "serve",
    "engine/backends",
    "settings",
]
ENTRY = re.compile(r"^    ([a-z_0-9]+/?(?:, [a-z_0-9]+/?)*)\s{2,}\S", re.M)


def docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""  # as written: cleandoc would dedent


def listed(package: str) -> set[str]:
    return {n.strip() for m in ENTRY.finditer(docstring(SRC / package / "__init__.py")) for n in m.group(1).split(",")}


def present(package: str) -> set[str]:
    folder = SRC / package
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    return modules | {f"{p.name}/" for p in folder.iterdir() if (p / "__init__.py").is_file()}


@pytest.mark.parametrize("package", LISTED)
def test_a_packages_list_names_every_module_it_holds_and_no_other(package):
    assert listed(package) == present(package)


def test_the_listing_test_can_fail(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""A package.\n\n    alpha  the first\n    gone   a module since removed\n"""\n')
    (pkg / "alpha.py").write_text("")
    (pkg / "beta.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    assert listed("pkg") == {"alpha", "gone"} != present("pkg") == {"alpha", "beta"}


def test_the_cli_docstring_names_every_command():
    from attnroute.cli import build_parser

    text = docstring(SRC / "cli" / "__init__.py")
    line = text[text.index("attnroute ") + len("attnroute ") : text.index("\n\n", text.index("attnroute "))]
    named = {w.strip() for w in line.split("|")}
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    assert named == set(commands.choices)


def test_the_learn_docstring_names_every_experiment():
    from attnroute.learn import EXPERIMENTS

    text = docstring(SRC / "learn" / "__init__.py")
    named = set(re.findall(r"^(\w+) {2,}\S", text, re.M))
    assert named == set(EXPERIMENTS)


def test_every_command_has_a_python_function_of_its_name():
    """`attnroute X` is ar.X (a subcommand `learn Y` / `cost Y` is ar.learn_Y / ar.cost_Y); bench and cost bill
    are benchmarks, measured in processes of their own, not library calls."""
    from attnroute.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    names = []
    for name, parser in sub.choices.items():
        inner = [a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction)]
        names += [f"{name}_{s}" for s in inner[0].choices] if inner else [name]
    missing = [n for n in names if n not in attnroute.__all__ and n not in ("bench", "cost_bill")]
    assert missing == []


def test_the_kinds_report_add_lists_are_the_kinds_it_draws():
    """`report --help` listed five kinds for --add while circuit and why results were drawn too: the help, the
    refusal's 'written by' line and the drawing all come from one list."""
    from attnroute.cli import build_parser
    from attnroute.settings import ADD_KINDS
    from attnroute.show.sections import KINDS, VERBS

    assert set(ADD_KINDS) == set(VERBS) and KINDS["add"][0] == tuple(VERBS)
    report = next(a for a in build_parser()._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    add_help = next(a.help for a in report.choices["report"]._actions if "--add" in a.option_strings)
    assert set(re.findall(r"`(\w+)`", add_help)) == set(ADD_KINDS)
    assert all(kind in KINDS["add"][1] for kind in ADD_KINDS)
