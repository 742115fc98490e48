"""Probes: per-row statistics accumulated block by block, never holding the n×n matrix.

A probe is any object with ``update(block: WeightBlock)``. The eager backend hands it one
block (all rows); the blocked backend one block per group of query rows. Results are per row,
[B, H, Tq], so memory grows linearly with length.
"""

from __future__ import annotations

import torch

from .stages import first_masked_column
from .trace import WeightBlock


class Probe:
    """Base: subclasses implement update(block)."""

    layer: int | None = None  # when set, only blocks of this layer are read
    needs_lse: bool = False  # set True to receive block.lse (costs the backend one more pass)

    def update(self, block: WeightBlock) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def wants(self, block: WeightBlock) -> bool:
        return self.layer is None or block.layer is None or block.layer == self.layer


class RowStats(Probe):
    """Per query row: entropy, max weight, argmax key, visible-key count, and mass on the first key,
    the previous key, a local band and (with sink logits) the sink.

    Entropy in one pass from scores and log-sum-exp: H = lse − Σ_j p_j s_j = log Σe^{s−m} + m −
    Σe^{s−m}·s / Σe^{s−m} (see row_entropy). A row that sees nothing has entropy 0, max weight 0
    and argmax −1.

    ``band``: keys with |query position − key position| < band count as local. The previous-token
    and band masses read only the diagonals they need, so the cost per block is two passes over
    the weights (max, and the dot product Σ p·s) plus O(bq·band).
    """

    FIELDS = ("entropy", "max_weight", "argmax", "n_visible", "first_mass", "prev_mass", "band_mass", "sink_logit_mass")

    def __init__(self, band: int = 4, layer: int | None = None):
        self.band = band
        self.layer = layer
        self._rows: dict[str, list[tuple[int, torch.Tensor]]] = {f: [] for f in self.FIELDS}

    def update(self, block: WeightBlock) -> None:
        if not self.wants(block):
            return
        dt = torch.promote_types(block.weights.dtype, torch.float32)
        w = block.weights.to(dt)  # (B, H, bq, kspan)
        B, H, bq, _ = w.shape
        keep = block.keep
        n_vis = (keep.sum(-1) if keep is not None else torch.full((1, 1, 1), block.kv1 - block.kv0)).expand(B, H, bq)
        seen = w.sum(-1) > 0 if keep is None else keep.any(-1).expand(B, H, bq)
        max_w, arg = w.max(-1)
        self._put("entropy", block, torch.where(seen, row_entropy(w, block, max_w), 0.0).clamp_min(0.0))
        self._put("max_weight", block, max_w)
        self._put("argmax", block, torch.where(seen, arg + block.kv0, torch.full_like(arg, -1)))
        self._put("n_visible", block, n_vis)
        self._put("first_mass", block, w[..., 0] if block.kv0 == 0 else w.new_zeros(B, H, bq))
        self._put("prev_mass", block, diagonal_mass(w, block, offsets=[1]))
        self._put("band_mass", block, diagonal_mass(w, block, offsets=range(-self.band + 1, self.band)))
        # the mass a per-head sink logit took (attend(sinks=)); 0 where the attention has none
        sink = block.sink_mass if block.sink_mass is not None else w.new_zeros(B, H, bq)
        self._put("sink_logit_mass", block, sink)

    def _put(self, name: str, block: WeightBlock, value: torch.Tensor) -> None:
        # contiguous copy: a view (w[..., 0]) would keep the whole block of weights alive
        self._rows[name].append((block.q0, value.detach().contiguous().clone()))

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


def row_entropy(w: torch.Tensor, block: WeightBlock, max_w: torch.Tensor) -> torch.Tensor:
    """H = lse − Σ_j p_j s_j per row, [B, H, bq].

    lse comes for free from the largest weight: p_max = exp(s_max − lse) gives lse = s_max − log p_max
    (p_max ≥ 1/n, so the log is well conditioned). Masked scores are -inf with weight 0; only the
    columns some row cannot see are cleaned before the dot product. When an intervention edited
    the weights they are no longer softmax(s), and −Σ p log p is used directly.
    """
    if block.weights_edited or block.masked_scores is None:
        return -torch.special.xlogy(w, w).sum(-1)
    s = block.masked_scores.to(w.dtype)
    lse = block.lse if block.lse is not None else s.amax(-1) - torch.log(max_w)
    keep = block.keep
    c0 = s.shape[-1] if keep is None else first_masked_column(keep)
    ws = torch.linalg.vecdot(w[..., :c0], s[..., :c0])  # (B, H, bq)
    if c0 < s.shape[-1]:
        ws = ws + torch.linalg.vecdot(w[..., c0:], s[..., c0:].masked_fill(~keep[..., c0:], 0.0))
    if block.sink_mass is not None:
        # The sink is one more outcome. Σ_j p_j = 1 − p_sink, so −Σ_j p_j log p_j = (1 − p_sink)·lse − Σ_j p_j s_j,
        # and the sink adds −p_sink·log p_sink.
        p = block.sink_mass.to(w.dtype)
        return (1 - p) * lse - ws - torch.special.xlogy(p, p)
    return lse - ws


