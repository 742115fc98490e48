"""sdpa: torch's fused scaled_dot_product_attention. Holds no weights (may hold the bool mask).

It expresses: any bool mask (bottom-right causal is passed as an explicit mask, because SDPA's
``is_causal`` is top-left: pytorch #108108), grouped heads (``enable_gqa``), custom scale,
D ≠ Dv. It cannot: return weights, run probes or interventions, soft-cap. For those it raises
UnsupportedRequest naming eager/blocked; it never falls back silently.

torch 2.13 returns zeros for a fully masked row (the _safe_softmax of PR #131060), which is
attnroute's convention; a test pins that.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..masks import Predicated
from ..stages import all_finite
from ..trace import Trace
from .common import Request, UnsupportedRequest


def why_not(req: Request) -> str | None:
    """None when sdpa can run the request, else the reason it cannot."""
    if req.probes:
        return "sdpa holds no weights, so probes cannot read them; use impl='eager' or 'blocked'"
    if req.interventions:
        return "sdpa cannot edit scores, weights or per-head outputs; use impl='eager' or 'blocked'"
    if req.softcap:
        return "torch SDPA has no soft-cap; use impl='eager' or 'blocked'"
    return None


def _is_plain_causal(req: Request) -> bool:
    m = req.mask
    B, H, Hkv, Tq, Tk, D, Dv = req.dims
    return isinstance(m, Predicated) and m.name == "causal" and (Tq == Tk or m.align == "top_left")


def _sanitize_masked(req: Request):
    """Zero non-finite k/v at keys no query may see: SDPA's matmul would turn 0·NaN into NaN
    (pytorch #101967). A non-finite k/v at a key only some rows see cannot be kept out of the
    others by a fused kernel, so that case is refused."""
    k, v = req.k, req.v
    if all_finite(k, v):
        return k, v
    bad = ~(torch.isfinite(k).all(-1) & torch.isfinite(v).all(-1))  # (B, Hkv, Tk)
    B, H, Hkv, Tq, Tk, D, Dv = req.dims
    keep = req.keep_rows(0, Tq)  # materialized only when there is garbage to place
    if keep is None:
        return k, v  # every key is visible: NaN in, NaN out, as in the reference
    G = H // Hkv
    seen = keep.expand(B, H, Tq, Tk).any(dim=2).view(B, Hkv, G, Tk).any(dim=2)  # (B, Hkv, Tk)
    partly = bad & seen & ~keep.expand(B, H, Tq, Tk).all(dim=2).view(B, Hkv, G, Tk).all(dim=2)
    if bool(partly.any()):
        raise UnsupportedRequest(
            "sdpa: a non-finite key/value sits at a key that some rows may see and others may not; a fused "
            "kernel would leak it into the rows that mask it. Use impl='eager' or 'blocked'"
        )
    hide = (bad & ~seen)[..., None]  # (B, Hkv, Tk, 1)
    return k.masked_fill(hide, 0.0), v.masked_fill(hide, 0.0)


def run(req: Request) -> tuple[torch.Tensor, Trace | None]:
    reason = why_not(req)
    if reason:
        raise UnsupportedRequest(reason)
    B, H, Hkv, Tq, Tk, D, Dv = req.dims
    gqa = H != Hkv
    if _is_plain_causal(req):
        k, v = _sanitize_masked(req)
        out = F.scaled_dot_product_attention(req.q, k, v, is_causal=True, scale=req.scale, enable_gqa=gqa)
        return out, (Trace("sdpa", out=out, notes=["is_causal fast path"]) if req.want_trace else None)
    keep = req.keep_rows(0, Tq)
    k, v = _sanitize_masked(req)
    out = F.scaled_dot_product_attention(req.q, k, v, attn_mask=keep, scale=req.scale, enable_gqa=gqa)
    return out, (Trace("sdpa", out=out, notes=["explicit bool mask"]) if req.want_trace else None)
