"""karpathy/nanochat — nanochat/flash_attention.py, _sdpa_attention: the SDPA fallback of its FA3 interface,
causal with a sliding window (window_size = (left, 0)), used with a KV cache while generating.

Source: https://github.com/karpathy/nanochat, path nanochat/flash_attention.py, commit
b62a5bc44aafef02eba6c39236180aa424a82674 (before the fix) and commit 3ba42e8135bc88283004fc8d803a1eb00879a738
(the fix). License: MIT, Copyright (c) 2025 Andrej Karpathy. Copied: _sdpa_attention at each commit. The
bug: decoding one token (Tq = 1) calls SDPA with is_causal=False over *every* cached key, and a chunk of
queries after a cache (1 < Tq < Tk) gets "prefix + causal" with no window either — reported as nanochat
issue #452, fixed by PR #456 (commit 3ba42e8: the keys are sliced to the last window + 1 for Tq = 1, and
the chunk mask is windowed).
Adapter: nanochat takes a window size, not a mask; the adapter reads the battery's keep-mask and passes
the window it says (bottom-right causal → -1; causal with a window of W keys → left = W − 1, nanochat's
"(window + 1) keys total"); any other mask is Unsupported (the causal mask family).

Expected, from reading: before the fix every case without a cache passes, and sliding_window fails at
Tq = 1 after 9 cached keys, named "the window is not applied while decoding with a cache"; after the fix
every case it can express passes.
"""

import torch
import torch.nn.functional as F

from attnroute.check import Unsupported


def _sdpa_attention_before(q, k, v, window_size, enable_gqa):
    # --- copied (commit b62a5bc, _sdpa_attention) ---
    Tq = q.size(2)
    Tk = k.size(2)
    window = window_size[0]

    # Full context, same length
    if (window < 0 or window >= Tq) and Tq == Tk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=enable_gqa)

    # Single token generation
    if Tq == 1:
        return F.scaled_dot_product_attention(q, k, v, is_causal=False, enable_gqa=enable_gqa)

    # Need explicit mask
    device = q.device
    if Tq == Tk:
        # Causal + sliding window
        mask = torch.tril(torch.ones(Tq, Tk, device=device, dtype=torch.bool))
        if window > 0 and window < Tq:
            row_idx = torch.arange(Tq, device=device).unsqueeze(1)
            col_idx = torch.arange(Tk, device=device).unsqueeze(0)
            mask = mask & ((row_idx - col_idx) <= window)
    else:
        # Chunk inference: attend to prefix + causal within chunk
        prefix_len = Tk - Tq
        mask = torch.zeros(Tq, Tk, device=device, dtype=torch.bool)
        mask[:, :prefix_len] = True
        mask[:, prefix_len:] = torch.tril(torch.ones(Tq, Tq, device=device, dtype=torch.bool))

    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=enable_gqa)


def _sdpa_attention_fixed(q, k, v, window_size, enable_gqa):
    # --- copied (commit 3ba42e8, _sdpa_attention) ---
    Tq = q.size(2)
    Tk = k.size(2)
    window = window_size[0]

    # Full context, same length
    if (window < 0 or window >= Tq) and Tq == Tk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=enable_gqa)

    # Single token generation
    if Tq == 1:
        if window >= 0 and window < Tk:
            # window is "left" tokens we need to include (window + 1) keys total
            start = max(0, Tk - (window + 1))
            k = k[:, :, start:, :]
            v = v[:, :, start:, :]
        return F.scaled_dot_product_attention(q, k, v, is_causal=False, enable_gqa=enable_gqa)

    # Need explicit mask for sliding window/chunk inference
    device = q.device
    # For chunk inference (Tq != Tk), is_causal is not aligned to cache position => build an explicit bool mask
    row_idx = (Tk - Tq) + torch.arange(Tq, device=device).unsqueeze(1)
    col_idx = torch.arange(Tk, device=device).unsqueeze(0)
    mask = col_idx <= row_idx

    # sliding window (left)
    if window >= 0 and window < Tk:
        mask = mask & ((row_idx - col_idx) <= window)

    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=enable_gqa)


def window_of(keep, Tq: int, Tk: int) -> int:
    """nanochat's window for a keep-mask it can say: -1 (causal), or W − 1 for a causal window of W keys."""
    if keep is None:
        raise Unsupported("nanochat's attention is always causal")
    m = keep.expand(-1, -1, Tq, Tk)
    if not bool((m == m[:1, :1]).all()):
        raise Unsupported("nanochat takes one window for every example and head, not a mask")
    m = m[0, 0]
    qpos = torch.arange(Tq)[:, None] + (Tk - Tq)
    kpos = torch.arange(Tk)[None, :]
    causal = kpos <= qpos
    if bool((m == causal).all()):
        return -1
    for W in range(1, Tk + 1):
        if bool((m == (causal & (qpos - kpos < W))).all()):
            return W - 1
    raise Unsupported("nanochat takes a causal window, not this mask")


def before(q, k, v, attn_mask=None):
    window = window_of(attn_mask, q.shape[2], k.shape[2])
    return _sdpa_attention_before(q, k, v, (window, 0), enable_gqa=q.shape[1] != k.shape[1])


def fixed(q, k, v, attn_mask=None):
    window = window_of(attn_mask, q.shape[2], k.shape[2])
    return _sdpa_attention_fixed(q, k, v, (window, 0), enable_gqa=q.shape[1] != k.shape[1])


# every check with a mask that is not a causal window (padding, documents, garbage behind padding) cannot be said
NOT_A_WINDOW = [
    "padding_right",
    "padding_left",
    "batch_independence",
    "document",
    "empty_rows",
    "masked_keys",
    "masked_values",
    "sentinel_overrun",
]
TARGETS = [
    {
        "name": "nanochat SDPA fallback (before #456)",
        "fn": before,
        "convention": "sdpa",
        "mask_family": "causal",
        # Tq > Tk: its chunk branch builds a [Tq, Tq] block into a [Tq, Tk] mask and raises: a shape it never takes
        "expect": {
            **dict.fromkeys(NOT_A_WINDOW, "n/a"),
            "q_longer_than_k": "n/a",
            "sliding_window": "fail",
            "kv_decode": "fail",
        },
        "cause": "the window is not applied while decoding with a cache (Tq = 1 < Tk = 9)",
    },
    {
        "name": "nanochat SDPA fallback (fixed, #456)",
        "fn": fixed,
        "convention": "sdpa",
        "mask_family": "causal",
        "expect": dict.fromkeys(NOT_A_WINDOW, "n/a"),
    },
]
