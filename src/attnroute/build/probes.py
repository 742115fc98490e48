"""Probes: per-row statistics accumulated block by block, never holding the n×n matrix.

A probe is any object with ``update(block: WeightBlock)``. The eager backend hands it one
block (all rows); the blocked backend one block per group of query rows. Results are per row,
[B, H, Tq], so memory grows linearly with length.
"""

from __future__ import annotations

import torch

from .trace import WeightBlock


class Probe:
    """Base: subclasses implement update(block)."""

    layer: int | None = None  # when set, only blocks of this layer are read

    def update(self, block: WeightBlock) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def wants(self, block: WeightBlock) -> bool:
        return self.layer is None or block.layer is None or block.layer == self.layer


class RowStats(Probe):
    """Per query row: entropy, max weight, argmax key, visible-key count, and mass on the first key,
    the previous key and a local band.

    Entropy in one pass from the scores and the log-sum-exp (no log of weights, so no log 0):
        H = lse − Σ_j p_j s_j,  p_j = exp(s_j − lse)
    which equals log Σe^{s−m} + m − Σe^{s−m}·s / Σe^{s−m}. A row that sees nothing has entropy 0,
    max weight 0 and argmax −1.

    ``band``: keys with |query position − key position| < band count as local.
    """

    FIELDS = ("entropy", "max_weight", "argmax", "n_visible", "first_mass", "prev_mass", "band_mass")

    def __init__(self, band: int = 4, layer: int | None = None):
        self.band = band
        self.layer = layer
        self._rows: dict[str, list[tuple[int, torch.Tensor]]] = {f: [] for f in self.FIELDS}

    def update(self, block: WeightBlock) -> None:
        if not self.wants(block):
            return
        dt = torch.promote_types(block.weights.dtype, torch.float32)  # fp32, or fp64 for fp64 inputs
        w = block.weights.to(dt)  # (B, H, bq, kspan)
        s = block.masked_scores.to(dt)
        B, H = w.shape[:2]
        keep = block.keep_full(B, H)
        n_vis = keep.sum(-1)  # (B, H, bq)
        seen = torch.isfinite(block.lse)
        ps = (w * torch.where(torch.isneginf(s), torch.zeros_like(s), s)).sum(-1)
        entropy = torch.where(seen, block.lse - ps, torch.zeros_like(ps))
        max_w, arg = w.max(-1)
        arg = torch.where(seen, arg + block.kv0, torch.full_like(arg, -1))
        offset = block.q_positions(w.device)[:, None] - block.kv_positions(w.device)[None, :]  # (bq, kspan)
        self._put("entropy", block, entropy.clamp_min(0.0))
        self._put("max_weight", block, max_w)
        self._put("argmax", block, arg)
        self._put("n_visible", block, n_vis)
        self._put("first_mass", block, (w * (block.kv_positions(w.device) == 0)).sum(-1))
        self._put("prev_mass", block, (w * (offset == 1)).sum(-1))
        self._put("band_mass", block, (w * (offset.abs() < self.band)).sum(-1))

    def _put(self, name: str, block: WeightBlock, value: torch.Tensor) -> None:
        self._rows[name].append((block.q0, value.detach()))

    def get(self, name: str) -> torch.Tensor:
        """The statistic for every row, [B, H, Tq] (rows of successive calls concatenated along Tq)."""
        parts = self._rows[name]
        if not parts:
            raise RuntimeError("RowStats has seen no block yet")
        return torch.cat([v for _, v in parts], dim=-1)

    def __getattr__(self, name: str) -> torch.Tensor:
        if name in RowStats.FIELDS:
            return self.get(name)
        raise AttributeError(name)

    def entropy_norm(self) -> torch.Tensor:
        """Entropy divided by log(visible keys); rows with fewer than 2 visible keys give 0."""
        n = self.get("n_visible").float()
        return torch.where(n > 1, self.get("entropy") / torch.log(n.clamp_min(2)), torch.zeros_like(n))


class KeyMass(Probe):
    """Mass each row puts on chosen keys: ``keys`` is bool [Tk] or [B, Tk] (True = chosen),
    e.g. delimiters, [SEP], BOS. Result [B, H, Tq]."""

    def __init__(self, keys: torch.Tensor, layer: int | None = None):
        self.keys = torch.as_tensor(keys, dtype=torch.bool)
        self.layer = layer
        self._parts: list[torch.Tensor] = []

    def update(self, block: WeightBlock) -> None:
        if not self.wants(block):
            return
        sel = self.keys[..., block.kv0 : block.kv1].to(block.weights.device)
        sel = sel[:, None, None, :] if sel.dim() == 2 else sel  # (B?, 1, 1, kspan)
        w = block.weights.to(torch.promote_types(block.weights.dtype, torch.float32))
        self._parts.append((w * sel).sum(-1).detach())

    @property
    def mass(self) -> torch.Tensor:
        return torch.cat(self._parts, dim=-1)


class CallbackProbe(Probe):
    """Wraps a plain function ``fn(block)`` as a probe."""

    def __init__(self, fn, layer: int | None = None):
        self.fn = fn
        self.layer = layer

    def update(self, block: WeightBlock) -> None:
        if self.wants(block):
            self.fn(block)
