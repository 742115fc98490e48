"""Probes for reading whole models: one object per statistic, keyed by layer.

They receive blocks from every layer (block.layer says which) and keep per-row results, so
memory grows as L × H × T, never T².
"""

from __future__ import annotations

import torch

from ..build import Probe, RowStats
from ..build.probes import diagonal_mass


class PerLayer(Probe):
    """Dispatches each block to a per-layer probe made by ``factory()``."""

    def __init__(self, factory):
        self.factory = factory
        self.by_layer: dict[int, Probe] = {}

    def update(self, block) -> None:
        probe = self.by_layer.get(block.layer)
        if probe is None:
            probe = self.by_layer[block.layer] = self.factory()
        probe.update(block)

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

    Uses the Gram matrix M_h = W_O^hᵀ W_O^h [D, D]: ‖v W_Oᵀ‖² = v M_h vᵀ, so the cost is
    B·H·Tk·D² instead of B·H·Tk·D·C.
    """
    B, Hkv, Tk, D = value.shape
    C = o_weight.shape[0]
    W = o_weight.view(C, n_heads, D).permute(1, 0, 2)  # (H, C, D): the columns that read head h
    gram = W.transpose(1, 2) @ W  # (H, D, D)
    v = value.repeat_interleave(n_heads // Hkv, dim=1)  # (B, H, Tk, D)
    sq = torch.einsum("bhtd,hde,bhte->bht", v, gram.to(v.dtype), v)
    return sq.clamp_min(0).sqrt()


def row_stats_probe(band: int = 4) -> PerLayer:
    return PerLayer(lambda: RowStats(band=band))
