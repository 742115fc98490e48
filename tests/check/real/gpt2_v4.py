"""GPT-2 attention as transformers 3.x/4.x shipped it (Attention._attn), as vendored by kzl/decision-transformer.

Source: https://github.com/kzl/decision-transformer, path gym/decision_transformer/models/trajectory_gpt2.py,
commit 5605e40ce763bb27ff0cf5beb06210d08771e047. License: Apache-2.0 for the copied class (the file is
huggingface/transformers' modeling_gpt2.py, Copyright 2018 The OpenAI Team Authors and HuggingFace Inc. team);
the repository itself is MIT. Copied: _attn unchanged (dropout removed: eval), the causal buffer and the -1e4
masked_bias it registers. Adapter: GPT2Model turns a keep-mask into an additive one as (1.0 - mask) *
-10000.0; the adapter does the same with the battery's mask. GPT-2 is always causal (mask family "causal");
its queries are a suffix of its keys (Tq > Tk is Unsupported), it has no grouped-query heads.

Expected, from reading (true findings of this code): the scores are divided by √(v.size(-1)), the *value* head
dim (scale_dv fails); the causal mask is torch.where(mask, w, -1e4), a finite sentinel that a valid logit of
−2·10⁴ falls below (sentinel_overrun fails, fp16 too); an additive −10⁴ does not hide a key whose logit is
huge (masked_keys, with left padding so that the padded keys lie in the past: a finite 1e10 key leaks in
fp32/bf16 — fail; the fp16 case uses a smaller finite key and only NaN/inf leak — hazard); a row with nothing
visible averages masked keys (empty_rows: hazard); NaN in masked values leaks (hazard).
"""

import torch
from torch import nn

from attnroute.check import Unsupported

n_ctx = 64
bias = torch.tril(torch.ones((n_ctx, n_ctx), dtype=torch.uint8)).view(1, 1, n_ctx, n_ctx)
masked_bias = torch.tensor(-1e4)


def _attn(q, k, v, attention_mask=None, head_mask=None, output_attentions=False, scale=True):
    w = torch.matmul(q, k)
    if scale:
        w = w / (float(v.size(-1)) ** 0.5)
    nd, ns = w.size(-2), w.size(-1)
    mask = bias[:, :, ns - nd : ns, :ns]
    w = torch.where(mask.bool(), w, masked_bias.to(w.dtype))

    if attention_mask is not None:
        # Apply the attention mask
        w = w + attention_mask

    w = nn.Softmax(dim=-1)(w)

    # Mask heads if we want to
    if head_mask is not None:
        w = w * head_mask

    outputs = [torch.matmul(w, v)]
    if output_attentions:
        outputs.append(w)
    return outputs


def target(q, k, v, attn_mask=None):
    if q.shape[2] > k.shape[2]:
        raise Unsupported("GPT-2's queries are a suffix of its keys (Tq <= Tk)")
    if q.shape[1] != k.shape[1]:
        raise Unsupported("GPT-2 has no grouped-query heads")
    additive = None if attn_mask is None else (1.0 - attn_mask.to(q.dtype)) * -10000.0  # as GPT2Model does
    return _attn(q, k.transpose(-1, -2), v, additive)[0]


TARGETS = [
    {
        "name": "GPT-2 (transformers 4.x _attn)",
        "fn": target,
        "convention": "sdpa",
        "mask_family": "causal",
        "expect": {
            "scale_dv": "fail",
            "q_longer_than_k": "n/a",
            "grouped_heads": "n/a",
            "empty_rows": "hazard",
            "masked_keys": "fail",
            "masked_keys_fp16": "hazard",
            "masked_values": "hazard",
            "sentinel_overrun": "fail",
        },
    }
]
