"""open-lm-engine/lm-engine — lm_engine/modeling_utils/sequence_mixer_blocks/softmax_attention/module.py,
Attention.forward's SDPA call, with the mask of lm_engine/modeling_utils/attention_mask_info.py
(AttentionMaskInfo.get_causal_mask and _prepare_causal_attention_mask): a causal decoder with a KV cache.

Source: https://github.com/open-lm-engine/lm-engine, commit 36bad91e0f59e5cfafd692f71b6cbcf3e13ff7ed (both
targets: the same code, called two ways). License: Apache-2.0, Copyright (c) 2026 Mayank Mishra. Copied: the
``F.scaled_dot_product_attention`` call of Attention.forward (its non-flash, non-TPU path) and the two mask
functions. The bug: with no padding mask (``attention_mask is None``, what a batch-1 caller or any caller
without padding passes) ``get_causal_mask`` returns None and the call falls back to
``is_causal=self.causal`` — SDPA's is_causal is aligned top-left, so once keys are cached (Tq < Tk) a
decoding query sees the first keys instead of its past (Tq = 1 sees key 0 alone). With a padding mask the
same code builds a bottom-right mask itself and is right. Raised in review of lm-engine PR #498
(2026-07-31, suggesting ``is_causal=self.causal and q.size(1) == k.size(1)``); not fixed at this commit.
Adapter: lm-engine takes a padding mask [B, Tk] (1 = real token) and is causal by nature; the adapter
reads the padding from the battery's keep-mask and refuses (Unsupported) any mask that is not "bottom-right
causal ∧ padding". ``causal=True``, no dropout, ``scale=1/√D`` (its attention_multiplier default).

Expected, from reading: called without a padding mask when there is no padding, every case with cached
keys fails — decode_alignment first, named "aligned top-left"; the sliding window cannot be said (n/a).
Called with a padding mask always (as its HF adapter's generate does), every case it can say passes; a
row with no key averages every key (its NaN guard zeroes the additive mask of such a row), and NaN in a
padded key or value reaches the real rows through the additive finfo.min mask: hazards, in both. Tq > Tk
raises inside _prepare_causal_attention_mask (a shape it never takes: n/a).
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnroute.check import Unsupported


def _prepare_causal_attention_mask(
    attention_mask: torch.Tensor | None, batch_size: int, query_length: int, key_length: int, device: torch.device
) -> torch.Tensor:
    # --- copied (commit 36bad91, attention_mask_info.py) ---
    past_length = key_length - query_length

    if query_length > 1:
        # (query_length, key_length)
        causal_mask = torch.empty((query_length, key_length), dtype=torch.bool, device=device)
        causal_mask[:, past_length:] = torch.tril(
            torch.ones(query_length, query_length, dtype=torch.bool, device=device)
        )

        if past_length > 0:
            causal_mask[:, :past_length] = True

        # (query_length, key_length) -> (1, query_length, key_length)
        causal_mask = causal_mask.unsqueeze(0)

        if attention_mask is None:
            # (1, query_length, key_length) -> (batch_size, query_length, key_length)
            causal_mask = causal_mask.expand(batch_size, -1, -1)
        else:
            # (1, query_length, key_length) & (batch_size, 1, key_length) -> (batch_size, query_length, key_length)
            causal_mask = causal_mask & attention_mask.unsqueeze(1).to(torch.bool)
    else:
        if attention_mask is None:
            # (batch_size, query_length, key_length)
            causal_mask = torch.ones(batch_size, query_length, key_length, dtype=torch.bool, device=device)
        else:
            # (batch_size, query_length, key_length)
            causal_mask = attention_mask.unsqueeze(1).to(dtype=torch.bool, device=device)

    causal_mask = causal_mask.unsqueeze(1)

    return causal_mask


@dataclass
class AttentionMaskInfo:  # the fields get_causal_mask reads; its cache is left out (one call per forward here)
    attention_mask: torch.Tensor | None = None

    def get_causal_mask(self, query_length: int, key_length: int, dtype: torch.dtype) -> torch.Tensor | None:
        # --- copied (commit 36bad91, AttentionMaskInfo.get_causal_mask, without its cache) ---
        if self.attention_mask is None:
            return None

        B = self.attention_mask.size(0)
        device = self.attention_mask.device

        mask_value = torch.full([], torch.finfo(dtype).min, dtype=dtype, device=device)

        causal_mask = _prepare_causal_attention_mask(self.attention_mask, B, query_length, key_length, device)
        causal_mask = torch.where(causal_mask, ~causal_mask, mask_value)

        # this is needed to prevent NaN since SDPA
        # see issue: https://github.com/pytorch/pytorch/issues/110213
        causal_mask = causal_mask * ~torch.all(causal_mask == mask_value, dim=-1, keepdim=True)

        return causal_mask


def attention(q, k, v, attention_mask_info: AttentionMaskInfo, causal: bool = True, attention_multiplier=None):
    """q/k/v as lm-engine holds them before the call: [B, T, heads, D]."""
    # --- copied (commit 36bad91, Attention.forward, the F.scaled_dot_product_attention branch) ---
    x = F.scaled_dot_product_attention(
        query=q.transpose(1, 2),
        key=k.transpose(1, 2),
        value=v.transpose(1, 2),
        attn_mask=attention_mask_info.get_causal_mask(query_length=q.size(1), key_length=k.size(1), dtype=q.dtype),
        dropout_p=0,
        is_causal=causal if attention_mask_info.attention_mask is None else False,
        scale=attention_multiplier,
        enable_gqa=True,
    )
    return x.transpose(1, 2)


def padding_of(keep, B: int, Tq: int, Tk: int) -> torch.Tensor:
    """The [B, Tk] padding mask lm-engine would need for ``keep``, or Unsupported."""
    if keep is None:
        raise Unsupported("lm-engine's attention is always causal")
    m = keep.expand(B, -1, Tq, Tk)
    if not bool((m == m[:, :1]).all()):
        raise Unsupported("lm-engine takes one padding mask per example, not one per head")
    pad = m[:, 0].any(1)  # a key some query may see is a real token
    said = _prepare_causal_attention_mask(pad.long(), B, Tq, Tk, keep.device)
    if not bool((said.expand_as(m) == m).all()):
        raise Unsupported("lm-engine's mask is bottom-right causal ∧ padding, not this mask")
    return pad.long()


def _as_called(drop_unpadded: bool):
    def fn(q, k, v, attn_mask=None):
        B, _, Tq, _ = q.shape
        pad = padding_of(attn_mask, B, Tq, k.shape[2])
        info = AttentionMaskInfo(None if drop_unpadded and bool(pad.all()) else pad)
        out = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), info)
        return out.transpose(1, 2)

    return fn


# masks that are not "causal ∧ padding": a window, documents, and a query longer than its keys
NOT_SAID = ["sliding_window", "document", "q_longer_than_k"]
HAZARDS = ["empty_rows", "masked_keys", "masked_values"]
TARGETS = [
    {
        "name": "lm-engine SDPA, no padding mask (36bad91)",
        "fn": _as_called(drop_unpadded=True),
        "convention": "sdpa",
        "mask_family": "causal",
        "expect": {
            **dict.fromkeys(NOT_SAID, "n/a"),
            **dict.fromkeys(HAZARDS, "hazard"),
            "decode_alignment": "fail",
            "kv_decode": "fail",
        },
        "cause": "aligned top-left",
    },
    {
        "name": "lm-engine SDPA, padding mask always (36bad91)",
        "fn": _as_called(drop_unpadded=False),
        "convention": "sdpa",
        "mask_family": "causal",
        "expect": {**dict.fromkeys(NOT_SAID, "n/a"), **dict.fromkeys(HAZARDS, "hazard")},
    },
]
