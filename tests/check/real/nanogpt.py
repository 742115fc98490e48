"""karpathy/nanoGPT — model.py, CausalSelfAttention.forward (both paths).

Source: https://github.com/karpathy/nanoGPT, path model.py, commit 0011cd4442915c844e9b8f5c5117f25f5a7096c5.
License: MIT, Copyright (c) 2022 Andrej Karpathy (the MIT notice applies to the copied lines).
Copied: the attention lines of CausalSelfAttention.forward, manual and flash paths; the projections
and dropout (0 in eval) are left out. Adapter: q, k, v arrive [B, H, T, hs] as in the original after
its view/transpose. nanoGPT takes no mask (it is causal by construction) and is self-attention
only, so cases with Tq ≠ Tk, grouped heads or D ≠ Dv cannot be said to it (Unsupported).

Expected, from reading: the scale is 1/√hs of k (= q's dim); causal masking with -inf on the
(T, T) buffer; the flash path is SDPA's is_causal (top-left, right for Tq = Tk). Every check it
can express passes.
"""

import math

import torch
from torch.nn import functional as F

from attnroute.check import Unsupported

BLOCK_SIZE = 64
bias = torch.tril(torch.ones(BLOCK_SIZE, BLOCK_SIZE)).view(1, 1, BLOCK_SIZE, BLOCK_SIZE)


def _self_attention_only(q, k, v):
    if q.shape[2] != k.shape[2]:
        raise Unsupported("nanoGPT attends a sequence to itself (Tq = Tk)")
    if q.shape[1] != k.shape[1]:
        raise Unsupported("nanoGPT has no grouped-query heads")
    if q.shape[-1] != v.shape[-1]:
        raise Unsupported("nanoGPT's q, k and v share one head size")


def manual(q, k, v):
    _self_attention_only(q, k, v)
    T = q.shape[2]
    # --- copied (model.py, manual implementation of attention) ---
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    att = att.masked_fill(bias[:, :, :T, :T] == 0, float("-inf"))
    att = F.softmax(att, dim=-1)
    y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
    return y


def flash(q, k, v):
    _self_attention_only(q, k, v)
    # --- copied (model.py, efficient attention) ---
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0, is_causal=True)
    return y


# In the causal convention every check defaults to n/a; these are the ones nanoGPT can be asked.
CAN_SAY = {"scale": "pass", "causal": "pass"}
TARGETS = [
    {"name": "nanoGPT manual", "fn": manual, "convention": "causal", "expect": CAN_SAY},
    {"name": "nanoGPT flash", "fn": flash, "convention": "causal", "expect": CAN_SAY},
]
