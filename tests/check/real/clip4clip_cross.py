"""ArrowLuo/CLIP4Clip — modules/module_cross.py, ResidualAttentionBlock.attention: a per-example mask tiled
over batch × heads for nn.MultiheadAttention.

Source: https://github.com/ArrowLuo/CLIP4Clip, path modules/module_cross.py, commit
fd833058dcb176d4291861c509c50e6b5fc651f0 (before the fix) and commit 7bcad1097141df1c87ead5813be5075013398cdb
(the fix). License: MIT, Copyright (c) 2021 ArrowLuo. Copied: ResidualAttentionBlock.attention at each
commit and the mask of build_attention_mask ((1 − mask) · −1e6, additive). The bug: nn.MultiheadAttention
reads a 3-D attn_mask as [N · num_heads, L, S] indexed batch · num_heads + head, but
``attn_mask.repeat(self.n_head, 1, 1)`` tiles the examples (M0, M1, M0, M1 …), so a head reads another
example's mask — reported as CLIP4Clip issue #22, fixed by ``repeat_interleave(self.n_head, dim=0)``.
Adapter: nn.MultiheadAttention(d_model, n_head) with identity in/out projections (its core is what runs),
sequence-first as CLIP4Clip calls it; the battery's keep-mask becomes CLIP4Clip's additive −1e6 mask.
Its heads share one size for q, k and v (D ≠ Dv cannot be said).

Expected, from reading: masks that differ per example (padding, batch independence, empty rows) fail,
named "the mask is tiled over batch × heads with .repeat"; masks shared by every example (causal,
windows, documents) pass; the −1e6 sentinel lets a masked key with a logit above ~1e6 through (fail), and
a row with no key averages the masked keys (hazard). The fixed block keeps only the −1e6 findings.
"""

import torch
from torch import nn

from attnroute.check import Unsupported


class ResidualAttentionBlock(nn.Module):  # the attention part; ln, mlp and residual are not the route
    def __init__(self, d_model: int, n_head: int, fixed: bool):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_head, bias=False)
        self.n_head = n_head
        self.fixed = fixed

    def attention(self, q, k, v, attn_mask: torch.Tensor):
        if self.fixed:
            # --- copied (commit 7bcad10) ---
            attn_mask_ = attn_mask.repeat_interleave(self.n_head, dim=0)
        else:
            # --- copied (commit fd83305) ---
            attn_mask_ = attn_mask.repeat(self.n_head, 1, 1)
        return self.attn(q, k, v, need_weights=False, attn_mask=attn_mask_)[0]


def _run(q, k, v, keep, fixed: bool):
    B, H, Tq, D = q.shape
    if v.shape[-1] != D:
        raise Unsupported("nn.MultiheadAttention's heads share one size for q, k and v")
    E = H * D
    block = ResidualAttentionBlock(E, H, fixed).to(q.dtype)
    with torch.no_grad():
        block.attn.in_proj_weight.copy_(torch.eye(E, dtype=q.dtype).repeat(3, 1))
        block.attn.out_proj.weight.copy_(torch.eye(E, dtype=q.dtype))
    block.eval()
    seq_first = lambda t: t.permute(2, 0, 1, 3).reshape(t.shape[2], B, -1)  # noqa: E731  (T, B, heads·D)
    if keep is None:
        keep = torch.ones(B, 1, Tq, k.shape[2], dtype=torch.bool)
    mask = keep.expand(B, 1, Tq, k.shape[2])[:, 0].to(q.dtype)  # (B, Tq, Tk), 1 = may attend
    mask = (1.0 - mask) * -1000000.0  # build_attention_mask
    with torch.no_grad():
        out = block.attention(seq_first(q), seq_first(k), seq_first(v), mask)  # (Tq, B, E)
    return out.view(Tq, B, H, D).permute(1, 2, 0, 3)


def tiled(q, k, v, attn_mask=None):
    return _run(q, k, v, attn_mask, fixed=False)


def fixed(q, k, v, attn_mask=None):
    return _run(q, k, v, attn_mask, fixed=True)


# fp16 cannot hold −1e6: the mask becomes −inf there, so its rows with no key are zeros and masked keys hide
NOT_SAID = {c: "n/a" for c in ("scale_dv", "grouped_heads")}  # D ≠ Dv; grouped heads raise in every dtype
NO_KEY = {"q_longer_than_k": "hazard", "q_longer_than_k_fp16": "pass"}
TARGETS = [
    {
        "name": "CLIP4Clip cross block (mask .repeat)",
        "fn": tiled,
        "convention": "sdpa",
        "expect": {
            **NOT_SAID,
            **NO_KEY,
            **{
                c: "fail"
                for c in (
                    "padding_right",
                    "padding_left",
                    "batch_independence",
                    "empty_rows",
                    "masked_keys",
                    "masked_values",
                )
            },
        },
        "cause": "the mask is tiled over batch × heads with .repeat",
    },
    {
        "name": "CLIP4Clip cross block (repeat_interleave, −1e6 mask)",
        "fn": fixed,
        "convention": "sdpa",
        "expect": {
            **NOT_SAID,
            **NO_KEY,
            "empty_rows": "hazard",
            "empty_rows_fp16": "pass",
            "masked_values": "hazard",
            "masked_keys": "fail",
            "masked_keys_fp16": "hazard",
        },  # the finite −1e6 gives way near 1e6
    },
]