def diagonal_mass(w: torch.Tensor, block: WeightBlock, offsets) -> torch.Tensor:
    """Σ over the given offsets (query position − key position) of each row's weight: [B, H, bq]."""
    B, H, bq, kspan = w.shape
    qpos = block.q_positions(w.device)  # (bq,)
    total = w.new_zeros(B, H, bq)
    for off in offsets:
        col = qpos - off - block.kv0  # (bq,) column of key position q_pos − off
        ok = (col >= 0) & (col < kspan)
        picked = w.gather(-1, col.clamp(0, kspan - 1).view(1, 1, bq, 1).expand(B, H, bq, 1)).squeeze(-1)
        total += picked * ok
    return total


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


# ---------------------------------------------------------------- composed probes for whole models
class PerLayer(Probe):
    """Dispatches each block to a per-layer probe made by ``factory()``."""

    def __init__(self, factory):
        self.factory = factory
        self.by_layer: dict[int, Probe] = {}
        sample = factory()  # what the layers' probes can read (blocks of weights, or fused statistics)
        self.reads_fused = getattr(sample, "reads_fused", False)
        self.needs_key_sums = getattr(sample, "needs_key_sums", False)

    def for_layer(self, layer: int) -> Probe:
        """The layer's probe, made on first use (set its inputs before the layer runs, e.g. key vectors)."""
        probe = self.by_layer.get(layer)
        if probe is None:
            probe = self.by_layer[layer] = self.factory()
        return probe

    def drop(self, layer: int) -> None:
        """Forget the layer's probe and what it read (a reader that reduced the layer keeps memory flat)."""
        self.by_layer.pop(layer, None)

    def update(self, block) -> None:
        self.for_layer(block.layer).update(block)

    def update_fused(self, block) -> None:
        self.for_layer(block.layer).update_fused(block)

    def key_channels(self, block):
        probe = self.for_layer(block.layer)
        return probe.key_channels(block) if hasattr(probe, "key_channels") else None

    def __getitem__(self, layer: int):
        return self.by_layer[layer]


class Diagonals(Probe):
    """Per row, the weight on the key ``off`` positions back, for each offset: {off: [B, H, Tq]}."""

    def __init__(self, offsets):
        self.offsets = list(offsets)
        self.parts: dict[int, list[torch.Tensor]] = {o: [] for o in self.offsets}

    def update(self, block) -> None:
        w = block.weights.float()
        for off in self.offsets:
            self.parts[off].append(diagonal_mass(w, block, [off]))

    def rows(self, off: int) -> torch.Tensor:
        return torch.cat(self.parts[off], dim=-1)


class KeyVectors(Probe):
    """Per row, Σ_j α_ij · vectors[j] for K key vectors at once: [B, H, Tq, K].

    One batched matmul (weights [bq, kspan] @ vectors [kspan, K]) reads the block once, whatever K
    is. With indicator vectors it gives the mass on chosen keys (sinks, punctuation); with the value
    norms ‖f(x_j)‖ of Kobayashi et al. 2020 it gives the norm-weighted mass Σ_j ‖α_ij f(x_j)‖
    (α is a scalar per head, row and key, so no n×n×d tensor is needed).
    ``vectors`` [B or 1, H or 1, Tk, K] is set before each call (the adapter's before_attend hook).
    """

    def __init__(self):
        self.vectors: torch.Tensor | None = None
        self.parts: list[torch.Tensor] = []

    def update(self, block) -> None:
        w = block.weights
        vec = self.vectors[:, :, block.kv0 : block.kv1].to(w.dtype)  # (b?, h?, kspan, K)
        self.parts.append(torch.matmul(w, vec).float())  # (B, H, bq, K)

    def rows(self) -> torch.Tensor:
        return torch.cat(self.parts, dim=2)  # (B, H, Tq, K)


def value_norms(value: torch.Tensor, o_weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """‖v_j W_O^h‖ for every query head h and key j: [B, H, Tk].

    W_O^h [C, D] (the output projection's columns that read head h) = Q_h R_h with R_h [min(C, D), D]
    upper triangular (QR), and Q_h has orthonormal columns, so ‖W_O^h v‖ = ‖R_h v‖: the cost is B·H·Tk·D²
    instead of B·H·Tk·D·C, and it stays a sum of squares (no cancellation, unlike vᵀ W_O^hᵀ W_O^h v).
    The G query heads of a kv group read their kv head's values once: v is never copied per head.
    """
    B, Hkv, Tk, D = value.shape
    C, G = o_weight.shape[0], n_heads // Hkv
    dt = torch.promote_types(value.dtype, torch.float32)  # at least fp32; fp64 stays fp64
    W = o_weight.detach().to(dt).view(C, n_heads, D).permute(1, 0, 2)  # (H, C, D): the columns that read head h
    R = torch.linalg.qr(W, mode="r").R  # (H, r, D), r = min(C, D)
    r = R.shape[1]
    Rt = R.transpose(1, 2).reshape(Hkv, G, D, r).permute(0, 2, 1, 3).reshape(Hkv, D, G * r)  # (Hkv, D, G·r)
    rv = value.to(dt) @ Rt  # (B, Hkv, Tk, G·r): R_h v_j for the G heads of each kv group
    sq = rv.view(B, Hkv, Tk, G, r).square().sum(-1)  # (B, Hkv, Tk, G)
    return sq.sqrt().permute(0, 1, 3, 2).reshape(B, n_heads, Tk).to(value.dtype)


def row_stats_probe(band: int = 4) -> PerLayer:
    return PerLayer(lambda: RowStats(band=band))
