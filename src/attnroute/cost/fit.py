"""`attnroute cost fit`: whether a model fits a device for each verb, from its config alone — the weights in a
dtype, the runtime beside them, and the verb's working memory at a context length (the formula and its
measurements: models/fit.py, docs/cost.md). Nothing is loaded: a config.json is read as it is, a name,
directory, .gguf or hub id through the facts read before any weight (models.facts_of)."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..models.fit import CALIBRATED_ON, WORKING, Shape, gib, predict
from ..models.placement import stored_dtype
from ..models.safety import available_memory
from ..settings import FitSettings, verb
from .footprint import read_config_json


@verb(FitSettings)
def fit(model=None, *, settings: FitSettings | None = None, **fields) -> dict:
    """Each verb's predicted peak against the device's memory: the rows, and what the model is."""
    s = FitSettings.of(settings, model, fields)
    config, source = _config(s.model)
    if getattr(config, "model_type", None) == "whisper":  # right or refused: no speech model was measured
        raise InputError(
            f"{source} is a speech model: cost fit's working memory was measured on text models (SmolLM2, Gemma 3) "
            "and does not count an encoder's 1,500 audio frames; measure its peak with --max-memory on the verb",
            field="model",
        )
    shape = Shape.of(config)
    dtype = str(stored_dtype(config)).removeprefix("torch.") if s.dtype == "auto" else s.dtype
    memory = s.device_memory or available_memory()
    verbs = list(WORKING) if s.verb == "all" else [s.verb]
    host = s.device == "cpu"
    rows = [_row(shape, v, dtype, s.tokens, memory, host) for v in verbs]
    return {
        "model": source,
        "dtype": dtype,
        "device": s.device,
        "device_memory": memory,
        "tokens": s.tokens,
        "parameters": shape.parameters,
        "vocab": shape.vocab,
        "rows": rows,
    }


def _row(shape: Shape, verb_name: str, dtype: str, tokens, memory, host: bool) -> dict:
    parts = predict(shape, verb_name, dtype, tokens, host)
    row = {"verb": verb_name, "dtype": dtype, **parts, "calibrated_on": CALIBRATED_ON.get(verb_name)}
    if memory is None:
        return row | {"fits": None, "verdict": "no memory figure: give device_memory"}
    fits = parts["peak"] <= memory
    if fits:
        verdict = "fits"
    elif parts["runtime"] + parts["weights"] >= memory:
        verdict = f"does not fit: the weights and runtime alone take {gib(parts['runtime'] + parts['weights'])}"
    else:
        verdict = f"not at full batches: --max-memory {gib(memory).replace(' ', '')} shrinks them to fit"
    return row | {"fits": fits, "verdict": verdict}


def _config(model: str):
    """(the model's config, what was costed), without loading a weight."""
    from transformers import AutoConfig

    if str(model).endswith(".json"):
        raw = read_config_json(Path(model))
        kind = raw.get("model_type")
        if not isinstance(kind, str):
            raise InputError(f"{model}: a config.json names its model_type; this one has none", field="model")
        try:
            return AutoConfig.for_model(**raw), model
        except (ValueError, KeyError, TypeError) as e:
            raise InputError(f"{model}: transformers cannot read this config ({e})", field="model") from None
    from ..models import config_of

    config = config_of(model)
    if config is None:
        raise InputError(f"model {model!r}: no config could be read without loading it", field="model")
    return config, str(model)


__all__ = ["fit"]
