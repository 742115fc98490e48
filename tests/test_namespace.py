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

# Pinned: adding or removing a public name is a decision, made here as well as in __init__.py.
PUBLIC = [
    "IMPLS",
    "attend",
    "choose_impl",
    "UnsupportedRequest",
    "InputError",
    "InputTypeError",
    "Interrupted",
    "project",
    "score",
    "scale_and_mask",
    "normalize",
    "aggregate",
    "Trace",
    "WeightBlock",
    "Mask",
    "causal",
    "document",
    "from_hf",
    "full",
    "padding",
    "predicate",
    "prefix_lm",
    "sliding_window",
    "window_from",
    "window_to",
    "combine_additive",
    "from_additive",
    "from_hf_2d",
    "from_mha",
    "to_additive",
    "to_hf",
    "to_key_padding_mask",
    "to_mha",
    "Probe",
    "RowStats",
    "KeyMass",
    "CallbackProbe",
    "Intervention",
    "ZeroHead",
    "ReplaceOutput",
    "UniformWeights",
    "Temperature",
    "SubstituteWeights",
    "KnockoutEdges",
    "sinusoidal",
    "sinusoidal_shift",
    "LearnedPositions",
    "SinusoidalPositions",
    "RoPE",
    "apply_rope",
    "rope_frequencies",
    "interleaved_to_half_split",
    "half_split_to_interleaved",
    "MultiHeadAttention",
    "FeedForward",
    "Block",
    "TinyConfig",
    "TinyTransformer",
    "KVCache",
    "probsparse_attend",
    "probsparse_sizes",
    "TOLERANCE",
    "assert_close_to_reference",
    "HeadsSettings",
    "CorpusSettings",
    "ReportSettings",
    "KnockoutSettings",
    "SwapSettings",
    "NeedleSettings",
    "CheckSettings",
    "KVSettings",
    "read_heads",
    "read_corpus",
    "read_routed",
    "knockout",
    "swap",
    "needle",
    "HeadTable",
    "load_model",
    "routing_check",
    "RoutingMismatch",
    "check",
    "CheckReport",
    "run_experiment",
    "PatchSettings",
    "RoutesSettings",
    "PromptPair",
    "patch",
    "route_attribution",
    "PatchResult",
    "RoutesResult",
    "METRICS",
    "tokens",
    "serve",
    "ServeSettings",
]


def test_public_surface_is_pinned_and_exports_no_modules():
    assert sorted(attnroute.__all__) == sorted(PUBLIC) and len(set(PUBLIC)) == len(PUBLIC)
    for name in PUBLIC:
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
            assert isinstance(assigned[0].value, ast.List), f"{path}: __all__ must be a list literal"


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
