"""KV-cache footprint: exact integer bytes from a model's attention shape.

Per layer per token the cache holds one key and one value vector per kv head:
    bytes/layer/token = 2 · Hkv · D · bytes_per_element        (2 = key and value)
    bytes/token       = L · that;   cache = batch · tokens · bytes/token
(the formula vLLM's kv_cache_interface.py spells as a property). A sliding window W caps the
tokens held at W.

``spec_from_config`` is the one place a model config (a transformers config object or the dict
of a config.json) becomes a KVSpec.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine import InputError

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}
CONFIG_FIELDS = ("num_hidden_layers", "num_attention_heads")


@dataclass(frozen=True)
class KVSpec:
    layers: int
    kv_heads: int
    head_dim: int
    dtype: str = "fp16"
    window: int | None = None

    def __post_init__(self):
        for name in ("layers", "kv_heads", "head_dim"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1, got {getattr(self, name)}", field=name)
        if self.dtype not in DTYPE_BYTES:
            raise InputError(f"unknown dtype {self.dtype!r}; expected one of {', '.join(DTYPE_BYTES)}", field="dtype")
        if self.window is not None and self.window < 1:
            raise InputError(f"window must be >= 1, got {self.window}", field="window")

    @property
    def bytes_per_layer_per_token(self) -> int:
        return 2 * self.kv_heads * self.head_dim * DTYPE_BYTES[self.dtype]

    @property
    def bytes_per_token(self) -> int:
        return self.layers * self.bytes_per_layer_per_token

    def cache_bytes(self, tokens: int, batch: int = 1) -> int:
        held = min(tokens, self.window) if self.window else tokens
        return batch * held * self.bytes_per_token


def spec_from_sizes(layers, heads, kv_heads, head_dim, dtype: str = "fp16", window: int | None = None) -> KVSpec:
    """A KVSpec from explicit sizes, each validated by name (kv_heads None means heads: MHA)."""
    kv_heads = heads if kv_heads is None else kv_heads
    for name, v in (("layers", layers), ("heads", heads), ("kv_heads", kv_heads), ("head_dim", head_dim)):
        if v is None or v < 1:
            raise InputError(f"{name} must be a positive integer, got {v}", field=name)
    if heads % kv_heads:
        raise InputError(
            f"heads {heads} must be a multiple of kv_heads {kv_heads} (grouped-query heads)", field="heads"
        )
    if dtype not in DTYPE_BYTES:
        raise InputError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_BYTES)}", field="dtype")
    if window is not None and window < 1:
        raise InputError(f"window must be a positive integer, got {window}", field="window")
    return KVSpec(layers, kv_heads, head_dim, dtype, window)


def spec_from_config(config, dtype: str = "fp16", window: int | None = None, source: str = "the config") -> KVSpec:
    """From a transformers config object or a config.json dict (Llama-style and BERT-style names).

    ``window`` overrides the config's ``sliding_window``; ``source`` names the config in errors.
    """
    cfg = config if isinstance(config, dict) else config.to_dict()
    for f in CONFIG_FIELDS:
        if f not in cfg:
            raise InputError(f"{source}: the config has no {f!r} (needed for the KV-cache size)", field="model")
    H = cfg["num_attention_heads"]
    D = cfg.get("head_dim") or (cfg["hidden_size"] // H if "hidden_size" in cfg else None)
    if D is None:
        raise InputError(f"{source}: the config has neither 'head_dim' nor 'hidden_size'", field="model")
    Hkv = cfg.get("num_key_value_heads") or H
    return spec_from_sizes(cfg["num_hidden_layers"], H, Hkv, D, dtype, window or cfg.get("sliding_window"))


__all__ = ["DTYPE_BYTES", "KVSpec", "spec_from_config", "spec_from_sizes"]
