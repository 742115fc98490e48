"""huggingface/diffusers — src/diffusers/models/attention_processor.py, SlicedAttnProcessor (attention
over batch × heads in slices of ``slice_size``) and Attention.get_attention_scores.

Source: https://github.com/huggingface/diffusers, path src/diffusers/models/attention_processor.py, release
v0.29.0 (the version of the report). License: Apache-2.0, Copyright 2024 The HuggingFace Team
(http://www.apache.org/licenses/LICENSE-2.0). Copied: the slice loop of SlicedAttnProcessor.__call__ and
get_attention_scores (no upcast). The bug: ``range(batch_size_attention // self.slice_size)`` never
computes the last, partial slice, so when batch × heads is not a multiple of the slice size the last
heads stay zero — reported in huggingface/diffusers issue #8837, fixed by PR #8836 with
``range((batch_size_attention - 1) // self.slice_size + 1)`` (the second target below).
Adapter: q, k, v [B, H, T, D] become diffusers' [B·H, T, D] (head_to_batch_dim: b-major); the mask is
additive, repeated per head as prepare_attention_mask does (repeat_interleave over heads), given as
transformers' finfo.min masks (the hf convention: finite, as diffusers' pipelines build them); slice_size 2.
diffusers' Attention has one set of heads: grouped heads raise in its bmm.

Expected, from reading: with an odd batch × heads (the battery's 1 × 3 and 3 × 3 shapes) the last head
is zero: causal, padding and decode fail, named as a chunked loop that skips the last chunk; the shapes
with an even batch × heads (sliding window, document, batch independence) pass; grouped heads are a
shape it does not accept (n/a); with a finite mask a row with no key averages the masked keys, and
NaN/inf in masked keys or values passes the matmuls (hazards). The fixed loop fails nothing.
"""

import torch

SLICE = 2


def get_attention_scores(query, key, attention_mask, scale):
    # --- copied (Attention.get_attention_scores, upcast off) ---
    dtype = query.dtype
    if attention_mask is None:
        baddbmm_input = torch.empty(query.shape[0], query.shape[1], key.shape[1], dtype=query.dtype)
        beta = 0
    else:
        baddbmm_input = attention_mask
        beta = 1
    attention_scores = torch.baddbmm(baddbmm_input, query, key.transpose(-1, -2), beta=beta, alpha=scale)
    attention_probs = attention_scores.softmax(dim=-1)
    return attention_probs.to(dtype)


def _sliced(q, k, v, attn_mask, fixed: bool):
    B, H, Tq, D = q.shape
    query, key, value = (x.reshape(B * x.shape[1], x.shape[2], x.shape[3]) for x in (q, k, v))
    attention_mask = None
    if attn_mask is not None:  # prepare_attention_mask: [B, Tq, Tk] repeated per head
        attention_mask = attn_mask.expand(B, 1, Tq, k.shape[2])[:, 0].repeat_interleave(H, dim=0)
    # --- copied (SlicedAttnProcessor.__call__, the slice loop) ---
    batch_size_attention, query_tokens, _ = query.shape
    hidden_states = torch.zeros((batch_size_attention, query_tokens, v.shape[-1]), dtype=query.dtype)
    n = (batch_size_attention - 1) // SLICE + 1 if fixed else batch_size_attention // SLICE
    for i in range(n):
        start_idx = i * SLICE
        end_idx = (i + 1) * SLICE
        query_slice = query[start_idx:end_idx]
        key_slice = key[start_idx:end_idx]
        attn_mask_slice = attention_mask[start_idx:end_idx] if attention_mask is not None else None
        attn_slice = get_attention_scores(query_slice, key_slice, attn_mask_slice, D**-0.5)
        attn_slice = torch.bmm(attn_slice, value[start_idx:end_idx])
        hidden_states[start_idx:end_idx] = attn_slice
    return hidden_states.view(B, H, Tq, -1)


def sliced(q, k, v, attn_mask=None):
    return _sliced(q, k, v, attn_mask, fixed=False)


def sliced_fixed(q, k, v, attn_mask=None):
    return _sliced(q, k, v, attn_mask, fixed=True)


NO_KEY = ["q_longer_than_k", "empty_rows"]  # a finite mask: a row with no key averages the masked keys
LAST_SLICE = ["causal", "padding_right", "padding_left", "decode_alignment"]  # odd B × H in their shapes
SHARED = {"grouped_heads": "n/a", "masked_keys": "hazard", "masked_values": "hazard", **{c: "hazard" for c in NO_KEY}}
TARGETS = [
    {
        "name": "diffusers SlicedAttnProcessor (v0.29.0)",
        "fn": sliced,
        "convention": "hf",
        "expect": {**SHARED, **{c: "fail" for c in LAST_SLICE}},
        "cause": "a loop over batch × heads in chunks that skips the last partial chunk",
    },
    {
        "name": "diffusers SlicedAttnProcessor (fixed, PR #8836)",
        "fn": sliced_fixed,
        "convention": "hf",
        "expect": SHARED,
    },
]
