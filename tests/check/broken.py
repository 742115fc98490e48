"""Deliberately broken attention functions, one per check, and a correct one.

Each is called as fn(q, k, v, attn_mask=keep) with keep bool, True = may attend (sdpa convention),
except where a convention is named.
"""

import math

import torch

NEG = float("-inf")


def _expand(k, v, H):
    G = H // k.shape[1]
    return k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)


def _softmax_rows(s):
    """Safe softmax over keys (rows that see nothing -> 0)."""
    w = torch.softmax(s, -1)
    return torch.nan_to_num(w, nan=0.0)


def correct(q, k, v, attn_mask=None):
    k, v = _expand(k, v, q.shape[1])
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, NEG)
    w = _softmax_rows(s)
    v = torch.where(
        attn_mask.expand(*w.shape).any(2)[..., None] if attn_mask is not None else torch.ones(1, dtype=torch.bool),
        v,
        torch.zeros_like(v),
    )
    return w @ torch.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0)


def inverted_mask(q, k, v, attn_mask=None):
    return correct(q, k, v, None if attn_mask is None else ~attn_mask)


def causal_sees_next(q, k, v, attn_mask=None):
    if attn_mask is not None:
        attn_mask = attn_mask | torch.roll(attn_mask, 1, dims=-1)  # off by one: also the next key
    return correct(q, k, v, attn_mask)


def top_left_causal(q, k, v, attn_mask=None):
    """Uses SDPA's is_causal (top-left) whenever the mask looks causal-ish."""
    Tq, Tk = q.shape[2], k.shape[2]
    if attn_mask is not None and Tq != Tk:
        attn_mask = attn_mask & torch.ones(Tq, Tk, dtype=torch.bool).tril()
    return correct(q, k, v, attn_mask)


def ignores_padding(q, k, v, attn_mask=None):
    if attn_mask is not None:  # keeps only what differs between rows (the causal part)
        attn_mask = attn_mask | attn_mask.all(2, keepdim=True).logical_not() & ~attn_mask.any(2, keepdim=True)
        attn_mask = attn_mask | (~attn_mask.any(-2, keepdim=True))
    return correct(q, k, v, attn_mask)


def batch_coupled(q, k, v, attn_mask=None):
    """Normalizes the scores with a statistic over the whole batch."""
    out = correct(q, k, v, attn_mask)
    return out * (1 + 0.1 * q.mean())


def window_plus_one(q, k, v, attn_mask=None):
    if attn_mask is not None:
        attn_mask = attn_mask | torch.roll(attn_mask, -1, dims=-1) & torch.ones_like(attn_mask).tril()
    return correct(q, k, v, attn_mask)


def tiled_heads(q, k, v, attn_mask=None):
    G = q.shape[1] // k.shape[1]
    return correct(q, k.repeat(1, G, 1, 1), v.repeat(1, G, 1, 1), attn_mask)


def no_scale(q, k, v, attn_mask=None):
    return correct(q * math.sqrt(q.shape[-1]), k, v, attn_mask)


def scale_after_softmax(q, k, v, attn_mask=None):
    k, v = _expand(k, v, q.shape[1])
    s = q @ k.transpose(-1, -2)
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, NEG)
    return (_softmax_rows(s) / math.sqrt(q.shape[-1])) @ v


def softmax_over_queries(q, k, v, attn_mask=None):
    k, v = _expand(k, v, q.shape[1])
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, NEG)
    return torch.nan_to_num(torch.softmax(s, -2), nan=0.0) @ v


def naive_softmax(q, k, v, attn_mask=None):
    """NaN for rows that see nothing (pytorch #103749)."""
    k, v = _expand(k, v, q.shape[1])
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, NEG)
    return torch.softmax(s.float(), -1).to(q.dtype) @ v


def leaks_masked_values(q, k, v, attn_mask=None):
    k, v = _expand(k, v, q.shape[1])
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, NEG)
    return _softmax_rows(s) @ v  # 0 · NaN = NaN


