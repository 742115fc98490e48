"""harvardnlp/annotated-transformer — the_annotated_transformer.py, attention().

Source: https://github.com/harvardnlp/annotated-transformer, path the_annotated_transformer.py,
commit 0a91a254735c07532e23733dce8a693e504f3a08. License: MIT, Copyright (c) 2018 Alexander Rush.
Copied: attention() unchanged (dropout None). Adapter: its mask is a keep-mask (mask == 0 is
hidden), the SDPA convention; it has no grouped-query heads (Unsupported).

Expected, from reading: right routing in fp32 and bf16. masked_fill(mask == 0, -1e9) raises in
fp16 ("value cannot be converted to type at::Half without overflow"), so every fp16 case that
carries a mask fails; the mask-free fp16 cases (scale, scale_dv, normalization_axis) pass. A row
that may see nothing gets -1e9 everywhere and so uniform weight over masked keys: a hazard
(q_longer_than_k, empty_rows). NaN in masked keys is replaced by masked_fill (no leak); NaN in
masked values leaks through 0·NaN: a hazard.
"""

import math

import torch

from attnroute.check import Unsupported


def attention(query, key, value, mask=None, dropout=None):
    "Compute 'Scaled Dot Product Attention'"
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


def target(q, k, v, attn_mask=None):
    if q.shape[1] != k.shape[1]:
        raise Unsupported("the Annotated Transformer has no grouped-query heads")
    return attention(q, k, v, mask=attn_mask)


MASKED_FP16 = [
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
        "name": "Annotated Transformer",
        "fn": target,
        "convention": "sdpa",
        "expect": {
            "grouped_heads": "n/a",
            "q_longer_than_k": "hazard",
            "empty_rows": "hazard",
            "masked_values": "hazard",
            **{f"{c}_fp16": "fail" for c in MASKED_FP16},
        },
    }
]
