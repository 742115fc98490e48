"""Exact route knockouts that recompute only what a route can change.

A route (layer l, query i → key j) cut in a causal model changes nothing below layer l, and nothing at the
positions before i at any layer: a row reads only itself and earlier rows. So its knockout reruns layers
l … L − 1 on rows i … T − 1 alone:

    rows i … T − 1 ──► blocks 0 … l − 1 answer with their recorded outputs on those rows
                   ──► blocks l … L − 1 run, reading the base run's keys and values of rows 0 … i − 1
                       from a KV cache (transformers' DynamicCache, filled once from the base run)
                   ──► logits of rows i … T − 1; a metric that reads every position gets the base run's
                       logits for the rows before i

The cost of one knockout is about (L − l)/L · (T − i)/T of a forward instead of (L − l)/L, and the keys,
values and logits of the base run cost nothing when the caller recorded them (route attribution's
streaming pass is a forward of the base run: it keeps each layer's keys and values as it goes). The shortcut
must reproduce the base run before it is trusted (``check``: no cut, restarted from the middle layer at the
middle row, the metric within 1e-4 of the base run's), and is not taken for a model with sliding-window
layers (a windowed layer's cache keeps only its window), whose cache holds other tensors than the keys and
values its attention reads (``cache_differs``: DeepSeek's latent attention), or without one stack of
layers: those rerun from the route's layer over every row, as before (said in the result).
"""

from __future__ import annotations

import torch

from ..adapter import routed
from ..effects import rows_of
from ..ground.copies import repeat_output
from ..hooks import forwards_replaced


def _rows_from(out, i: int):
    """A block's recorded output (a tensor or a tuple holding one) cut to rows i … T − 1."""
    if isinstance(out, torch.Tensor):
        return out[:, i:]
    if isinstance(out, tuple) and not hasattr(out, "_fields"):
        return type(out)(_rows_from(o, i) for o in out)
    return out


def windowed(loaded) -> bool:
    cfg = loaded.model.config
    kinds = getattr(cfg, "layer_types", None) or []
    return bool(getattr(cfg, "sliding_window", None)) or any("sliding" in str(k) for k in kinds)


@torch.no_grad()
def cache_differs(loaded, batch: dict, kv: list) -> str | None:
    """Why the model's own KV cache cannot be filled with the keys and values its attention reads (``kv``,
    [B, Hkv, T, D] per layer), or None: one token's forward shows what each layer caches. DeepSeek's latent
    attention caches its compressed kv and the rotary key part instead (the shortcut once crashed there)."""
    ids = rows_of(batch)[:1, :1]
    with routed(loaded, impl="auto"):
        out = loaded.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
    layers = getattr(out.past_key_values, "layers", None)
    if layers is None or len(layers) != len(kv):
        return "the model's KV cache does not hold one layer of keys and values per attention layer"
    for l, (layer, (k, v)) in enumerate(zip(layers, kv)):
        for name, got, want in (("keys", layer.keys, k), ("values", layer.values, v)):
            if got is None or got.shape[1] != want.shape[1] or got.shape[3:] != want.shape[3:]:
                have = None if got is None else tuple(got.shape)
                return f"layer {l} caches {name} of shape {have}, not the {tuple(want.shape)} its attention reads"
    return None


class Suffix:
    """The base run's keys and values (and logits, for a metric of every position), and knockouts rerun on
    the rows a route can change. ``stored``: each block's output on the base run; ``blocks``: the stack."""

    def __init__(self, loaded, batch: dict, stored: dict, blocks: list, *, value, kwargs, last_only: bool, base=None):
        """``base``: (keys and values [B, Hkv, T, D] per layer, logits [B, T, V]) recorded on the base run by
        its caller (route attribution's streaming pass records both); without it one forward fills them."""
        self.loaded, self.batch, self.stored, self.blocks, self.value = loaded, batch, stored, blocks, value
        self.kwargs = {k: v for k, v in kwargs.items() if k != "use_cache"}
        self.last_only = last_only
        if base is None:
            with torch.no_grad(), routed(loaded, impl="auto"):
                out = loaded.model(**batch, **self.kwargs, use_cache=True)
            base = [(layer.keys, layer.values) for layer in out.past_key_values.layers], out.logits
        self.kv = base[0]  # [B, Hkv, T, D] per layer: what a KV cache of the base run holds
        self.logits = None if last_only else base[1].detach()  # [B, T, V]

    def metric(self, start: int, row: int, interventions) -> torch.Tensor:
        """The metric per prompt with blocks ``start`` … rerun on rows ``row`` … under ``interventions``."""
        return self.metrics(start, row, [lambda items: interventions])[0]

    def metrics(self, start: int, row: int, cuts: list) -> list[torch.Tensor]:
        """metric() for several cuts in one forward, as copies of the prompts: ``cuts`` are functions (the batch
        items of their copy) -> interventions; every copy reruns from the earliest ``start`` and ``row`` any
        of them needs (a short prompt's forward costs reading the weights, whatever the batch)."""
        from transformers import DynamicCache

        c = len(cuts)
        ids = rows_of(self.batch)
        B, T = ids.shape
        rep = lambda t: repeat_output(t, c)  # noqa: E731  (copy-major, as the items below)
        kv = ((rep(k[:, :, :row]), rep(v[:, :, :row])) for k, v in self.kv)
        positions = torch.arange(row, T)
        batch = {
            "input_ids": rep(ids[:, row:]),
            "attention_mask": rep(self.batch.get("attention_mask", torch.ones_like(ids))),
            "position_ids": positions[None].expand(c * B, -1),
            "cache_position": positions,
            "cache": DynamicCache(kv, config=self.loaded.model.config),
            "use_cache": True,
        }
        answers = {}
        for j in range(start):  # only the last one's output is read: the rows it hands on
            out = repeat_output(_rows_from(self.stored[j], row), c) if j == start - 1 else None
            answers[self.blocks[j]] = lambda *a, _out=out, **k: _out
        made = [iv for n, cut in enumerate(cuts) for iv in cut(list(range(n * B, (n + 1) * B)))]
        with torch.no_grad(), forwards_replaced(answers), routed(self.loaded, interventions=made, impl="auto"):
            out = self.loaded.model(**batch, **self.kwargs)
        logits = out.logits if self.last_only else torch.cat([rep(self.logits[:, :row]), out.logits], 1)
        return list(self.value(logits, c).view(c, B))

    def check(self, base: torch.Tensor) -> dict:
        """No cut, from the middle layer at the middle row: the metric must be the base run's (1e-4)."""
        T = rows_of(self.batch).shape[1]
        start, row = max(1, len(self.blocks) // 2), max(1, T // 2)
        diff = float((self.metric(start, row, []) - base).abs().max())
        tol = 1e-4 * max(1.0, float(base.abs().max()))
        return {"used": diff <= tol, "suffix_check_max_abs_diff": diff, "tolerance": tol}


__all__ = ["Suffix", "cache_differs", "windowed"]
