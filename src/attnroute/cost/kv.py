"""KV-cache footprint: exact integer bytes from a model's attention shape.

Per layer per token the cache holds one key and one value vector per kv head:
    bytes/layer/token = 2 · Hkv · D · bytes_per_element        (2 = key and value)
    bytes/token       = L · that;   cache = batch · Σ_layers min(tokens, W_layer) · bytes/layer/token
(the formula vLLM's kv_cache_interface.py spells as a property). A sliding-window layer holds at
most W tokens; a full-attention layer holds them all. Models mix the two (Gemma-2 alternates them;
Qwen2 slides only from max_window_layers on, and only with use_sliding_window), so the window is
read per layer from the config's layer_types, as transformers computes them.

``spec_from_config`` is the one place a model config (a transformers config object or the dict
of a config.json) becomes a KVSpec.
"""

from __future__ import annotations

import numbers
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
    window: int | None = None  # every layer slides over W tokens (an explicit --window)
    layer_windows: tuple[int | None, ...] | None = None  # per layer: W, or None for full attention

    def __post_init__(self):
        for name in ("layers", "kv_heads", "head_dim"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1, got {getattr(self, name)}", field=name)
        if self.dtype not in DTYPE_BYTES:
            raise InputError(f"unknown `dtype` {self.dtype!r}; expected one of {', '.join(DTYPE_BYTES)}", field="dtype")
        if self.window is not None and self.window < 1:
            raise InputError(f"window must be >= 1, got {self.window}", field="window")
        if self.layer_windows is not None and len(self.layer_windows) != self.layers:
            raise InputError(f"layer_windows has {len(self.layer_windows)} entries for {self.layers} layers")

    def windows(self) -> tuple[int | None, ...]:
        """The window of every layer (None: the layer keeps every token)."""
        return self.layer_windows if self.layer_windows is not None else (self.window,) * self.layers

    @property
    def sliding_layers(self) -> int:
        return sum(w is not None for w in self.windows())

    @property
    def bytes_per_layer_per_token(self) -> int:
        return 2 * self.kv_heads * self.head_dim * DTYPE_BYTES[self.dtype]

    @property
    def bytes_per_token(self) -> int:
        return self.layers * self.bytes_per_layer_per_token

    def cache_bytes(self, tokens: int, batch: int = 1) -> int:
        held = sum(min(tokens, w) if w else tokens for w in self.windows())  # token slots over all layers
        return batch * held * self.bytes_per_layer_per_token


def _positive_int(v, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise InputError(f"{name} must be a positive integer, got {v!r}", field=name)
    return int(v)


def spec_from_sizes(
    layers,
    heads,
    kv_heads,
    head_dim,
    dtype: str = "fp16",
    window: int | None = None,
    layer_windows: tuple | None = None,
) -> KVSpec:
    """A KVSpec from explicit sizes, each validated by name (kv_heads None means heads: MHA)."""
    kv_heads = heads if kv_heads is None else kv_heads
    layers, heads, kv_heads, head_dim = (
        _positive_int(v, name)
        for v, name in ((layers, "layers"), (heads, "heads"), (kv_heads, "kv_heads"), (head_dim, "head_dim"))
    )
    if heads % kv_heads:
        raise InputError(
            f"heads {heads} must be a multiple of kv_heads {kv_heads} (grouped-query heads)", field="heads"
        )
    if dtype not in DTYPE_BYTES:
        raise InputError(f"unknown `dtype` {dtype!r}; expected one of {', '.join(DTYPE_BYTES)}", field="dtype")
    if window is not None:
        window = _positive_int(window, "window")
    return KVSpec(layers, kv_heads, head_dim, dtype, window, None if window else layer_windows)


def spec_from_config(config, dtype: str = "fp16", window: int | None = None, source: str = "the config") -> KVSpec:
    """From a transformers config object or a config.json dict (Llama-style and BERT-style names).

    ``window`` overrides the config's ``sliding_window``; ``source`` names the config in errors.
    """
    cfg = _resolved(config, source)
    for f in CONFIG_FIELDS:
        if f not in cfg:
            raise InputError(f"{source}: the config has no {f!r} (needed for the KV-cache size)", field="model")
    L = _positive_int(cfg["num_hidden_layers"], "num_hidden_layers")
    H = _positive_int(cfg["num_attention_heads"], "num_attention_heads")
    hidden = cfg.get("hidden_size")
    D = cfg.get("head_dim") or (_positive_int(hidden, "hidden_size") // H if hidden is not None else None)
    if D is None:
        raise InputError(f"{source}: the config has neither 'head_dim' nor 'hidden_size'", field="model")
    Hkv = cfg.get("num_key_value_heads") or H
    return spec_from_sizes(L, H, Hkv, D, dtype, window, layer_windows=_layer_windows(cfg, L))


SLIDING_TYPES = ("sliding_attention",)


def _layer_windows(cfg: dict, L: int) -> tuple[int | None, ...] | None:
    """Per-layer windows from layer_types (what transformers derives from use_sliding_window,
    max_window_layers, sliding_window_pattern …), else the one sliding_window for every layer."""
    sw = cfg.get("sliding_window")
    if sw is not None:
        sw = _positive_int(sw, "sliding_window")
    types = cfg.get("layer_types")
    if types:
        if len(types) != L:
            raise InputError(f"layer_types has {len(types)} entries for {L} layers", field="model")
        return tuple(sw if (t in SLIDING_TYPES and sw) else None for t in types)
    if cfg.get("use_sliding_window") is False:
        return None
    return (sw,) * L if sw else None


def _resolved(config, source: str) -> dict:
    """The config as a dict after transformers' own config class has derived its per-layer fields
    (a config.json dict that names its model_type is run through AutoConfig.for_model)."""
    if not isinstance(config, dict):
        return config.to_dict()
    if "model_type" not in config:
        return config
    from transformers import AutoConfig

    try:
        return AutoConfig.for_model(**config).to_dict()
    except Exception as e:  # noqa: BLE001  (an unknown model_type or a malformed field)
        raise InputError(
            f"{source}: transformers cannot build its config ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:160] if str(e) else ''})",
            field="model",
        ) from None


__all__ = ["DTYPE_BYTES", "KVSpec", "spec_from_config", "spec_from_sizes"]
