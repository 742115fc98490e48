"""The one door: whatever a user holds — a bundled name, a directory, a .gguf file, a CTranslate2 folder, a hub
id, attnroute's own LoadedModel, or a transformers model object with its tokenizer — becomes a LoadedModel
here, or is refused in one line naming `model`. No verb resolves a model itself (a test walks the verbs).

A transformers object is read where it is and as it is: attnroute keeps a reference, never a copy, and every
change it makes while reading (its attention implementation, hooks) is undone when the reading ends
(read/adapter.routed, read/hooks.py). Its tokenizer is the one given, else the one saved beside the weights it
was loaded from (``model.name_or_path``: a local directory, or a hub id already in the local cache); with
neither, the refusal says to pass ``tokenizer=``.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputTypeError
from .discovery import _finish, model_kind
from .loaded import LoadedModel, ModelLoadError
from .sources import load as load_source
from .sources import quiet_transformers

TAKES = "a bundled name, a model directory, a .gguf file, a hub id, a LoadedModel or a transformers model object"


def load(model, tokenizer=None, progress=None) -> LoadedModel:
    """``model`` as a LoadedModel (see the module docstring); ``tokenizer`` goes with a transformers object
    (given with a name or a LoadedModel it would be dropped, so it is refused); ``progress`` receives one-line
    messages of the load."""
    if isinstance(model, LoadedModel):
        if tokenizer is not model.tokenizer:
            _no_tokenizer(tokenizer, "a LoadedModel, which holds its own")
        return model
    if isinstance(model, str | os.PathLike):
        _no_tokenizer(tokenizer, "a name or path: the tokenizer saved with the model is read")
        return load_source(os.fspath(model), progress=progress)
    if _is_transformers_model(model):
        return from_object(model, tokenizer)
    raise InputTypeError(f"model must be {TAKES}, got {type(model).__name__}", field="model")


def is_loaded_or_object(model) -> bool:
    """True when ``model`` needs no load: a LoadedModel or a transformers object (its facts are at hand)."""
    return isinstance(model, LoadedModel) or _is_transformers_model(model)


def _no_tokenizer(tokenizer, what: str) -> None:
    if tokenizer is not None:
        raise InputTypeError(
            f"tokenizer is given with {what}; give it only with a transformers model object", field="tokenizer"
        )


def _is_transformers_model(obj) -> bool:
    try:
        from transformers import PreTrainedModel
    except ImportError:  # pragma: no cover (transformers is a dependency)
        return False
    return isinstance(obj, PreTrainedModel)


def from_object(model, tokenizer=None) -> LoadedModel:
    """A transformers model object the user holds, read in place (never copied, never cast, never moved).
    ``tokenizer`` may be a processor (Whisper's): its tokenizer is the one read."""
    quiet_transformers()
    if tokenizer is not None and hasattr(tokenizer, "feature_extractor") and hasattr(tokenizer, "tokenizer"):
        tokenizer = tokenizer.tokenizer
    kind = model_kind(model.config)
    tokenizer = tokenizer if tokenizer is not None else _saved_tokenizer(model)
    name = str(getattr(model, "name_or_path", "") or type(model).__name__)
    return _finish((model, tokenizer, kind), name)


def _saved_tokenizer(model):
    """The tokenizer saved where the model was loaded from, without a download; refused when there is none."""
    from transformers import AutoTokenizer

    source = str(getattr(model, "name_or_path", "") or "")
    try:
        if source and Path(source).is_dir():
            from .directory import directory_tokenizer

            return directory_tokenizer(Path(source))
        if source:
            return AutoTokenizer.from_pretrained(source, local_files_only=True, trust_remote_code=False)
    except Exception:  # noqa: BLE001  (no tokenizer files there: refused below, in one line)
        pass
    where = f"at {source!r}" if source else "(the model has no name_or_path)"
    raise ModelLoadError(
        f"no tokenizer was given and none is saved {where}; load it as load_model(model, tokenizer=tok) "
        "and give the verb that LoadedModel",
        field="tokenizer",
    )


__all__ = ["TAKES", "from_object", "is_loaded_or_object", "load"]
