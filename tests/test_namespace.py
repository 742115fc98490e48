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
PUBLIC_COUNT = 157  # - transcribe: an internal step (a LoadedModel and features), not a verb; a held object crashed it
PUBLIC_DIGEST = "d28cc0e39deb2e3a"


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


def test_dir_shows_public_names_and_no_module_the_package_imported():
    shown = {n for n in dir(attnroute) if not n.startswith("_")}
    assert shown == set(attnroute.__all__)  # nothing else: no sys, types, nor the subpackages imports bound
    for leaked in ("annotations", "importlib", "sys", "types"):
        assert leaked not in shown


def test_command_names_are_aliases_of_the_older_names_and_learn_has_a_function_per_experiment():
    import inspect

    from attnroute.errors import InputTypeError
    from attnroute.learn import EXPERIMENTS

    assert attnroute.heads is attnroute.read_heads and attnroute.routes is attnroute.route_attribution
    assert attnroute.learn is attnroute.run_experiment
    for name, (_, settings_cls) in EXPERIMENTS.items():
        fn = getattr(attnroute, f"learn_{name}")
        assert set(settings_cls.field_names()) <= set(inspect.signature(fn).parameters)  # help() shows every field
        try:
            fn(no_such_field=1)  # refused before any training: the settings are the experiment's
        except InputTypeError as e:
            assert e.field == "no_such_field"
        else:
            raise AssertionError(f"learn_{name} accepted an unknown field")


def test_every_verbs_settings_and_result_are_public():
    """Every Settings subclass a verb takes and every Result a verb returns is reachable as attnroute.NAME
    (PairSettings and ClipPairSettings are bases of others, not a verb's own)."""
    import attnroute.settings as settings_pkg
    import attnroute.settings.learn as learn_settings
    from attnroute.engine.jsonable import Result

    classes = {
        c.__name__
        for mod in (settings_pkg, learn_settings)
        for c in vars(mod).values()
        if isinstance(c, type) and c.__name__.endswith("Settings") and c.__name__ != "Settings"
    }
    missing = sorted(classes - set(attnroute.__all__) - {"PairSettings", "ClipPairSettings"})
    assert missing == []
    for info in pkgutil.walk_packages([str(SRC / "read")], "attnroute.read."):
        for obj in vars(importlib.import_module(info.name)).values():
            if isinstance(obj, type) and issubclass(obj, Result) and obj is not Result and obj.__module__ == info.name:
                assert obj.__name__ in attnroute.__all__, obj
