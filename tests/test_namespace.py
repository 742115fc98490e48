"""The public surface changes only on purpose (attention-gym's test_namespaces habit)."""

import ast
import importlib
import pkgutil
import subprocess
import sys
import types
from pathlib import Path

import attnroute

SRC = Path(attnroute.__file__).parent

# Pinned: adding or removing a public name is a decision, made in __init__.py's one list and here, by its digest
# (the names are not written twice: the failure prints them).
PUBLIC_COUNT = 113
PUBLIC_DIGEST = "dbce0f4743fc5bf4"


def _digest(names) -> str:
    import hashlib

    return hashlib.sha256(",".join(sorted(names)).encode()).hexdigest()[:16]


def test_public_surface_is_pinned_and_exports_no_modules():
    from attnroute import _ENGINE, _HOMES, engine

    names = attnroute.__all__
    assert names == list(_HOMES) and len(set(names)) == len(names)
    assert set(_ENGINE) <= set(engine.__all__)  # the engine's names are the engine's own
    assert (len(names), _digest(names)) == (PUBLIC_COUNT, PUBLIC_DIGEST), sorted(names)
    for name in names:
        assert not isinstance(getattr(attnroute, name), types.ModuleType), name


def test_every_package_declares_all_explicitly_and_nothing_is_star_imported():
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text())
        stars = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)]
        assert not stars, f"{path}: star import"
        if path.name == "__init__.py":
            assigned = [
                n
                for n in tree.body
                if isinstance(n, (ast.Assign, ast.AnnAssign))
                and "__all__" in ast.unparse(n.targets[0] if isinstance(n, ast.Assign) else n.target)
            ]
            assert assigned, f"{path}: no explicit __all__"
            root = path == SRC / "__init__.py"  # the root's one list is its _HOMES literal (name -> home)
            literal = (
                isinstance(assigned[0].value, ast.List) or root and ast.unparse(assigned[0].value) == "list(_HOMES)"
            )
            assert literal, f"{path}: __all__ must be a list literal"


def test_each_public_name_has_one_home():
    """Names re-exported by several packages are the same object (one definition, one home)."""
    homes: dict[str, object] = {}
    for info in pkgutil.walk_packages([str(SRC)], "attnroute."):
        if info.ispkg:
            mod = importlib.import_module(info.name)
            for name in mod.__all__:
                obj = getattr(mod, name)
                if name in homes and not isinstance(obj, (int, float, str, tuple, dict)):
                    assert homes[name] is obj, f"{name} means two things ({info.name})"
                homes.setdefault(name, obj)


def test_import_stays_light():
    code = "import sys, attnroute; print('transformers' in sys.modules, 'matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False False"  # transformers loads only when a model is read; matplotlib only to draw


def test_import_loads_no_torch_until_a_name_needs_it():
    code = (
        "import sys, attnroute, attnroute.settings, attnroute.errors, attnroute.progress; a = 'torch' in sys.modules; "
        "attnroute.InputError; b = 'torch' in sys.modules; attnroute.attend; print(a, b, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False False True"


def test_a_subpackage_import_never_replaces_the_public_name_it_shares():
    code = (
        "import attnroute, attnroute.check.audit; from attnroute.check.report import check; "
        "print(attnroute.check is check)"
    )  # a fresh process: the import binds attnroute/check/ on its parent first, before the name is touched
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "True"