def overflowing_sentinel(q, k, v, attn_mask=None):
    """Builds an additive mask from two finfo.min planes in the input dtype: -inf in fp16/bf16."""
    k, v = _expand(k, v, q.shape[1])
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if attn_mask is not None:
        low = torch.finfo(q.dtype).min
        plane = torch.zeros(attn_mask.shape, dtype=q.dtype).masked_fill(~attn_mask, low)
        s = s + plane + plane  # the sum overflows to -inf in low precision: fully masked rows become NaN
    return torch.softmax(s, -1) @ v


def ignores_documents(q, k, v, attn_mask=None):
    if attn_mask is not None:  # treats any mask as plain causal
        Tq, Tk = q.shape[2], k.shape[2]
        causal = torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq)
        attn_mask = causal & attn_mask.any(-2, keepdim=True)
    return correct(q, k, v, attn_mask)


def crashes_in_fp16(q, k, v, attn_mask=None):
    """masked_fill(mask == 0, -1e9): fp16 cannot hold -1e9 and torch raises (a tutorial's habit)."""
    k, v = _expand(k, v, q.shape[1])
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if attn_mask is not None:
        s = s.masked_fill(attn_mask == 0, -1e9)
    return torch.softmax(s, -1) @ v


def always_causal(q, k, v, attn_mask=None):
    """Ignores the mask it is given and applies its own causal mask."""
    Tq, Tk = q.shape[2], k.shape[2]
    return correct(q, k, v, torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq))


def none_means_causal(q, k, v, attn_mask=None):
    """Right with a mask; with None it still hides the future."""
    if attn_mask is None:
        Tq, Tk = q.shape[2], k.shape[2]
        attn_mask = torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq)
    return correct(q, k, v, attn_mask)


def bool_mask_added(q, k, v, attn_mask=None):
    """softmax(s + mask): a bool keep-mask added to the scores as 0/1 (a vision library's bug)."""
    k, v = _expand(k, v, q.shape[1])
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if attn_mask is not None:
        s = s + attn_mask.to(s.dtype)
    return torch.softmax(s, -1) @ v


def divides_by_sqrt_dv(q, k, v, attn_mask=None):
    """Scales by the value head dim (an older GPT-2 used value.size(-1))."""
    return correct(q * math.sqrt(q.shape[-1] / v.shape[-1]), k, v, attn_mask)


def finite_sentinel(q, k, v, attn_mask=None):
    """torch.where(mask, s, -1e4): visible logits below -1e4 lose to the padding (an older GPT-2)."""
    k, v = _expand(k, v, q.shape[1])
    s = q.float() @ k.float().transpose(-1, -2) / math.sqrt(q.shape[-1])
    if attn_mask is not None:
        s = torch.where(attn_mask, s, torch.tensor(-1e4))
    return (torch.softmax(s, -1) @ v.float()).to(q.dtype)


def full_shape_masks_only(q, k, v, attn_mask=None):
    """Accepts only [B, 1, Tq, Tk] masks (an older Llama raised on anything else)."""
    if attn_mask is not None and tuple(attn_mask.shape) != (q.shape[0], 1, q.shape[2], k.shape[2]):
        raise ValueError(f"Attention mask should be of size {(q.shape[0], 1, q.shape[2], k.shape[2])}")
    return correct(q, k, v, attn_mask)


def raises_always(q, k, v, attn_mask=None):
    raise RuntimeError("not implemented")


def raises_on_masks(q, k, v, attn_mask=None):
    if attn_mask is not None:
        raise RuntimeError("masks are not supported")
    return correct(q, k, v, None)


def wrong_shape(q, k, v, attn_mask=None):
    return correct(q, k, v, attn_mask).transpose(1, 2)  # (B, Tq, H, Dv)


def mutates_inputs(q, k, v, attn_mask=None):
    """Doubles q in place: a doubled temperature, on the caller's tensor."""
    q.mul_(2)
    return correct(q, k, v, attn_mask)


def hangs(q, k, v, attn_mask=None):
    import time

    time.sleep(3600)
