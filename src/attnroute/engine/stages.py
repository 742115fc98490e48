"""The five stages of attention, each a small pure function.

    project → score → scale+mask → normalize → aggregate
    x ─────→ q,k,v ─→ scores ───→ masked_scores ─→ weights ─→ out

Letters: B batch, H query heads, Hkv kv heads, G = H/Hkv, Tq queries, Tk keys, D q/k head dim,
Dv value head dim, C model width.

Grouped heads: query heads g·G … (g+1)·G − 1 read kv head g (repeat_interleave order, as
FlashAttention and transformers' repeat_kv). K and V are never copied per query head: q is
viewed as [B, Hkv, G·Tq, D] so one batched matmul serves the whole group.
"""

from __future__ import annotations

import math

import torch

NEG_INF = float("-inf")


def project(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, n_heads: int) -> torch.Tensor:
    """x [B, T, C] through a linear map, split into heads -> [B, n_heads, T, D]."""
    B, T, _ = x.shape
    y = torch.nn.functional.linear(x, weight, bias)  # (B, T, n_heads·D)
    return y.view(B, T, n_heads, -1).transpose(1, 2)  # (B, n_heads, T, D)


def score(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q [B, H, Tq, D] · k [B, Hkv, Tk, D] -> scores [B, H, Tq, Tk] (unscaled dot products)."""
    B, H, Tq, D = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    qg = q.reshape(B, Hkv, (H // Hkv) * Tq, D)  # (B, Hkv, G·Tq, D)
    s = torch.matmul(qg, k.transpose(-1, -2))  # (B, Hkv, G·Tq, Tk)
    return s.view(B, H, Tq, Tk)  # (B, H, Tq, Tk)


def default_scale(D: int) -> float:
    """1/√D (Vaswani et al. 2017, §3.2.1): keeps unit-variance logits at unit variance."""
    return 1.0 / math.sqrt(D)


def scale_and_mask(
    scores: torch.Tensor,
    scale: float,
    keep: torch.Tensor | None,
    softcap: float | None = None,
    inplace: bool = False,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """scores·scale, optionally soft-capped (cap·tanh(s/cap), Gemma-2), plus an additive ``bias`` (T5's
    relative position bias, ALiBi's slopes; after scaling, before masking, as both models do), then
    -inf where keep is False.

    The mask is applied with masked_fill, never by adding a large negative: sums of fp16/bf16
    sentinels overflow (huggingface/transformers PR #17306, PR #27114). ``inplace`` reuses the
    scores' memory when the caller no longer needs them (saves two passes over [.., Tq, Tk]).
    """
    if scale == 1.0:
        s = scores
    else:
        s = scores.mul_(scale) if inplace else scores * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if bias is not None:
        s = s.add_(bias) if inplace and s is scores else s + bias
    if keep is None:
        return s
    if not inplace:
        return s.masked_fill(~keep, NEG_INF)
    # Columns every row may see need no fill: for a causal block that is all but the diagonal tile.
    c0 = first_masked_column(keep)
    if c0 < s.shape[-1]:
        s[..., c0:].masked_fill_(~keep[..., c0:], NEG_INF)
    return s


def first_masked_column(keep: torch.Tensor) -> int:
    """Index of the first key column that some row may not see (len if none)."""
    partial = ~keep.reshape(-1, keep.shape[-1]).all(dim=0)  # (Tk,)
    idx = torch.nonzero(partial).flatten()
    return int(idx[0]) if idx.numel() else keep.shape[-1]


def normalize_with_sinks(
    masked_scores: torch.Tensor, sinks: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Softmax over the keys and one sink logit per head (gpt-oss's attention sinks, Xiao et al. 2023's
    learned variant): p_ij = exp(s_ij − lse_i) with lse_i = log(Σ_j e^{s_ij} + e^{sink_h}).

    The weights of a row sum to 1 − p_sink: the sink takes mass and carries no value. A row that may
    see nothing gives all its mass to the sink, so its output is zero (attnroute's convention) with
    no special case. Returns (weights [.., Tq, Tk] in the input dtype, lse [.., Tq], sink mass [.., Tq]).
    """
    s = masked_scores.to(torch.promote_types(masked_scores.dtype, torch.float32))
    sink = sinks.to(s.dtype).view(1, -1, 1)  # (1, H, 1)
    m = torch.maximum(s.amax(dim=-1), sink)  # (B, H, Tq); finite: the sink is finite
    z = torch.exp(s - m[..., None]).sum(-1) + torch.exp(sink - m)
    lse = m + torch.log(z)  # (B, H, Tq)
    weights = torch.exp(s - lse[..., None])
    return weights.to(masked_scores.dtype), lse, torch.exp(sink - lse)


def normalize(
    masked_scores: torch.Tensor, with_lse: bool = True, keep: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Softmax over keys, computed in fp32 (fp64 for fp64 inputs), safe for rows that may attend to nothing.

    Returns (weights in the input dtype [.., Tq, Tk], lse [.., Tq] or None). A row whose scores are
    all -inf gets weights 0 and lse -inf, and finite gradients: torch's fused softmax gives NaN
    there, so those rows are overwritten (what torch's _safe_softmax does, pytorch PR #131060). Their
    gradient is finite because every score of such a row was masked_fill'ed, which passes back 0.
    ``keep`` (the mask these scores were masked with) finds the empty rows without a pass over s.
    """
    s = masked_scores.to(torch.promote_types(masked_scores.dtype, torch.float32))
    weights = torch.softmax(s, dim=-1)
    if keep is not None:
        empty = ~keep.any(dim=-1, keepdim=True)  # (b?, h?, Tq, 1): rows that see nothing
    else:
        empty = torch.isneginf(s.amax(dim=-1, keepdim=True))  # (.., Tq, 1)
    if bool(empty.any()):
        weights = weights.masked_fill(empty, 0.0)
    lse = torch.logsumexp(s, dim=-1) if with_lse else None  # -inf for empty rows
    return weights.to(masked_scores.dtype), lse


def all_finite(*tensors: torch.Tensor) -> bool:
    """True when every entry is finite. One reduction per tensor instead of a bool copy: a finite sum
    proves it; an inf/NaN sum (garbage, or a harmless overflow) sends the caller to the exact path."""
    return all(t.numel() == 0 or bool(torch.isfinite(t.sum())) or bool(torch.isfinite(t).all()) for t in tensors)


def aggregate(weights: torch.Tensor, v: torch.Tensor, v_finite: bool | None = None) -> torch.Tensor:
    """weights [B, H, Tq, Tk] · v [B, Hkv, Tk, Dv] -> out [B, H, Tq, Dv].

    A non-finite value must not reach a row whose weight on it is 0 (0·NaN = NaN in a matmul:
    pytorch #101967). Values are made finite for the matmul; rows that do give weight to a
    NaN/±inf value get it back as IEEE arithmetic would. ``v_finite`` lets a caller that already
    checked the whole v (the blocked backend, once per call) skip the check per block.
    """
    B, H, Tq, Tk = weights.shape
    Hkv, Dv = v.shape[1], v.shape[3]
    w = weights.reshape(B, Hkv, (H // Hkv) * Tq, Tk)  # (B, Hkv, G·Tq, Tk)
    if v_finite if v_finite is not None else all_finite(v):
        return torch.matmul(w, v).view(B, H, Tq, Dv)  # (B, H, Tq, Dv)
    finite = torch.isfinite(v)
    out = torch.matmul(w, torch.where(finite, v, torch.zeros_like(v)))  # (B, Hkv, G·Tq, Dv)
    seen = (w != 0).to(v.dtype)
    hit_nan = torch.matmul(seen, torch.isnan(v).to(v.dtype)) > 0
    hit_pos = torch.matmul(seen, torch.isposinf(v).to(v.dtype)) > 0
    hit_neg = torch.matmul(seen, torch.isneginf(v).to(v.dtype)) > 0
    out = torch.where(hit_pos, torch.full_like(out, float("inf")), out)
    out = torch.where(hit_neg, torch.full_like(out, NEG_INF), out)
    out = torch.where(hit_nan | (hit_pos & hit_neg), torch.full_like(out, float("nan")), out)
    return out.view(B, H, Tq, Dv)  # (B, H, Tq, Dv)
