"""`attnroute cost kv`: the KV-cache bill of a model, exact to the byte."""

from __future__ import annotations

import json
from pathlib import Path

from .kv import DTYPE_BYTES, KVSpec


class CostInputError(ValueError):
    """Bad sizes or an unusable config: one line naming the field."""


CONFIG_FIELDS = ("num_hidden_layers", "num_attention_heads")


def spec_from_json(path: Path, dtype: str, window: int | None) -> tuple[KVSpec, None]:
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CostInputError(f"{path}: not a readable JSON config ({e})") from None
    for f in CONFIG_FIELDS:
        if f not in cfg:
            raise CostInputError(f"{path}: the config has no {f!r} (needed for the KV-cache size)")
    H = cfg["num_attention_heads"]
    D = cfg.get("head_dim") or (cfg["hidden_size"] // H if "hidden_size" in cfg else None)
    if D is None:
        raise CostInputError(f"{path}: the config has neither 'head_dim' nor 'hidden_size'")
    Hkv = cfg.get("num_key_value_heads") or H
    return _spec(cfg["num_hidden_layers"], H, Hkv, D, dtype, window or cfg.get("sliding_window")), None


def _spec(layers, heads, kv_heads, head_dim, dtype, window) -> KVSpec:
    for name, v in (("--layers", layers), ("--heads", heads), ("--kv-heads", kv_heads), ("--head-dim", head_dim)):
        if v is None or v < 1:
            raise CostInputError(f"{name} must be a positive integer, got {v}")
    if heads % kv_heads:
        raise CostInputError(f"--heads {heads} must be a multiple of --kv-heads {kv_heads} (grouped-query heads)")
    if dtype not in DTYPE_BYTES:
        raise CostInputError(f"unknown --dtype {dtype!r}; expected one of {', '.join(DTYPE_BYTES)}")
    if window is not None and window < 1:
        raise CostInputError(f"--window must be a positive integer, got {window}")
    return KVSpec(layers, kv_heads, head_dim, dtype, window)


def resolve_spec(args) -> tuple[KVSpec, int | None, str]:
    """(spec, weight bytes or None, description) from --model or explicit sizes."""
    if args.model:
        path = Path(args.model)
        if path.suffix == ".json":
            spec, _ = spec_from_json(path, args.dtype, args.window)
            return spec, None, str(path)
        from ..read.models import load

        lm = load(args.model)
        cfg = lm.model.config
        H = cfg.num_attention_heads
        spec = _spec(cfg.num_hidden_layers, H, getattr(cfg, "num_key_value_heads", None) or H,
                     getattr(cfg, "head_dim", None) or cfg.hidden_size // H, args.dtype,
                     args.window or getattr(cfg, "sliding_window", None))
        params = sum(p.numel() for p in lm.model.parameters())
        return spec, params * DTYPE_BYTES[args.dtype], lm.name
    if args.layers is None or args.heads is None or args.head_dim is None:
        raise CostInputError("give --model NAME|PATH|config.json, or --layers, --heads and --head-dim")
    return _spec(args.layers, args.heads, args.kv_heads or args.heads, args.head_dim, args.dtype, args.window), None, \
        "explicit sizes"


def bill(spec: KVSpec, context: int, batch: int, weight_bytes: int | None) -> dict:
    if context < 1 or batch < 1:
        raise CostInputError(f"--context and --batch must be positive, got {context} and {batch}")
    return {"layers": spec.layers, "kv_heads": spec.kv_heads, "head_dim": spec.head_dim, "dtype": spec.dtype,
            "window": spec.window, "context": context, "batch": batch,
            "bytes_per_layer_per_token": spec.bytes_per_layer_per_token, "bytes_per_token": spec.bytes_per_token,
            "cache_bytes": spec.cache_bytes(context, batch), "weight_bytes": weight_bytes}


def units(n: int | None) -> str:
    if n is None:
        return "n/a"
    dec = next(f"{n / v:.1f} {u}" for u, v in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1))
               if n >= v or u == "B")
    binary = next(f"{n / v:.1f} {u}" for u, v in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20),
                                                  ("KiB", 2 ** 10), ("B", 1)) if n >= v or u == "B")
    return f"{n:,} B = {dec} = {binary}"
