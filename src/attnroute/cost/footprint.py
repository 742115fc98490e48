"""`attnroute cost kv`: the KV-cache bill of a model, exact to the byte.

The model itself is loaded one floor up (the CLI hands over its config and weight count); this
module only reads a config.json and does the arithmetic.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..engine import InputError
from .kv import KVSpec


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


__all__ = ["kv_bill", "read_config_json"]
