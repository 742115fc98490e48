"""Named intermediates, made only on request (x-transformers' Intermediates habit)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class WeightBlock:
    """One block of rows as a backend hands it to probes and interventions.

    Rows are queries ``q0 … q1-1`` of ``Tq``; columns are keys ``kv0 … kv1-1`` of ``Tk`` (the
    blocked backend drops key columns no row of the block can see). ``keep`` broadcasts to
    [B, H, q1-q0, kv1-kv0]. Query row i sits at absolute position ``Tk - Tq + i`` (bottom-right).
    """

    q0: int
    q1: int
    kv0: int
    kv1: int
    Tq: int
    Tk: int
    keep: torch.Tensor | None
    layer: int | None = None
    masked_scores: torch.Tensor | None = None  # (B, H, bq, kspan), fp32 or input dtype
    weights: torch.Tensor | None = None  # (B, H, bq, kspan)
    weights_edited: bool = False  # an intervention changed the weights: they are not softmax(masked_scores)
    lse: torch.Tensor | None = None  # (B, H, bq), -inf for rows that see nothing; only for probes with needs_lse
    sink_mass: torch.Tensor | None = None  # (B, H, bq): the mass the per-head sink logit took (attend(sinks=))

    def q_positions(self, device=None) -> torch.Tensor:
        """Absolute positions of this block's queries, [bq]."""
        return torch.arange(self.q0, self.q1, device=device) + (self.Tk - self.Tq)

    def keep_full(self, B: int, H: int) -> torch.Tensor:
        """keep expanded to [B, H, bq, kspan] (a view; no copy)."""
        shape = (B, H, self.q1 - self.q0, self.kv1 - self.kv0)
        if self.keep is None:
            return torch.ones((1, 1, 1, 1), dtype=torch.bool).expand(*shape)
        return self.keep.expand(*shape)


@dataclass
class Trace:
    """What one attention call computed. Tensors are None when the backend did not hold them."""

    impl: str
    reason: str = ""
    scores: torch.Tensor | None = None  # (B, H, Tq, Tk)
    masked_scores: torch.Tensor | None = None  # (B, H, Tq, Tk)
    weights: torch.Tensor | None = None  # (B, H, Tq, Tk)
    lse: torch.Tensor | None = None  # (B, H, Tq)
    out: torch.Tensor | None = None  # (B, H, Tq, Dv)
    notes: list[str] = field(default_factory=list)
