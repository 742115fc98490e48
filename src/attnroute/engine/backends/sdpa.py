"""sdpa: torch's fused scaled_dot_product_attention. Holds no weights (may hold the bool mask).

It expresses: an additive score bias (passed as a float mask), any bool mask (bottom-right causal
is passed as an explicit mask, because SDPA's ``is_causal`` is top-left: pytorch #108108), grouped
heads (``enable_gqa``), custom scale, D ≠ Dv, interventions that edit only q, k, v or the heads' outputs
(a head zeroed, patched or gated: the output edited after the kernel). It cannot: return weights, run
probes or interventions that edit scores or weights, soft-cap, sink logits. For those it raises
UnsupportedRequest naming eager/blocked; it never falls back silently.

torch 2.13 returns zeros for a fully masked row (the _safe_softmax of PR #131060), which is
attnroute's convention; a test pins that.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..interventions import apply_out
from ..masks import causal_alignment, is_torch_causal
from ..stages import all_finite
from ..trace import Trace
from .common import Request, UnsupportedRequest


def why_not(req: Request) -> str | None:
    """None when sdpa can run the request, else the reason it cannot."""
    if req.probes:
        return "sdpa holds no weights, so probes cannot read them; use impl='eager' or 'blocked'"
    if any(iv.needs_weights() for iv in req.interventions):
        return "sdpa cannot edit scores or weights; use impl='eager' or 'blocked'"
    if req.softcap:
        return "torch SDPA has no soft-cap; use impl='eager' or 'blocked'"
    if req.sinks is not None:
        return "torch SDPA has no sink logits in the softmax denominator; use impl='eager' or 'blocked'"
    if not req.scale > 0:
        return f"torch SDPA returns NaN for scale <= 0 under a causal mask (scale={req.scale:g}); use impl='eager'"
    if not all_finite(req.q):
        return "torch SDPA turns a row with a non-finite query into zeros; use impl='eager' (NaN propagates)"
    return _garbage(req)[1]


def _garbage(req: Request) -> tuple[torch.Tensor | None, str | None]:
    """Where non-finite k/v sit: (keys to zero [B, Hkv, Tk, 1] or None, reason sdpa cannot run or None).

    A fused kernel computes q·k for every key before masking and sums weights·v over every key, so
    NaN/inf at a masked key would leak (0·NaN = NaN: pytorch #101967) — such keys are zeroed, which
    changes nothing a row may see. A non-finite key that some row *may* see cannot be handled:
    torch SDPA turns that row into zeros, where IEEE arithmetic (and eager) give NaN."""
    k, v = req.k, req.v
    if all_finite(k, v):
        return None, None
    bad_k = ~torch.isfinite(k).all(-1)  # (B, Hkv, Tk)
    bad = bad_k | ~torch.isfinite(v).all(-1)
    B, H, Hkv, Tq, Tk, D, Dv = req.dims
    keep = req.keep_rows(0, Tq)  # materialized only when there is garbage to place
    G = H // Hkv
    full = torch.ones(B, H, Tq, Tk, dtype=torch.bool) if keep is None else keep.expand(B, H, Tq, Tk)
    seen = full.any(dim=2).view(B, Hkv, G, Tk).any(dim=2)  # (B, Hkv, Tk): some row may see the key
    if bool((bad_k & seen).any()):
        return None, "a non-finite key that some row may see: torch SDPA gives that row zeros, not NaN; use eager"
    partly = bad & seen & ~full.all(dim=2).view(B, Hkv, G, Tk).all(dim=2)
    if bool(partly.any()):
        return None, (
            "a non-finite value at a key that some rows may see and others may not: a fused kernel "
            "would leak it into the rows that mask it; use eager or blocked"
        )
    hide = bad & ~seen
    return (hide[..., None] if bool(hide.any()) else None), None


def _clean(req: Request):
    """k, v with non-finite entries at keys no row may see set to zero (see _garbage)."""
    hide, _ = _garbage(req)
    if hide is None:
        return req.k, req.v
    return req.k.masked_fill(hide, 0.0), req.v.masked_fill(hide, 0.0)


def _cached_causal(req: Request, gqa: bool) -> tuple[torch.Tensor, Trace | None]:
    """Bottom-right causal with Tq < Tk (the queries after a KV cache): the last Tq rows of a causal square,
    so the queries go in after Tk − Tq rows of zeros and SDPA's is_causal skips the future. An explicit mask
    makes the kernel visit every key: 0.30 s against 0.14 s per layer at 4,096 keys on 2 cores. Taken when the
    padding is at most the queries themselves (the square's Tk²/2 scores against the mask's Tq·Tk)."""
    B, H, Hkv, Tq, Tk, D, Dv = req.dims
    k, v = _clean(req)
    q = torch.cat([req.q.new_zeros(B, H, Tk - Tq, D), req.q], dim=2)  # (B, H, Tk, D): the zero rows discarded
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=req.scale, enable_gqa=gqa)[:, :, Tk - Tq :]
    trace = Trace("sdpa", out=out, notes=["cached causal: is_causal on the padded square"]) if req.want_trace else None
    return out, trace


def run(req: Request) -> tuple[torch.Tensor, Trace | None]:
    """The fused kernel, then the interventions' edits of the heads' outputs (the only edits it allows)."""
    reason = why_not(req)
    if reason:
        raise UnsupportedRequest(reason)
    out, trace = _fused(req)
    if req.interventions:
        out = apply_out(req.interventions, out, 0, req.dims[3], req.layer)
        if trace is not None:
            trace.out = out
    return out, trace


def _fused(req: Request) -> tuple[torch.Tensor, Trace | None]:
    B, H, Hkv, Tq, Tk, D, Dv = req.dims
    gqa = H != Hkv
    if req.bias is not None:  # the bias travels as a float mask: bias where a key may be seen, -inf elsewhere
        keep = req.keep_rows(0, Tq)
        additive = req.bias.to(req.q.dtype)
        if keep is not None:
            additive = additive.masked_fill(~keep, float("-inf"))
        k, v = _clean(req)
        out = F.scaled_dot_product_attention(req.q, k, v, attn_mask=additive, scale=req.scale, enable_gqa=gqa)
        if keep is not None:  # a row that may see nothing: zeros, whatever the kernel does with all -inf
            out = out.masked_fill(~keep.any(-1, keepdim=True), 0.0)
        return out, (Trace("sdpa", out=out, notes=["bias as a float mask"]) if req.want_trace else None)
    if is_torch_causal(req.mask, Tq, Tk):
        k, v = _clean(req)
        out = F.scaled_dot_product_attention(req.q, k, v, is_causal=True, scale=req.scale, enable_gqa=gqa)
        return out, (Trace("sdpa", out=out, notes=["is_causal fast path"]) if req.want_trace else None)
    if causal_alignment(req.mask) == "bottom_right" and 0 < Tk - Tq <= Tq:
        return _cached_causal(req, gqa)
    keep = req.keep_rows(0, Tq)
    k, v = _clean(req)
    out = F.scaled_dot_product_attention(req.q, k, v, attn_mask=keep, scale=req.scale, enable_gqa=gqa)
    return out, (Trace("sdpa", out=out, notes=["explicit bool mask"]) if req.want_trace else None)
