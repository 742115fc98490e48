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


class KeySetMass(Probe):
    """Per row, the mass on a chosen set of key positions, ``keys`` bool [B, Tk]."""

    def __init__(self, keys: torch.Tensor):
        self.keys = keys
        self.parts: list[torch.Tensor] = []

    def update(self, block) -> None:
        sel = self.keys[:, block.kv0 : block.kv1].to(block.weights.dtype)  # (B, kspan)
        w = block.weights.float()
        self.parts.append(torch.linalg.vecdot(w, sel[:, None, None, :].float()).contiguous())  # (B, H, bq)

    def rows(self) -> torch.Tensor:
        return torch.cat(self.parts, dim=-1)  # (B, H, Tq)


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


class NormMass(Probe):
    """Kobayashi et al. 2020: the norm of what each key contributes, ‖α_ij f(x_j)‖ = α_ij ‖f(x_j)‖,
    with f(x_j) = v_j W_O^h (value, bias included, through the head's slice of the output projection).

    α is a scalar per (head, row, key), so ‖f(x_j)‖ per head and key ([B, H, Tk], set by the adapter
    before each call) is all that is needed: no n×n×d tensor. Per row it keeps the total
    Σ_j α_ij‖f_j‖ and the part on the chosen keys (sinks)."""

    def __init__(self, keys: torch.Tensor):
        self.keys = keys  # (B, Tk) bool
        self.fnorm: torch.Tensor | None = None  # (B, H, Tk), set per call
        self.total: list[torch.Tensor] = []
        self.chosen: list[torch.Tensor] = []

    def update(self, block) -> None:
        fn = self.fnorm[..., block.kv0 : block.kv1].float()  # (B, H, kspan)
        w = block.weights.float()
        contrib = w * fn[:, :, None, :]  # (B, H, bq, kspan)
        self.total.append(contrib.sum(-1))
        sel = self.keys[:, None, None, block.kv0 : block.kv1].float()
        self.chosen.append(torch.linalg.vecdot(contrib, sel))

    def share(self) -> torch.Tensor:
        """Per row, the share of the norm-weighted contribution that comes from the chosen keys."""
        total, chosen = torch.cat(self.total, -1), torch.cat(self.chosen, -1)
        return torch.where(total > 0, chosen / total.clamp_min(1e-30), torch.zeros_like(total))


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
