"""Where a model comes from, by name: a bundled package (offline), a model directory, a .gguf file, a
CTranslate2 Whisper folder, or a hub id ``org/name`` (huggingface_hub's cache; offline with HF_HUB_OFFLINE).
Never a pickle, never trust_remote_code."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..bundled import MODELS, model_path
from ..bundled import package_dir as bundled_package_dir
from ..errors import InputError
from .caches import _load_ct2_cached, _load_gguf_cached, is_ct2
from .directory import _load_dir
from .discovery import _finish
from .loaded import LoadedModel, ModelLoadError
from .placement import Placement
from .safety import PICKLE_SUFFIXES, _first_line, _pickle_refusal

BUNDLED = {name: m.about for name, m in MODELS.items()}


def package_dir(package: str) -> Path:
    """Where a weight-only package lies (bundled.package_dir), refused as a model that cannot load."""
    try:
        return bundled_package_dir(package)
    except InputError as e:
        raise ModelLoadError(str(e)) from None


def quiet_transformers() -> None:
    """Load reports and weight progress bars are transformers' business; attnroute shows its own."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def load(name_or_path: str, progress=None, place: Placement | None = None) -> LoadedModel:
    """'smollm2', 'minilm', a transformers model directory (safetensors), a .gguf file, or a hub id
    ``org/name`` (through huggingface_hub's cache; safetensors only; HF_HUB_OFFLINE honoured). ``place``: its
    dtype (auto: the checkpoint's stored one), device or device map (placement.py)."""
    say = progress or (lambda msg: None)
    place = place or Placement()
    quiet_transformers()
    if name_or_path in MODELS:
        try:
            path = model_path(name_or_path)
        except InputError as e:
            raise ModelLoadError(str(e)) from None
        return _finish(_load_path(path, say, place), name_or_path)
    path = Path(name_or_path)
    if not path.exists() and HUB_ID.match(name_or_path) and not name_or_path.endswith(".gguf"):
        return _finish(_load_dir(hub_snapshot(name_or_path, say), say, place), name_or_path)
    if not path.exists():
        if os.sep not in name_or_path and not name_or_path.endswith(".gguf"):
            raise ModelLoadError(
                f"unknown `model` {name_or_path!r}: expected one of {', '.join(BUNDLED)}, "
                "a model directory, a .gguf file or a hub id org/name"
            )
        raise ModelLoadError(f"no such file or directory: {name_or_path}")
    if path.suffix.lower() in PICKLE_SUFFIXES and not is_ct2(path):
        raise ModelLoadError(_pickle_refusal(path))
    if path.suffix.lower() == ".gguf" or path.is_dir() or is_ct2(path):
        return _finish(_load_path(path, say, place), path.name)
    raise ModelLoadError(
        f"{path} is not a model: expected a directory with config.json and safetensors, or a .gguf file"
    )


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")  # org/name, as the Hugging Face hub spells it

HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja"]  # never pickles, never code


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_snapshot(repo_id: str, say) -> Path:
    """A hub model's directory through huggingface_hub's own cache: downloaded (configs, tokenizer and
    safetensors only) when online, the cached snapshot when HF_HUB_OFFLINE is set or the hub cannot be
    reached (said, not silent). The error when neither works names both."""
    from huggingface_hub import HfApi, snapshot_download

    cache = os.environ.get("HF_HUB_CACHE") or None  # read now, not at huggingface_hub's import
    where = cache or "the default Hugging Face cache"
    hub_error = "HF_HUB_OFFLINE is set, so the hub was not asked"
    if not _offline():
        # Ask the hub first: snapshot_download itself falls back to the cache without saying so.
        try:
            HfApi().model_info(repo_id, timeout=10)
        except Exception as e:  # noqa: BLE001  (network, auth, missing repo: each becomes part of one message)
            hub_error = f"the hub could not be reached or refused ({_first_line(e)})"
        else:
            say(f"fetching {repo_id} from the Hugging Face hub (configs, tokenizer, safetensors)")
            return Path(snapshot_download(repo_id, allow_patterns=HUB_FILES, cache_dir=cache))
    try:
        snap = Path(snapshot_download(repo_id, allow_patterns=HUB_FILES, cache_dir=cache, local_files_only=True))
    except Exception:  # noqa: BLE001
        raise ModelLoadError(
            f"{repo_id}: not in the local Hugging Face cache ({where}) and {hub_error}; download it where you "
            f"are online (it is then cached), or give a local model directory (there is no directory {repo_id} here)"
        ) from None
    if not _offline():
        say(f"using the cached snapshot of {repo_id}: {hub_error}")
    return snap


def _load_path(path: Path, say, place: Placement):
    """(model, tokenizer, kind) from a .gguf file, a CTranslate2 folder (or its model.bin) or a model directory."""
    if path.suffix.lower() == ".gguf":
        return _load_gguf_cached(path, say, place)
    if is_ct2(path):
        return _load_ct2_cached(path.parent if path.is_file() else path, say, place)
    return _load_dir(path, say, place)
