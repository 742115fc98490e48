"""pytorch-labs/gpt-fast — model.py, Attention.forward (the attention lines).

Source: https://github.com/pytorch-labs/gpt-fast, path model.py, commit 03e10bc23f31487a0353f22da7f506f0841ed720.
License: BSD-3-Clause, Copyright (c) Meta Platforms, Inc. and affiliates.
Copied: the grouped-head expansion and the SDPA call; projections, RoPE and the KV cache update are
left out. Adapter: gpt-fast hands SDPA a bool keep-mask (its causal_mask sliced at input_pos), the
SDPA convention; n_head // n_local_heads is H // Hkv.

Expected, from reading: correct routing everywhere, grouped heads in repeat_interleave order; the
hazards of torch's fused kernel (NaN/inf behind the mask leaks through 0·NaN), nothing else.
"""

import torch.nn.functional as F


def target(q, k, v, attn_mask=None):
    n_head, n_local_heads = q.shape[1], k.shape[1]
    # --- copied ---
    k = k.repeat_interleave(n_head // n_local_heads, dim=1)
    v = v.repeat_interleave(n_head // n_local_heads, dim=1)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=0.0)
    return y


TARGETS = [
    {
        "name": "gpt-fast",
        "fn": target,
        "convention": "sdpa",
        "expect": {"masked_keys": "hazard", "masked_values": "hazard"},
    }
]
