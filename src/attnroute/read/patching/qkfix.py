"""AtP*'s QK fix (Kramár et al. 2024, arXiv 2403.00745): the estimate of patching a query or a key with the
attention softmax recomputed exactly, linearized only after the head's output.

The plain estimate Δq · ∂M/∂q linearizes the softmax, and a softmax that saturates defeats it: an induction
head's query, patched on repeated tokens, was estimated at −0.025 where the exact effect is +0.248. Here the
head's output is recomputed with the source run's queries (or keys) through the layer's own attention — the
mask, scale, soft-cap, sinks and position bias the engine received on the base run — and only the path from
the head's output to the metric is linear:

    est_q[b, h, t] = ∂M/∂z[b, h, t] · (z'[b, h, t] − z[b, h, t]),   z' = attend(q_source, k, v)
    est_k[b, g]    = Σ_{h read kv head g} Σ_t ∂M/∂z[b, h, t] · (z' − z)[b, h, t],   z' = attend(q, k_source, v)
    est_k[b, g, p] the same with only key p replaced (one recomputation per key position)

Rows do not interact given the keys and values, so the per-row query estimates add up to the whole query's;
keys do (one softmax over all of them), hence the recomputation per position. Values enter linearly
(z = A·v), so their plain estimate is already this one.
"""

from __future__ import annotations

import torch

from ...engine import attend


@torch.no_grad()
def qk_estimates(tap, source, mask, args: dict, per_position: bool) -> dict[str, torch.Tensor]:
    """``tap``: the base run's Tap of one layer (its values and the leaves' gradients); ``source``: the other
    run's Recorder of the layer; ``mask``/``args``: what attend received. Returns {"q": [B, H, T],
    "k_total": [B, Hkv], "k": [B, Hkv, Tk] (only with ``per_position``)}."""
    g = tap.leaves["out"].grad.float()  # (B, H, T, Dv)
    z = tap.values["out"].float()
    q, k, v = tap.values["q"], tap.values["k"], tap.values["v"]
    B, H = q.shape[:2]
    Hkv, Tk = k.shape[1], k.shape[2]

    def effect(q_, k_) -> torch.Tensor:  # (B, H, T): the head outputs' change, read by the gradient
        return ((attend(q_, k_, v, mask, impl="eager", **args).float() - z) * g).sum(-1)

    out = {"q": effect(source.q.to(q.dtype), k)}
    out["k_total"] = effect(q, source.k.to(k.dtype)).sum(-1).view(B, Hkv, H // Hkv).sum(-1)
    if per_position:
        pos = torch.empty(B, Hkv, Tk)
        for p in range(Tk):
            k_p = k.clone()
            k_p[:, :, p] = source.k[:, :, p].to(k.dtype)
            pos[:, :, p] = effect(q, k_p).sum(-1).view(B, Hkv, H // Hkv).sum(-1)
        out["k"] = pos
    return out


__all__ = ["qk_estimates"]
