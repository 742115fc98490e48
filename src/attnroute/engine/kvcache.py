"""Contiguous KV cache: one preallocated [B, Hkv, max_len, D] buffer per layer.

Decoding appends the new keys/values and attends over everything so far; the new queries sit
bottom-right (query i at absolute position Tk − Tq + i), so causal masking needs no offset.
"""

from __future__ import annotations

import torch

from .errors import InputError
from .validate import as_int


class KVCache:
    def __init__(
        self,
        n_layers: int,
        batch: int,
        kv_heads: int,
        head_dim: int,
        max_len: int,
        *,
        dtype: torch.dtype = torch.float32,
        device=None,
        value_dim: int | None = None,
    ):
        n_layers, batch, kv_heads, head_dim, max_len = (
            as_int(x, name)
            for x, name in (
                (n_layers, "n_layers"),
                (batch, "batch"),
                (kv_heads, "kv_heads"),
                (head_dim, "head_dim"),
                (max_len, "max_len"),
            )
        )
        if min(n_layers, batch, kv_heads, head_dim, max_len) < 1:
            raise InputError(
                f"KVCache sizes must be >= 1, got layers={n_layers} batch={batch} kv_heads={kv_heads} "
                f"head_dim={head_dim} max_len={max_len}"
            )
        Dv = value_dim or head_dim
        self.max_len = max_len
        self.k = [torch.zeros(batch, kv_heads, max_len, head_dim, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(batch, kv_heads, max_len, Dv, dtype=dtype, device=device) for _ in range(n_layers)]
        self.lengths = [0] * n_layers

    def length(self, layer: int = 0) -> int:
        return self.lengths[layer]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k/v [B, Hkv, T_new, D] after what is cached; return views of all [B, Hkv, T, D]."""
        layer = as_int(layer, "layer", minimum=0)
        if layer >= len(self.k):
            raise InputError(f"layer must be in [0, {len(self.k)}), got {layer}")
        for name, new, buf in (("k", k, self.k[layer]), ("v", v, self.v[layer])):
            want = (buf.shape[0], buf.shape[1], buf.shape[3])
            if new.dim() != 4 or (new.shape[0], new.shape[1], new.shape[3]) != want:
                raise InputError(
                    f"{name} must be [B, Hkv, T_new, D] = [{want[0]}, {want[1]}, T_new, {want[2]}] "
                    f"for this cache, got {list(new.shape)} (no broadcasting into the cache)"
                )
        n, t = self.lengths[layer], k.shape[2]
        if n + t > self.max_len:
            raise InputError(f"KVCache full: {n} cached + {t} new > max_len={self.max_len}; make a larger cache")
        self.k[layer][:, :, n : n + t] = k
        self.v[layer][:, :, n : n + t] = v
        self.lengths[layer] = n + t
        return self.k[layer][:, :, : n + t], self.v[layer][:, :, : n + t]
