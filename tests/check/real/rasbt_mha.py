"""rasbt/LLMs-from-scratch — ch04/01_main-chapter-code/previous_chapters.py, MultiHeadAttention.forward.

Source: https://github.com/rasbt/LLMs-from-scratch, path ch04/01_main-chapter-code/previous_chapters.py,
commit bbb2a0c3d59dcfb0df3260408f6848c7251cdad7. License: Apache-2.0, Copyright 2023-2025 Sebastian
Raschka. Copied: the attention lines of forward (projections, dropout left out). Adapter: q, k, v
[b, num_heads, num_tokens, head_dim]; the causal mask is the module's own triu buffer
(True = masked out), so: the causal convention, self-attention only.

Expected, from reading: scale 1/√(keys' head_dim), causal by masked_fill_(-inf): every check it can
express passes.
"""

import torch

from .nanogpt import _self_attention_only

context_length = 64
mask = torch.triu(torch.ones(context_length, context_length), diagonal=1)


def target(queries, keys, values):
    _self_attention_only(queries, keys, values)
    num_tokens = queries.shape[2]
    # --- copied ---
    attn_scores = queries @ keys.transpose(2, 3)  # Dot product for each head

    # Original mask truncated to the number of tokens and converted to boolean
    mask_bool = mask.bool()[:num_tokens, :num_tokens]

    # Use the mask to fill attention scores
    attn_scores.masked_fill_(mask_bool, -torch.inf)

    attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
    context_vec = attn_weights @ values
    return context_vec


TARGETS = [
    {
        "name": "LLMs-from-scratch MultiHeadAttention",
        "fn": target,
        "convention": "causal",
        "expect": {"scale": "pass", "causal": "pass"},
    }
]
