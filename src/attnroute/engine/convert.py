"""Conversions between the mask conventions people ship, at the edges only.

Inside attnroute a mask means one thing: bool, True = may attend (torch SDPA's convention).

    convention            dtype            True / 1 / 0.0 means
    sdpa                  bool             may attend
    mha (attn_mask)       bool             masked OUT (nn.MultiheadAttention, nn.Transformer)
    mha key_padding_mask  bool [B, Tk]     key is padding, masked OUT
    hf (2-D)              0/1 int [B, Tk]  1 = real token
    additive              float            0.0 = may attend, -inf (or a large negative) = not

Every converter is explicit about polarity, refuses inputs that look like another convention
(a 0/1 float where an additive mask is expected: huggingface/transformers #46458), and
round-trips: ``from_X(to_X(keep)) == keep``.
"""

from __future__ import annotations

import torch

from .errors import InputError, InputTypeError
from .validate import shape_of

# Additive masks with entries at or below this count as masked. BERT's original extended
# attention mask used -10000.0; anything that negative contributes exp(-1e4) = 0 in any dtype.
ADDITIVE_MASKED_AT_OR_BELOW = -1.0e4


def to_mha(keep: torch.Tensor) -> torch.Tensor:
    """bool keep-mask -> nn.MultiheadAttention bool attn_mask (True = masked out)."""
    _need_bool(keep, "to_mha")
    return ~keep


def from_mha(attn_mask: torch.Tensor | None = None, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """nn.MultiheadAttention masks -> bool keep-mask broadcastable to [B, 1, Tq, Tk].

    attn_mask: [Tq, Tk] or [B*H, Tq, Tk], bool (True = masked out) or additive float.
    key_padding_mask: [B, Tk], bool (True = padding).
    """
    if attn_mask is None and key_padding_mask is None:
        raise InputError("from_mha needs attn_mask or key_padding_mask (or both)")
    keep = None
    if attn_mask is not None:
        keep = ~attn_mask if attn_mask.dtype == torch.bool else from_additive(attn_mask)
        if keep.dim() == 3:
            raise InputError(
                f"a 3-D MHA attn_mask {shape_of(attn_mask)} is [B*H, Tq, Tk]; reshape it to [B, H, Tq, Tk] first"
            )
    if key_padding_mask is not None:
        if key_padding_mask.dtype != torch.bool:
            raise InputTypeError(f"key_padding_mask must be bool (True = padding), got {key_padding_mask.dtype}")
        if key_padding_mask.dim() != 2:
            raise InputError(f"key_padding_mask must be [B, Tk], got {shape_of(key_padding_mask)}")
        kp = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)
        keep = kp if keep is None else keep & kp
    return keep


def to_key_padding_mask(lengths_or_keep: torch.Tensor) -> torch.Tensor:
    """A per-key keep vector [B, Tk] (True = real) -> MHA key_padding_mask (True = padding)."""
    _need_bool(lengths_or_keep, "to_key_padding_mask")
    return ~lengths_or_keep


def to_hf(keep: torch.Tensor) -> torch.Tensor:
    """A padding-only keep-mask [B, 1, 1, Tk] (or [B, Tk]) -> transformers 0/1 int64 [B, Tk]."""
    _need_bool(keep, "to_hf")
    if keep.dim() == 4:
        if keep.shape[1] != 1 or keep.shape[2] != 1:
            rows_equal = bool((keep == keep[:, :1, :1, :]).all())
            if not rows_equal:
                raise InputError(
                    f"a transformers 2-D attention_mask can only say which keys are padding; this mask "
                    f"{shape_of(keep)} differs between queries or heads (causal? window?)"
                )
        keep = keep[:, 0, 0, :]
    if keep.dim() != 2:
        raise InputError(f"to_hf expects [B, Tk] or [B, 1, 1, Tk], got {shape_of(keep)}")
    return keep.long()


def from_hf_2d(attention_mask: torch.Tensor) -> torch.Tensor:
    """transformers 0/1 [B, Tk] -> bool keep [B, 1, 1, Tk]."""
    am = torch.as_tensor(attention_mask)
    if am.dim() != 2:
        raise InputError(f"a transformers attention_mask is 2-D [B, Tk], got {shape_of(am)}")
    if not set(torch.unique(am).tolist()) <= {0, 1}:
        raise InputError(f"a transformers attention_mask holds only 0 and 1, got {torch.unique(am).tolist()[:6]}")
    return am.bool()[:, None, None, :]


def to_additive(keep: torch.Tensor, dtype: torch.dtype = torch.float32, sentinel: str = "inf") -> torch.Tensor:
    """bool keep-mask -> additive float mask: 0 where kept, -inf (or finfo(dtype).min) where not.

    ``sentinel="min"`` gives a finite minimum for kernels that cannot take -inf; combine such
    masks with :func:`combine_additive`, never with ``+`` (two fp16 minima sum to -inf:
    huggingface/transformers PR #17306).
    """
    _need_bool(keep, "to_additive")
    if sentinel not in ("inf", "min"):
        raise InputError(f"sentinel must be 'inf' or 'min', got {sentinel!r}")
    low = float("-inf") if sentinel == "inf" else torch.finfo(dtype).min
    out = torch.zeros(keep.shape, dtype=dtype, device=keep.device)
    return out.masked_fill_(~keep, low)


def combine_additive(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Sum two additive masks without overflow: clamp at finfo.min so -inf never appears
    unless an input held it (the masked_fill composition of transformers PR #27114)."""
    low = torch.finfo(torch.promote_types(a.dtype, b.dtype)).min
    out = a + b
    return torch.where(torch.isneginf(a) | torch.isneginf(b), out, out.clamp(min=low))


def from_additive(mask: torch.Tensor) -> torch.Tensor:
    """additive float mask -> bool keep-mask (True = may attend).

    0.0 means may attend; -inf or anything <= -1e4 means masked. A mask of only 0.0 and 1.0 is
    refused: it is almost surely a keep-mask in the wrong slot, and adding it to the logits
    would silently attend everywhere.
    """
    if mask.dtype == torch.bool:
        raise InputTypeError(
            "from_additive expects a float mask; a bool mask is already a keep-mask (True = may attend)"
        )
    if not mask.is_floating_point():
        raise InputTypeError(f"from_additive expects a float mask, got {mask.dtype}; a 0/1 int mask is from_hf's job")
    m = mask.float()
    if torch.isnan(m).any():
        raise InputError("additive mask contains NaN")
    zero = m == 0
    masked = m <= ADDITIVE_MASKED_AT_OR_BELOW
    if bool((zero | masked).all()):
        return zero
    values = torch.unique(m[~(zero | masked)])
    if bool(((m == 0) | (m == 1)).all()):
        raise InputError(
            "additive mask holds only 0.0 and 1.0: this looks like a 0/1 keep-mask passed where an additive "
            "mask (0 = attend, -inf = masked) is expected; adding it would shift logits by 1 and mask nothing. "
            "Use mask.bool() (if 1 = attend) or attnroute.from_hf"
        )
    raise InputError(
        f"additive mask holds values other than 0 and a large negative (e.g. {values[:4].tolist()}): that is a "
        "positional bias, not a mask; attnroute masks decide which routes exist and carry no bias"
    )


def _need_bool(t: torch.Tensor, fn: str) -> None:
    if t.dtype != torch.bool:
        raise InputTypeError(f"{fn} expects a bool keep-mask (True = may attend), got {t.dtype}")
