"""Interventions: per-head edits at one stage of one attention call.

An intervention names query heads (in grouped models a head is a query head, never its kv
group) and optionally a layer, and edits one of four places:

    edit_inputs(q, k, v)               before score       (activation patching of q, k or v)
    edit_scores(masked_scores, block)  before normalize   (temperature)
    edit_weights(weights, block)       after normalize    (uniform, substitute)
    edit_out(out, q0, q1)              per-head output    (zero, replace)

Edits are out-of-place and touch only the named heads. Only edits of scores or weights need a backend that
holds them (eager, blocked, rows); the other two run around torch's fused kernel as well (needs_weights).
"""

from __future__ import annotations

import torch

from .errors import InputError
from .trace import WeightBlock


class Intervention:
    def __init__(self, heads, layer: int | None = None):
        self.heads = [int(h) for h in ([heads] if isinstance(heads, int) else heads)]
        self.layer = layer

    def applies(self, layer: int | None) -> bool:
        return self.layer is None or layer is None or self.layer == layer

    def head_mask(self, H: int, device) -> torch.Tensor:
        bad = [h for h in self.heads if not 0 <= h < H]
        if bad:
            raise InputError(f"{type(self).__name__}: head indices must lie in [0, {H}), got {bad}")
        m = torch.zeros(H, dtype=torch.bool, device=device)
        m[self.heads] = True
        return m.view(1, H, 1, 1)  # (1, H, 1, 1)

    def edit_inputs(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """q [B, H, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv] -> the same three, edited out of place."""
        return q, k, v

    def edit_scores(self, masked_scores: torch.Tensor, block: WeightBlock) -> torch.Tensor:
        return masked_scores

    def edit_weights(self, weights: torch.Tensor, block: WeightBlock) -> torch.Tensor:
        return weights

    def edit_out(self, out: torch.Tensor, q0: int, q1: int) -> torch.Tensor:
        return out

    def rows(self, Tq: int, Tk: int) -> list[int] | None:
        """The query rows (0 … Tq − 1) this intervention can change, when it says; None: any row."""
        return None

    def needs_weights(self) -> bool:
        """Does it edit scores or weights? One that edits only q, k, v and head outputs lets a fused kernel
        run (sdpa: its output edited after), since it never looks inside the softmax."""
        cls = type(self)
        return cls.edit_scores is not Intervention.edit_scores or cls.edit_weights is not Intervention.edit_weights


class ZeroHead(Intervention):
    """The head's output is zero: as if it were pruned (Michel et al. 2019)."""

    def edit_out(self, out, q0, q1):
        return torch.where(self.head_mask(out.shape[1], out.device), torch.zeros_like(out), out)


class ReplaceOutput(Intervention):
    """The head's output is replaced by a fixed vector per head (mean ablation): ``value`` [len(heads), Dv]
    or broadcastable to [B, len(heads), Tq, Dv]."""

    def __init__(self, heads, value: torch.Tensor, layer: int | None = None):
        super().__init__(heads, layer)
        self.value = value

    def edit_out(self, out, q0, q1):
        val = self.value
        if val.dim() == 2:
            val = val[None, :, None, :]  # (1, h, 1, Dv)
        elif val.dim() == 4 and val.shape[2] > 1:
            val = val[:, :, q0:q1]
        out = out.clone()
        out[:, self.heads] = val.to(out.dtype).expand(out.shape[0], len(self.heads), out.shape[2], out.shape[3])
        return out


class UniformWeights(Intervention):
    """The head spreads its weight evenly over the keys it may see (ProbSparse's lazy query)."""

    def edit_weights(self, weights, block):
        H = weights.shape[1]
        return torch.where(self.head_mask(H, weights.device), uniform_over_visible(weights, block), weights)


def uniform_over_visible(weights: torch.Tensor, block: WeightBlock) -> torch.Tensor:
    """1/n on each of the n keys a row may see (0 for a row that sees nothing), shaped like weights."""
    B, H = weights.shape[:2]
    keep = block.keep_full(B, H).to(weights.dtype)
    n = keep.sum(-1, keepdim=True)
    return keep / torch.where(n > 0, n, torch.ones_like(n))


class Temperature(Intervention):
    """Divide the head's masked scores by ``t`` before the softmax (t > 1 flattens, t < 1 sharpens)."""

    def __init__(self, heads, t: float, layer: int | None = None):
        super().__init__(heads, layer)
        if not t > 0:
            raise InputError(f"temperature must be > 0, got {t}")
        self.t = float(t)

    def edit_scores(self, masked_scores, block):
        H = masked_scores.shape[1]
        return torch.where(self.head_mask(H, masked_scores.device), masked_scores / self.t, masked_scores)


class KnockoutEdges(Intervention):
    """Attention knockout (Geva et al. 2023, "Dissecting Recall of Factual Associations"): the edges from
    query positions ``queries`` to key positions ``keys`` do not exist in the named heads (all heads when
    ``heads`` is None) — their scores become −inf before the softmax, so each row renormalizes over what
    stays visible. Positions are absolute (a query row's position is Tk − Tq + row, bottom-right).

        queries = {4}, keys = {1}        row 4:  ■ ⬚ ■ ■ ■   (key 1 knocked out, the rest renormalized)

    A row that loses every key returns zeros, like any row that may see nothing.

    ``by_row``: queries are the rows' own indices (0 … Tq − 1), not bottom-right positions — what a
    cross-attention layer needs, whose queries (a decoder's tokens) are no suffix of its keys (an
    encoder's positions): there Tk − Tq + row names no decoder position at all.

    ``batch``: the batch items cut (None: every one) — copies of one text in one forward, each with its own
    knockout (a short text's forward costs reading the weights, whatever its batch: knockout.py).
    """

    def __init__(self, queries, keys, heads=None, layer: int | None = None, by_row: bool = False, batch=None):
        super().__init__([] if heads is None else heads, layer)
        self.all_heads = heads is None
        self.queries = sorted({int(q) for q in queries})
        self.keys = sorted({int(k) for k in keys})
        self.by_row = by_row
        self.batch = None if batch is None else sorted({int(b) for b in batch})

    def rows(self, Tq: int, Tk: int) -> list[int]:
        """Only its query rows change (scores cut there, nothing else edited): the row of position p is
        p − (Tk − Tq), bottom-right; by_row, the row is the query itself."""
        shift = 0 if self.by_row else Tk - Tq
        return [q - shift for q in self.queries if 0 <= q - shift < Tq]

    def edit_scores(self, masked_scores, block):
        B, H, bq, kspan = masked_scores.shape
        if self.by_row:
            qpos = torch.arange(block.q0, block.q1, device=masked_scores.device)  # (bq,)
        else:
            qpos = block.q_positions(masked_scores.device)  # (bq,)
        kpos = torch.arange(block.kv0, block.kv1, device=masked_scores.device)  # (kspan,)
        rows = torch.isin(qpos, torch.tensor(self.queries, dtype=torch.long, device=qpos.device))
        cols = torch.isin(kpos, torch.tensor(self.keys, dtype=torch.long, device=kpos.device))
        cut = (rows[:, None] & cols[None, :]).view(1, 1, bq, kspan)  # (1, 1, bq, kspan)
        if self.batch is not None:
            items = torch.zeros(B, 1, 1, 1, dtype=torch.bool, device=cut.device)
            items[[b for b in self.batch if b < B]] = True
            cut = cut & items  # (B, 1, bq, kspan)
        if not bool(cut.any()):
            return masked_scores  # nothing to cut in this block: bit for bit unchanged
        heads = (
            torch.ones(1, H, 1, 1, dtype=torch.bool, device=cut.device)
            if self.all_heads
            else self.head_mask(H, masked_scores.device)
        )
        return masked_scores.masked_fill(cut & heads, float("-inf"))


class SubstituteWeights(Intervention):
    """Replace the head's weights by given ones, ``weights`` broadcastable to [B, len(heads), Tq, Tk].

    Only keys the mask lets the row see keep their substituted weight (the same in every backend:
    the blocked backend never visits keys no row of a block can see).
    """

    def __init__(self, heads, weights: torch.Tensor, layer: int | None = None):
        super().__init__(heads, layer)
        w = torch.as_tensor(weights)
        self.weights = w.reshape((1,) * (4 - w.dim()) + tuple(w.shape))  # (B?, h?, Tq, Tk)

    def edit_weights(self, weights, block):
        B, H = weights.shape[:2]
        if self.weights.shape[-2:] != (block.Tq, block.Tk):
            raise InputError(
                f"SubstituteWeights: weights must end in [Tq, Tk] = [{block.Tq}, {block.Tk}], "
                f"got {list(self.weights.shape)}"
            )
        sub = self.weights[..., block.q0 : block.q1, block.kv0 : block.kv1].to(weights)
        keep = block.keep_full(B, H).to(weights.dtype)
        out = weights.clone()
        out[:, self.heads] = sub.expand(B, len(self.heads), *sub.shape[-2:]) * keep[:, self.heads]
        return out


def apply_inputs(interventions, q, k, v, layer):
    for iv in interventions:
        if iv.applies(layer):
            q, k, v = iv.edit_inputs(q, k, v)
    return q, k, v


def apply_scores(interventions, masked_scores, block):
    for iv in interventions:
        if iv.applies(block.layer):
            masked_scores = iv.edit_scores(masked_scores, block)
    return masked_scores


def apply_weights(interventions, weights, block):
    for iv in interventions:
        if iv.applies(block.layer):
            weights = iv.edit_weights(weights, block)
    return weights


def apply_out(interventions, out, q0, q1, layer):
    for iv in interventions:
        if iv.applies(layer):
            out = iv.edit_out(out, q0, q1)
    return out


class HeadGate(Intervention):
    """out_h ← g[layer, h] · out_h, with g a leaf tensor [L, H] of ones that requires grad: −∂M/∂g is the
    first-order change of a metric M when the head is removed (attribution patching)."""

    def __init__(self, gates, layer):
        super().__init__([], layer)
        self.gates = gates

    def edit_out(self, out, q0, q1):
        return out * self.gates[self.layer].view(1, -1, 1, 1).to(out.dtype)
