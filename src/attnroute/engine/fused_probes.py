"""Probes that read the fused backend (backends/fused.py): per-row statistics from each row's
log-sum-exp and the same fused call's extra value channels, never a block of weights.

    FusedRowStats   entropy (lse − scale·q·Σp k), visible keys, band / previous / first-key mass,
                    any named diagonals (query position − key position)
    FusedKeyMass    Σ_j p_ij c_j for key vectors c the caller sets per call (indicators: mass on a key
                    set; value norms: Kobayashi's norm-weighted mass)

Both keep per-row results [B, H, Tq], so memory grows with length, never with length².
"""

from __future__ import annotations

import torch

from .backends.common import UnsupportedRequest
from .probes import Probe


class FusedRowStats(Probe):
    """Per query row: entropy, n_visible, first_mass, prev_mass, band_mass (|query − key| < band) and
    ``diag{off}`` for each requested offset. With entropy=False the call needs no K channels."""

    reads_fused = True

    def __init__(self, band: int = 4, diagonals=(), entropy: bool = True, layer: int | None = None):
        self.band, self.diagonals, self.entropy, self.layer = band, tuple(diagonals), entropy, layer
        self.needs_key_sums = entropy
        self.values: dict[str, torch.Tensor] = {}

    def update(self, block) -> None:
        raise UnsupportedRequest(
            "FusedRowStats reads the fused backend's statistics; use impl='fused' (or RowStats with impl='blocked')"
        )

    def update_fused(self, block) -> None:
        if not self.wants(block):
            return
        seen = block.n_visible > 0
        out = {"n_visible": block.n_visible.float().contiguous()}  # n_visible may be an expanded view
        if self.entropy:
            ws = block.scale * torch.linalg.vecdot(block.q.float(), block.key_sums.float())  # Σ_j p_ij s_ij
            out["entropy"] = torch.where(seen, block.lse.float() - ws, 0.0).clamp_min(0.0)
        band = list(range(-self.band + 1, self.band))
        offsets = sorted(set(band) | {1} | set(self.diagonals))
        named = block.named_weights(offsets)  # (B, H, Tq, n_off)
        at = {o: i for i, o in enumerate(offsets)}
        out["band_mass"] = named[..., [at[o] for o in band]].sum(-1)
        out["prev_mass"] = named[..., at[1]].clone()
        for o in self.diagonals:
            out[f"diag{o}"] = named[..., at[o]].clone()
        out["first_mass"] = block.key_weights(torch.tensor([0]))[..., 0].clone()
        self.values = out

    def get(self, name: str) -> torch.Tensor:
        if name not in self.values:
            raise KeyError(f"FusedRowStats has no {name!r} (computed: {sorted(self.values)})")
        return self.values[name]

    def rows(self, off: int) -> torch.Tensor:
        """The weight each row puts ``off`` positions back (as Diagonals.rows): [B, H, Tq]."""
        return self.get(f"diag{off}")

    def entropy_norm(self) -> torch.Tensor:
        n = self.get("n_visible")
        return torch.where(n > 1, self.get("entropy") / torch.log(n.clamp_min(2)), torch.zeros_like(n))


class FusedKeyMass(Probe):
    """Σ_j p_ij · vectors[j] for K key vectors at once: [B, H, Tq, K]. ``vectors`` [B|1, H|1, Tk, K]
    is set before each call (the adapter's before_attend hook), like KeyVectors for blocked."""

    reads_fused = True
    needs_key_sums = False

    def __init__(self, layer: int | None = None):
        self.layer = layer
        self.vectors: torch.Tensor | None = None
        self.result: torch.Tensor | None = None

    def update(self, block) -> None:
        raise UnsupportedRequest("FusedKeyMass reads the fused backend's statistics; use impl='fused'")

    def key_channels(self, block):
        return self.vectors if self.wants(block) else None

    def update_fused(self, block) -> None:
        if self.wants(block) and self.vectors is not None and id(self.vectors) in block.channel_sums:
            # channel_sums are copies: a view would keep the call's whole [V | K | channels] sums alive
            self.result = block.channel_sums[id(self.vectors)]

    def rows(self) -> torch.Tensor:
        return self.result


__all__ = ["FusedKeyMass", "FusedRowStats"]
