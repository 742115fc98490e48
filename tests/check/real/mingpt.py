"""karpathy/minGPT — mingpt/model.py, CausalSelfAttention.forward.

Source: https://github.com/karpathy/minGPT, path mingpt/model.py, commit 08c08d8db0475a1cea334a25bf98dee51972180c.
License: MIT, Copyright (c) 2020 Andrej Karpathy.
Copied: the attention lines of forward (projections, dropout and the autocast decorator left out).
Adapter: q, k, v [B, nh, T, hs]; self-attention only, no mask argument (Unsupported otherwise).

Expected, from reading: 1/√hs scale, causal by a -inf masked_fill on the (T, T) buffer: every check
it can express passes.
"""

import math

import torch
from torch.nn import functional as F

from .nanogpt import _self_attention_only

BLOCK_SIZE = 64
mask = torch.tril(torch.ones(BLOCK_SIZE, BLOCK_SIZE)).view(1, 1, BLOCK_SIZE, BLOCK_SIZE)


def attention(q, k, v):
    _self_attention_only(q, k, v)
    T = q.shape[2]
    # --- copied ---
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf"))
    att = F.softmax(att, dim=-1)
    y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
    return y


TARGETS = [{"name": "minGPT", "fn": attention, "convention": "causal", "expect": {"scale": "pass", "causal": "pass"}}]
