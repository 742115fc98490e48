"""KV-cache footprint: exact integer bytes from a model's attention shape.

Per layer per token the cache holds one key and one value vector per kv head:
    bytes/layer/token = 2 · Hkv · D · bytes_per_element        (2 = key and value)
    bytes/token       = L · that;   cache = batch · tokens · bytes/token
(the formula vLLM's kv_cache_interface.py spells as a property). A sliding window W caps the
tokens held at W.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}


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
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {self.dtype!r}; expected one of {', '.join(DTYPE_BYTES)}")
        if self.window is not None and self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window}")

    @property
    def bytes_per_layer_per_token(self) -> int:
        return 2 * self.kv_heads * self.head_dim * DTYPE_BYTES[self.dtype]

    @property
    def bytes_per_token(self) -> int:
        return self.layers * self.bytes_per_layer_per_token

    def cache_bytes(self, tokens: int, batch: int = 1) -> int:
        held = min(tokens, self.window) if self.window else tokens
        return batch * held * self.bytes_per_token


def spec_from_config(config, dtype: str = "fp16") -> KVSpec:
    """From a transformers config (Llama-style names, BERT-style names)."""
    H = config.num_attention_heads
    Hkv = getattr(config, "num_key_value_heads", None) or H
    D = getattr(config, "head_dim", None) or config.hidden_size // H
    return KVSpec(config.num_hidden_layers, Hkv, D, dtype, getattr(config, "sliding_window", None))
