"""How a target wants its mask, and how to call it.

A target is called as ``fn(q, k, v, attn_mask=mask)`` with q [B, H, Tq, D], k/v [B, Hkv, Tk, D]; it
returns [B, H, Tq, D] or a tuple whose first item is that. attnroute holds one logical mask
(bool, True = may attend) and converts it to the target's declared convention here:

    sdpa       bool, True = may attend (torch SDPA)
    mha        bool, True = masked out (nn.MultiheadAttention attn_mask)
    additive   float, 0 = may attend, -inf = masked
    hf         float, 0 = may attend, finfo(dtype).min = masked (transformers' eager 4-D mask)
"""

from __future__ import annotations

import torch

from ..engine import to_additive, to_mha

CONVENTIONS = ("sdpa", "mha", "additive", "hf")


def convert(keep: torch.Tensor | None, convention: str, dtype: torch.dtype):
    if keep is None:
        return None
    if convention == "sdpa":
        return keep
    if convention == "mha":
        return to_mha(keep)
    if convention == "additive":
        return to_additive(keep, dtype)
    if convention == "hf":
        return to_additive(keep, dtype, sentinel="min")
    raise ValueError(f"unknown convention {convention!r}; expected one of {CONVENTIONS}")


class TargetRejected(Exception):
    """The target raised for this shape or dtype: the check is reported as skipped."""


def call(fn, q, k, v, keep, convention):
    mask = convert(keep, convention, q.dtype)
    try:
        out = fn(q, k, v, attn_mask=mask)
    except Exception as e:  # a target that rejects a shape is skipped for that check, not failed
        raise TargetRejected(f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}") from None
    if isinstance(out, (tuple, list)):
        out = out[0]
    if not isinstance(out, torch.Tensor) or out.shape[:3] != q.shape[:3]:
        shape = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise TargetRejected(f"returned {shape}, expected [B, H, Tq, Dv] = {list(q.shape[:3])} + [Dv]")
    return out
