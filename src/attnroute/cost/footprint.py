"""`attnroute cost kv`: the KV-cache bill of a model, exact to the byte.

``kv(settings)`` is the verb: a config.json is read as it is; a model name, directory or .gguf is
loaded (models/, one floor down) for its config and its parameter count.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..engine import InputError
from ..settings import KVSettings, verb
from .kv import DTYPE_BYTES, KVSpec, spec_from_config, spec_from_sizes


def read_config_json(path: Path) -> dict:
    """The dict of a config.json, or an InputError naming the file."""
    try:
        cfg = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not a readable JSON config ({e})", field="model") from None
    if not isinstance(cfg, dict):
        raise InputError(f"{path}: a config.json holds a JSON object, got {type(cfg).__name__}", field="model")
    return cfg


def kv_bill(spec: KVSpec, context: int, batch: int, weight_bytes: int | None) -> dict:
    """Exact integer bytes of the cache for ``batch`` sequences of ``context`` tokens."""
    for name, v in (("context", context), ("batch", batch)):
        if v < 1:
            raise InputError(f"{name} must be positive, got {v}", field=name)
    return {
        "layers": spec.layers,
        "kv_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
        "dtype": spec.dtype,
        "window": spec.window,
        "sliding_layers": spec.sliding_layers,
        "layer_windows": list(spec.windows()),
        "context": context,
        "batch": batch,
        "bytes_per_layer_per_token": spec.bytes_per_layer_per_token,
        "bytes_per_token": spec.bytes_per_token,
        "cache_bytes": spec.cache_bytes(context, batch),
        "weight_bytes": weight_bytes,
    }


def kv_card(config, attention: list[str], context: int, tokens: int) -> dict:
    """The routing report's KV-cache card for a decoder-only model (``attention``: each layer's kind);
    for other kinds, or a config the formulas cannot read, the reason there is none."""
    if any(k != "self" for k in attention):
        return {"unavailable": "the KV-cache card covers decoder-only models; an encoder-decoder caches two streams"}
    try:
        spec, spec16 = spec_from_config(config, "fp32"), spec_from_config(config, "fp16")
    except InputError as e:
        return {"unavailable": str(e)}
    ctx = context or tokens
    return {
        "bytes_per_token_fp32": spec.bytes_per_token,
        "bytes_per_token_fp16": spec16.bytes_per_token,
        "context": ctx,
        "at_context_fp16": spec16.cache_bytes(ctx),
        "layers": spec.layers,
        "kv_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
    }


def kv_spec(settings: KVSettings) -> tuple[KVSpec, int | None, str]:
    """(the spec, the weights' bytes in the cache's dtype or None, what was costed)."""
    s = settings
    if not s.model:
        return spec_from_sizes(*s.sizes(), s.dtype, s.window), None, "explicit sizes"
    if Path(s.model).suffix == ".json":
        return spec_from_config(read_config_json(Path(s.model)), s.dtype, s.window, source=s.model), None, s.model
    from ..models import load

    lm = load(s.model)
    params = sum(p.numel() for p in lm.model.parameters())
    return spec_from_config(lm.model.config, s.dtype, s.window), params * DTYPE_BYTES[s.dtype], lm.name


@verb(KVSettings)
def kv(settings: KVSettings | None = None, **fields) -> dict:
    """`attnroute cost kv`: the exact bill, and what it is the bill of (``source``)."""
    s = KVSettings.of(settings, None, fields)
    spec, weights, what = kv_spec(s)
    return {**kv_bill(spec, s.context, s.batch, weights), "source": what}


__all__ = ["kv", "kv_bill", "kv_card", "kv_spec", "read_config_json"]
