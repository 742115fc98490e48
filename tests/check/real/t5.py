"""huggingface/transformers — models/t5/modeling_t5.py, eager_attention_forward, called as
T5Attention calls it (scaling=self.scaling = 1.0: T5 has no 1/√d by design).

Source: https://github.com/huggingface/transformers, path src/transformers/models/t5/modeling_t5.py,
release v5.24.0 (the version this project pins in pyproject.toml). License: Apache-2.0, Copyright 2018
Mesh TensorFlow authors, T5 Authors and HuggingFace Inc. team. Copied: eager_attention_forward
(dropout 0). Adapter: transformers' eager masks are additive with finfo(dtype).min (the hf
convention); position_bias is None (a layer without relative attention bias); no grouped heads.

Expected, from reading: with the declared scale 1 (`attnroute check … --scale 1`) every mask is
right. Rows that see nothing get finfo.min everywhere and so average the masked keys: hazard
(q_longer_than_k, empty_rows). NaN/inf behind the mask leak through the additive mask (keys) and
0·NaN (values): hazard. A finite key cannot beat finfo.min: masked_keys leaks only non-finite.
Without the declared scale the battery names the missing 1/√d once (scale fails; scale_dv, judged
at the fitted temperature, agrees with it) and judges the masks at that temperature: they pass.
"""

import torch
from torch import nn

from attnroute.check import Unsupported


class _Module:
    training = False


def eager_attention_forward(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, position_bias=None, **kwargs
):
    if scaling is None:
        scaling = query.size(-1) ** -0.5

    # Take the dot product between "query" and "key" to get the raw attention scores.
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling

    if position_bias is not None:
        attn_weights = attn_weights + position_bias

    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask

    attn_weights = nn.functional.softmax(attn_weights, dim=-1)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)

    attn_output = torch.matmul(attn_weights, value)
    attn_output = attn_output.transpose(1, 2).contiguous()

    return attn_output, attn_weights


def target(q, k, v, attn_mask=None):
    if q.shape[1] != k.shape[1]:
        raise Unsupported("T5 has no grouped-query heads")
    out, _ = eager_attention_forward(_Module(), q, k, v, attn_mask, scaling=1.0)  # T5Attention.scaling = 1.0
    return out.transpose(1, 2)


HAZARDS = {"q_longer_than_k": "hazard", "empty_rows": "hazard", "masked_keys": "hazard", "masked_values": "hazard"}
TARGETS = [
    {
        "name": "T5 eager (--scale 1)",
        "fn": target,
        "convention": "hf",
        "scale": 1.0,
        "expect": {"grouped_heads": "n/a", **HAZARDS},
    },
    {
        "name": "T5 eager (no scale declared)",
        "fn": target,
        "convention": "hf",
        "expect": {"grouped_heads": "n/a", "scale": "fail", **HAZARDS},
    },
]
