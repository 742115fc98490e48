"""zhouhaoyi/Informer2020 — models/attn.py, FullAttention.forward (and utils/masking.py's
TriangularCausalMask, which it builds when given no mask).

Source: https://github.com/zhouhaoyi/Informer2020, path models/attn.py, commit
0de4923224966c70b82380a747431f0005164759. License: Apache-2.0, Copyright (c) 2020 Haoyi Zhou
(http://www.apache.org/licenses/LICENSE-2.0). Copied: FullAttention.forward and the causal mask
class, unchanged but for dropout set to 0 (eval). Adapter: Informer's layout is [B, L, H, E]; its
decoder self-attention builds its own causal mask (mask_flag=True, attn_mask=None), so it is
called in the causal convention, self-attention only (Tq = Tk, same heads for q and k).

Expected, from reading: scale 1/√E of the queries, causal by masked_fill(-inf): every check it can
express passes.
"""

from math import sqrt

import numpy as np
import torch

from attnroute.check import Unsupported


class TriangularCausalMask:
    def __init__(self, B, L, device="cpu"):
        mask_shape = [B, 1, L, L]
        with torch.no_grad():
            self._mask = torch.triu(torch.ones(mask_shape, dtype=torch.bool), diagonal=1).to(device)

    @property
    def mask(self):
        return self._mask


class FullAttention(torch.nn.Module):
    def __init__(self, mask_flag=True, factor=5, scale=None, attention_dropout=0.0, output_attention=False):
        super().__init__()
        self.scale = scale
        self.mask_flag = mask_flag
        self.output_attention = output_attention
        self.dropout = torch.nn.Dropout(attention_dropout)

    def forward(self, queries, keys, values, attn_mask):
        B, L, H, E = queries.shape
        _, S, _, D = values.shape
        scale = self.scale or 1.0 / sqrt(E)

        scores = torch.einsum("blhe,bshe->bhls", queries, keys)
        if self.mask_flag:
            if attn_mask is None:
                attn_mask = TriangularCausalMask(B, L, device=queries.device)

            scores.masked_fill_(attn_mask.mask, -np.inf)

        A = self.dropout(torch.softmax(scale * scores, dim=-1))
        V = torch.einsum("bhls,bshd->blhd", A, values)

        if self.output_attention:
            return (V.contiguous(), A)
        else:
            return (V.contiguous(), None)


def target(q, k, v):
    if q.shape[2] != k.shape[2] or q.shape[1] != k.shape[1]:
        raise Unsupported("Informer's decoder self-attention: Tq = Tk and one head count")
    out, _ = FullAttention().eval()(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None)
    return out.transpose(1, 2)  # [B, L, H, D] -> [B, H, L, D]


TARGETS = [
    {
        "name": "Informer FullAttention",
        "fn": target,
        "convention": "causal",
        "expect": {"scale": "pass", "scale_dv": "pass", "causal": "pass"},
    }
]
