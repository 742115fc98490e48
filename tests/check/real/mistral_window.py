"""huggingface/transformers — Mistral's sliding-window causal mask, as MistralModel built it for its eager
attention while generating with a KV cache.

Source: https://github.com/huggingface/transformers, path src/transformers/models/mistral/modeling_mistral.py,
release v4.34.0 (`_make_sliding_window_causal_mask`, before the fix) and path
src/transformers/modeling_attn_mask_utils.py, release v4.37.2 (`AttentionMaskConverter._make_causal_mask`
with `sliding_window`, the fix). License: Apache-2.0, Copyright The HuggingFace Inc. team and Mistral AI.
Written from the code at each release: the mask's logic step for step (tril, the banded triu, the block for
the cached keys), then the eager attention MistralAttention ran on it (scores / √D plus the mask, softmax in
float32, weights cast back, times the values).
The bug: v4.34.0 bands the new queries' block of the mask (triu with diagonal −sliding_window) and then
prepends a block of zeros for the past_key_values_length cached keys, so with a cache every cached key is
visible: a query decoded after 8 cached tokens sees all 9 keys where the window allows 3. The prefill,
which has no cached keys, is windowed, so every check without a cache passes. v4.37.2 applies the window
to the whole [Tq, past + Tq] mask.
Adapter: the code takes no mask, only (input shape, past length, sliding_window); both releases count
sliding_window + 1 keys (the query and sliding_window before it), so a window of W = 3 keys is
sliding_window = 2, declared to the battery as ``window: 3`` in the causal convention.

Expected, from reading: before the fix, sliding_window and kv_decode fail at Tq = 1 after cached keys, named
"the window is not applied"; after the fix everything the causal convention can express passes.
"""

import math

import torch

WINDOW = 3  # keys a query sees, itself included
SLIDING_WINDOW = WINDOW - 1  # the parameter as both releases count it


def _mask_v4_34(bsz, tgt_len, dtype, past_key_values_length, sliding_window):
    # v4.34.0 _make_sliding_window_causal_mask: band the new block, then zeros for every cached key
    tensor = torch.full((tgt_len, tgt_len), fill_value=1.0)
    mask = torch.tril(tensor, diagonal=0)
    mask = torch.triu(mask, diagonal=-sliding_window)
    mask = torch.log(mask).to(dtype)
    if past_key_values_length > 0:
        mask = torch.cat([torch.zeros(tgt_len, past_key_values_length, dtype=dtype), mask], dim=-1)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)


def _mask_v4_37(bsz, tgt_len, dtype, past_key_values_length, sliding_window):
    # v4.37.2 AttentionMaskConverter._make_causal_mask: causal over [Tq, past + Tq], then the window on all of it
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min)
    cond = torch.arange(mask.size(-1))
    mask.masked_fill_(cond < (cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(dtype)
    if past_key_values_length > 0:
        mask = torch.cat([torch.zeros(tgt_len, past_key_values_length, dtype=dtype), mask], dim=-1)
    diagonal = past_key_values_length - sliding_window - 1
    outside = torch.tril(torch.ones_like(mask, dtype=torch.bool), diagonal=diagonal)
    mask.masked_fill_(outside, torch.finfo(dtype).min)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)


def _eager(q, k, v, mask):
    # MistralAttention (eager): repeat_kv, scores / sqrt(head_dim) + mask, softmax in float32, @ v
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(q.shape[-1])
    weights = weights + mask
    weights = torch.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(weights, v)


def _attend(build, q, k, v):
    B, _, Tq, _ = q.shape
    past = k.shape[2] - Tq
    if past < 0:  # Mistral's queries are always the last of its keys
        from attnroute.check import Unsupported

        raise Unsupported("a decoder's queries are the last of its keys")
    return _eager(q, k, v, build(B, Tq, q.dtype, past, SLIDING_WINDOW))


def before(q, k, v):
    return _attend(_mask_v4_34, q, k, v)


def fixed(q, k, v):
    return _attend(_mask_v4_37, q, k, v)


# the checks that ask for a mask the decoder draws itself (its window, or no mask at all); every other mask
# cannot be said to code that takes none (n/a, the causal convention's default)
RUNS = dict.fromkeys(["scale", "scale_dv", "normalization_axis", "sliding_window", "kv_decode", "overflow"], "pass")
TARGETS = [
    {
        "name": "transformers Mistral window mask (v4.34.0)",
        "fn": before,
        "convention": "causal",
        "window": WINDOW,
        "expect": {**RUNS, "sliding_window": "fail", "kv_decode": "fail"},
        "cause": "the window is not applied",
    },
    {
        "name": "transformers Mistral window mask (v4.37.2)",
        "fn": fixed,
        "convention": "causal",
        "window": WINDOW,
        "expect": RUNS,
    },
]
