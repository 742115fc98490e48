"""openai/whisper — whisper/model.py, MultiHeadAttention.qkv_attention (the manual path) with the
TextDecoder's additive causal mask.

Source: https://github.com/openai/whisper, path whisper/model.py, commit 0060c61428cc2f432b346c803e405f1cd7fbfc87.
License: MIT, Copyright (c) 2022 OpenAI. Copied: qkv_attention and the decoder's mask
(torch.empty(n_ctx, n_ctx).fill_(-inf).triu_(1)). Adapter: q, k, v [B, H, T, D] are flattened to
whisper's [B, T, n_state]; the mask is whisper's own (the causal convention). Whisper slices the mask
as mask[:n_ctx, :n_ctx] with n_ctx the number of *queries*: right for the prompt (Tq = Tk) and for
one decoded token (a [1, 1] zero broadcast over the keys), and it cannot take 1 < Tq < Tk (the
shapes do not broadcast) — whisper never asks for that, so those cases are Unsupported.

Expected, from reading: the scale is split as d^-0.25 on q and on k (product 1/√d); every check it
can express passes.
"""

import numpy as np
import torch
import torch.nn.functional as F

from attnroute.check import Unsupported

N_TEXT_CTX = 64
decoder_mask = torch.empty(N_TEXT_CTX, N_TEXT_CTX).fill_(-np.inf).triu_(1)


def qkv_attention(n_head, q, k, v, mask=None):
    n_batch, n_ctx, n_state = q.shape
    scale = (n_state // n_head) ** -0.25
    q = q.view(*q.shape[:2], n_head, -1).permute(0, 2, 1, 3) * scale
    k = k.view(*k.shape[:2], n_head, -1).permute(0, 2, 3, 1) * scale
    v = v.view(*v.shape[:2], n_head, -1).permute(0, 2, 1, 3)

    qk = q @ k
    if mask is not None:
        qk = qk + mask[:n_ctx, :n_ctx]

    w = F.softmax(qk.float(), dim=-1).to(q.dtype)
    return (w @ v).permute(0, 2, 1, 3).flatten(start_dim=2)


def target(q, k, v):
    B, H, Tq, D = q.shape
    Tk = k.shape[2]
    if k.shape[1] != H or v.shape[-1] != D:
        raise Unsupported("whisper's heads share one count and one size for q, k and v")
    if not (Tq == Tk or Tq == 1):
        raise Unsupported("whisper runs its prompt (Tq = Tk), then one token at a time (Tq = 1)")
    flat = [t.transpose(1, 2).reshape(B, t.shape[2], H * D) for t in (q, k, v)]
    out = qkv_attention(H, *flat, mask=decoder_mask.to(q.dtype))
    return out.view(B, Tq, H, D).transpose(1, 2)


TARGETS = [
    {
        "name": "Whisper qkv_attention",
        "fn": target,
        "convention": "causal",
        "expect": {"scale": "pass", "causal": "pass"},
    }
]
