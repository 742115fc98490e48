"""huggingface/pytorch-image-models (timm) — timm/layers/attention.py, Attention.forward and
maybe_add_mask, before bool masks were handled in the unfused path.

Source: https://github.com/huggingface/pytorch-image-models, path timm/layers/attention.py, commit
f354b305260bfd7c03b44421eb83f6350216d619. License: Apache-2.0, Copyright 2019 Ross Wightman
(http://www.apache.org/licenses/LICENSE-2.0). Copied: maybe_add_mask and the two attention paths
of Attention.forward (dropout 0). Later commits convert a bool mask to an additive one first
(resolve_self_attn_mask; see huggingface/pytorch-image-models PR #2674 for the report).
Adapter: the fused path hands the mask to torch SDPA, which takes a bool keep-mask, so users pass
one (the SDPA convention); scale = head_dim ** -0.5 of the q/k head dim; no grouped-query heads.

Expected, from reading: the fused path routes correctly (with SDPA's hazards). The unfused path
*adds* the bool mask to the scores, so a visible key gets +1 and a masked key +0: every check with
a mask fails, named "bool mask added". Without a mask (scale, scale_dv, normalization_axis) both
paths are right. In the unfused path NaN/inf in masked keys or values leak (hazard... but masked
keys carry weight, so a finite value leaks too: fail).
"""

import torch
import torch.nn.functional as F


def maybe_add_mask(scores: torch.Tensor, attn_mask: torch.Tensor | None = None):
    return scores if attn_mask is None else scores + attn_mask


def _attention(q, k, v, attn_mask, fused_attn):
    # no guard for grouped heads: timm's own code raises on them (a shape it cannot take), and the battery
    # reports that case as n/a "the target does not accept grouped heads", not as a bug
    scale = q.shape[-1] ** -0.5  # self.scale = self.head_dim ** -0.5
    # --- copied (Attention.forward) ---
    if fused_attn:
        x = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=attn_mask,
            dropout_p=0.0,
        )
    else:
        q = q * scale
        attn = q @ k.transpose(-2, -1)
        attn = maybe_add_mask(attn, attn_mask)
        attn = attn.softmax(dim=-1)
        x = attn @ v
    return x


def fused(q, k, v, attn_mask=None):
    return _attention(q, k, v, attn_mask, fused_attn=True)


def unfused(q, k, v, attn_mask=None):
    return _attention(q, k, v, attn_mask, fused_attn=False)


MASKED = [
    "causal",
    "kv_decode",
    "padding_right",
    "padding_left",
    "batch_independence",
    "decode_alignment",
    "q_longer_than_k",
    "sliding_window",
    "document",
    "empty_rows",
    "masked_keys",
    "masked_values",
    "sentinel_overrun",
]
TARGETS = [
    {
        "name": "timm Attention (fused)",
        "fn": fused,
        "convention": "sdpa",
        "expect": {"grouped_heads": "n/a", "masked_keys": "hazard", "masked_values": "hazard"},
    },
    {
        "name": "timm Attention (unfused)",
        "fn": unfused,
        "convention": "sdpa",
        "expect": {"grouped_heads": "n/a", **{c: "fail" for c in MASKED}},
        "cause": "bool mask is added",
    },
]
