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
from dataclasses import replace
from pathlib import Path

from ..errors import InputError, InputTypeError
from .adapters import is_peft, refuse_checkpointing, refuse_compiled, refuse_quantized, refuse_random, unwrap_peft
from .discovery import _finish, model_kind
from .loaded import LoadedModel, ModelLoadError, dtype_names
from .offload import unheld
from .placement import check_held, resolve
from .sources import load as load_source
from .sources import quiet_transformers

TAKES = (
    "a bundled name, a model directory, a .gguf file, a hub id, a LoadedModel, a transformers model object "
    "or a PEFT model"
)


def load(model, tokenizer=None, progress=None, dtype=None, device=None, device_map=None) -> LoadedModel:
    """``model`` as a LoadedModel (see the module docstring); ``tokenizer`` goes with a transformers object
    (given with a name or a LoadedModel it would be dropped, so it is refused); ``progress`` receives one-line
    messages of the load; ``dtype`` (auto, float32, bfloat16, float16) is the dtype a name or path is loaded
    into (auto: the dtype its checkpoint stores; the bundled GGUFs: float32), ``device`` (cpu, cuda, cuda:N,
    mps, auto) or ``device_map`` (auto, balanced, a dict
    or a .json file) where (placement.py) — a model already in memory is never cast or moved, so a dtype it
    does not compute in, or a device it is not on, is refused."""
    dtype = resolve_dtype(dtype)
    place = resolve(dtype, device, device_map)
    if isinstance(model, str | os.PathLike):
        _no_tokenizer(tokenizer, "a name or path: the tokenizer saved with the model is read")
        return load_source(os.fspath(model), progress=progress, place=place)
    held = _held(model, tokenizer)
    check_held(held.model, place, device, device_map)
    refuse_random(held.model)
    refuse_checkpointing(held.model)
    _outputs_by_name(held.model)
    return _in_dtype(held, dtype)


def _held(model, tokenizer) -> LoadedModel:
    """What is already in memory as a LoadedModel: itself, a PEFT model through its base, a transformers object."""
    if isinstance(model, LoadedModel):
        if tokenizer is not model.tokenizer:
            _no_tokenizer(tokenizer, "a LoadedModel, which holds its own")
        return model
    refuse_compiled(model)
    if is_peft(model):  # read through its base model, the adapters applied while a verb reads (adapters.py)
        base, view = unwrap_peft(model)
        refuse_quantized(base)
        _not_offloaded(base)
        return replace(from_object(base, tokenizer), view=view)
    if _is_transformers_model(model):
        refuse_quantized(model)
        _not_offloaded(model)
        return from_object(model, tokenizer)
    if _is_transformers_model(getattr(model, "model", None)):  # a pipeline, or another holder of one
        raise InputTypeError(
            f"model must be {TAKES}, got {type(model).__name__}, which holds one: pass its .model, with "
            "tokenizer= its .tokenizer (or processor= its .processor)",
            field="model",
        )
    raise InputTypeError(f"model must be {TAKES}, got {type(model).__name__}", field="model")


DTYPES = {"auto": None, "float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def resolve_dtype(dtype):
    """None (auto) or the torch dtype named; anything else refused naming ``dtype``."""
    import torch

    if dtype is None or dtype == "auto":
        return None
    if isinstance(dtype, torch.dtype) and str(dtype).removeprefix("torch.") in DTYPES:
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return getattr(torch, DTYPES[dtype])
    raise InputTypeError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}", field="dtype")


def _in_dtype(loaded: LoadedModel, dtype) -> LoadedModel:
    """A model in memory, when it computes in ``dtype`` (or none was asked): attnroute never casts it."""
    if dtype is None:
        return loaded
    held = dtype_names(loaded.model)
    if held != [str(dtype).removeprefix("torch.")]:
        raise InputError(
            f"dtype {str(dtype).removeprefix('torch.')} was asked, and the model you hold computes in "
            f"{', '.join(held)}: attnroute never casts your model; cast a copy, or leave dtype auto",
            field="dtype",
        )
    return loaded


def _not_offloaded(model) -> None:
    """Parameters on the meta device that no accelerate hook holds (a model built on meta and never filled) are
    refused by name. Offloaded ones — a hook holds them on the CPU or disk — are read (offload.py)."""
    meta = unheld(model)
    if meta:
        raise ModelLoadError(
            f"{len(meta)} of the model's parameters are on the meta device and nothing holds their values (e.g. "
            f"{meta[0]}): the model was built without weights; load them (from_pretrained, load_state_dict) first"
        )


def is_loaded_or_object(model) -> bool:
    """True when ``model`` needs no load: a LoadedModel or a transformers object (its facts are at hand)."""
    return isinstance(model, LoadedModel) or _is_transformers_model(model) or is_peft(model)


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
    _same_vocabulary(model, tokenizer)
    name = str(getattr(model, "name_or_path", "") or type(model).__name__)
    return _finish((model, tokenizer, kind), name)


def _outputs_by_name(model) -> None:
    """``config.return_dict = False`` (set for torchscript or an export) makes a model answer with tuples, which
    transformers' own causal-LM forward cannot read (it fails on ``outputs.last_hidden_state``): refused by name
    before any work, rather than that traceback from inside every verb."""
    if getattr(getattr(model, "config", None), "return_dict", True) is False:
        raise InputError(
            "model.config.return_dict is False: the model answers with tuples, which transformers' own forward "
            "(and attnroute) read by name; set model.config.return_dict = True first",
            field="model",
        )


def _same_vocabulary(model, tokenizer) -> None:
    """A tokenizer with more tokens than the model has embedding rows is another model's: its ids past the last
    row index nothing (a raw IndexError mid-forward). Refused naming tokenizer. Fewer is usual (rows padded to a
    multiple of 64, Whisper's and T5's spare rows)."""
    embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    rows = getattr(embed, "num_embeddings", None)
    try:
        size = len(tokenizer)
    except TypeError:  # not a tokenizer at all: what reads it says so
        return
    if rows is not None and size > rows:
        raise InputError(
            f"tokenizer has {size:,} tokens and the model's embedding {rows:,} rows: it is not this model's "
            "tokenizer; give the one the model was trained with",
            field="tokenizer",
        )


def _saved_tokenizer(model):
    """The tokenizer saved where the model was loaded from, without a download; refused when there is none."""
    from .directory import directory_tokenizer, read_tokenizer

    source = str(getattr(model, "name_or_path", "") or "")
    try:
        if source and Path(source).is_dir():
            return directory_tokenizer(Path(source))
        if source:
            return read_tokenizer(source, local_files_only=True)
    except Exception:  # noqa: BLE001  (no tokenizer files there: refused below, in one line)
        pass
    where = f"at {source!r}" if source else "(the model has no name_or_path)"
    raise ModelLoadError(
        f"no tokenizer was given and none is saved {where}; give the one you hold beside the model: "
        "tokenizer=tok to any verb (processor= for a speech model), or ar.load_model(model, tokenizer=tok)",
        field="tokenizer",
    )


__all__ = ["DTYPES", "TAKES", "from_object", "is_loaded_or_object", "load", "resolve_dtype"]
