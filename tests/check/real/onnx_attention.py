"""onnx/onnx — onnx/reference/ops/op_attention.py, _compute_attention: the reference implementation of the
ONNX Attention operator (opset 23/24), numpy, with a soft cap, grouped heads and an external KV cache.

Source: https://github.com/onnx/onnx, path onnx/reference/ops/op_attention.py, the file as it stood before
commit fe30560bdfa2f267a22f3dec1574f201c7b5bd9a (i.e. at fe30560bd~1, last changed by 53367a998) and at commit
2816da65b11128bec0f3953ccc79884598232348 (both fixes). License: Apache-2.0, Copyright (c) ONNX Project
Contributors. Copied: _softmax, _softcap, _apply_causal and _compute_attention at each commit, 4-D inputs only
(the 3-D reshape, past_key/past_value, softmax_precision and qk_matmul_output_mode branches are left out: the
adapter never takes them). Two documented bugs before:
- the soft cap is applied *after* the mask: ``-inf`` becomes ``-softcap``, a finite logit, so a masked key
  takes weight once visible logits sink toward ``-softcap`` — onnx issue #7865, fixed by PR #7867
  (commit fe30560bd: "apply before mask/bias");
- ``is_causal`` is aligned top-left when the query block sits at the end of an external cache (K holds the
  whole sequence, ``nonpad_kv_seqlen`` given): a decoding query sees the first keys, not its past — onnx
  issue #8054, fixed by PR #8068 (commit 2816da65b, bottom-right on that path; it also zeroes rows with no
  key instead of NaN).
Adapter: torch → numpy and back (numpy has no bfloat16: bf16 cases are n/a); the battery's keep-mask is a
bool attn_mask (True = attend, as ONNX reads a bool mask), except that a bottom-right causal mask is said
the way an exported decoder with an external cache says it: ``is_causal=1`` with ``nonpad_kv_seqlen`` = Tk.
``softcap=50`` (Gemma 2's attention cap), declared to the battery so the reference caps too — and once
more without declaring it: the scale check finds the cap in the weights (cap ≈ 50), says so once and the
mask checks judge at the fitted cap, so the outcomes are the declared run's plus that one finding.

Expected, from reading: before the fixes decode_alignment and q_longer_than_k fail ("aligned top-left"; at
batch 2 the external-cache path even raises — its [1, 1, Tq, Tk] causal bias cannot take the [B, 1, 1, Tk]
padding in place, which #8068's per-batch bias also mends); sentinel_overrun
fails (visible logits of −2·10⁴ are capped to −50, where the masked keys' −inf was capped to as well), named
"the soft cap is applied after the mask"; a row with no key averages the masked keys (−50 each: empty_rows
hazard); NaN garbage in a masked key or value reaches the rows (q·k and weights·V run before/without the
mask: hazards). After the fixes the two failures are gone and a row with no key is zero; the garbage hazards
stay (the same matmuls).
"""

import numpy as np
import torch

from attnroute.check import Unsupported


def _softmax_before(x: np.ndarray, axis: int = -1) -> np.ndarray:
    # --- copied (before fe30560bd, _softmax) ---
    x_max = np.max(x, axis=axis, keepdims=True)
    tmp = np.exp(x - x_max)
    s = np.sum(tmp, axis=axis, keepdims=True)
    return tmp / s


def _softmax_fixed(x: np.ndarray, axis: int = -1) -> np.ndarray:
    # --- copied (commit 2816da65b, _softmax; comments shortened) ---
    x_max = np.max(x, axis=axis, keepdims=True)
    # A fully-masked row is all `-inf`, so `x_max` is `-inf` and exp(x - x_max) would be NaN.
    row_all_masked = np.isneginf(x_max)
    safe_max = np.where(row_all_masked, 0, x_max)
    tmp = np.exp(x - safe_max)
    s = np.sum(tmp, axis=axis, keepdims=True)
    s = np.where(s == 0, 1, s)  # avoid 0/0 for fully-masked rows (kept at 0)
    return tmp / s


def _softcap(X, softcap):
    # --- copied (the same at both commits) ---
    if softcap > 0:
        Y = X / softcap
        Y = np.tanh(Y)
        return Y * softcap
    return X


def _apply_causal_before(mask, past_sequence_length):
    # --- copied (before fe30560bd, _apply_causal) ---
    q_sequence_length, total_sequence_length = mask.shape[-2:]
    triu = np.triu(
        np.ones(
            (q_sequence_length, total_sequence_length - past_sequence_length),
            dtype=mask.dtype,
        ),
        k=1,
    )
    triu[triu == 1] = -np.inf
    mask[..., :, past_sequence_length:] += triu
    return mask


def _apply_causal_fixed(base, offset):
    # --- copied (commit 2816da65b, _apply_causal; docstring left out) ---
    q_sequence_length, kv_sequence_length = base.shape[-2:]
    i_idx = np.arange(q_sequence_length).reshape(q_sequence_length, 1)  # (q, 1)
    j_idx = np.arange(kv_sequence_length).reshape(1, kv_sequence_length)  # (1, kv)
    per_batch = np.ndim(offset) > 0
    if per_batch:
        offsets = np.reshape(offset, (-1, 1, 1))  # (batch, 1, 1)
        allowed = j_idx <= (i_idx + offsets)  # (batch, q, kv)
    else:
        allowed = j_idx <= (i_idx + int(offset))  # (q, kv)
    causal = np.where(allowed, base.dtype.type(0), base.dtype.type(-np.inf))
    if per_batch:
        # Promote base to (batch, 1, q, kv) and add the per-batch causal bias.
        return base.reshape((1,) * (4 - base.ndim) + base.shape) + causal.reshape(
            causal.shape[0], 1, q_sequence_length, kv_sequence_length
        )
    return base + causal


def _pad_mask(attn_mask, kv_sequence_length):
    # --- copied (the same at both commits, inline in _compute_attention) ---
    # The attn_mask can be less than kv_sequence_length, we need to pad it with -inf or 0
    if attn_mask is not None:
        pad_width = kv_sequence_length - attn_mask.shape[-1]
        if pad_width > 0:
            pad_shape = [(0, 0)] * (attn_mask.ndim - 1) + [(0, pad_width)]
            pad_value = False if attn_mask.dtype == np.bool_ else -np.inf
            attn_mask = np.pad(attn_mask, pad_shape, mode="constant", constant_values=pad_value)
    return attn_mask


def _padding_and_gqa(attn_bias, K, V, Q, nonpad_kv_seqlen, batch_size, kv_sequence_length):
    # --- copied (the same at both commits, inline in _compute_attention; q/kv_num_heads None for 4-D) ---
    if nonpad_kv_seqlen is not None:
        attn_bias = attn_bias.reshape((1,) * (4 - attn_bias.ndim) + attn_bias.shape)  # broadcast to 4D
        padding_mask = np.arange(kv_sequence_length) < nonpad_kv_seqlen[:, np.newaxis]
        padding_mask = padding_mask.reshape(batch_size, 1, 1, kv_sequence_length)
        padding_mask = np.where(padding_mask, 0, -np.inf)
        attn_bias += padding_mask
    q_num_heads = Q.shape[1]
    k_num_heads = K.shape[1]
    v_num_heads = K.shape[1]
    if (q_num_heads != k_num_heads) and (q_num_heads % k_num_heads == 0) and (k_num_heads == v_num_heads):
        seq_reps = q_num_heads // k_num_heads
        # Interleave-repeat each KV head: [h0, h0, h1, h1, ...]
        K = np.repeat(K, repeats=seq_reps, axis=1)
        V = np.repeat(V, repeats=seq_reps, axis=1)
    return attn_bias, K, V


def compute_attention_before(Q, K, V, attn_mask=None, nonpad_kv_seqlen=None, scale=None, is_causal=False, softcap=None):
    # --- copied (before fe30560bd, _compute_attention, 4-D, no past_key) ---
    batch_size = Q.shape[0]
    if scale is None:
        q_head_size = Q.shape[3]
        scale = 1 / np.sqrt(q_head_size)
    scale = np.sqrt(scale)
    q_sequence_length = Q.shape[2]
    kv_sequence_length = K.shape[2]
    attn_bias = np.zeros((q_sequence_length, kv_sequence_length), dtype=Q.dtype)
    attn_mask = _pad_mask(attn_mask, kv_sequence_length)
    # First case: If is_causal is provided
    # If set to true, the attention masking is a lower triangular matrix when the mask
    # is a square matrix. The attention masking has the form of the upper left causal
    # bias due to the alignment when the mask is a non-square matrix.
    if is_causal:
        if attn_mask is None:
            temp_mask = np.zeros((q_sequence_length, kv_sequence_length), dtype=Q.dtype)
            attn_bias = _apply_causal_before(temp_mask, past_sequence_length=0)
        else:
            if attn_mask.dtype == np.bool_:
                attn_mask = (1 - attn_mask).astype(Q.dtype) * (-np.inf)
            attn_bias = _apply_causal_before(attn_mask.copy(), past_sequence_length=0)
    elif attn_mask is not None:
        if attn_mask.dtype == np.bool_:
            attn_mask = (1 - attn_mask).astype(Q.dtype)
            attn_mask[attn_mask == 1] = -np.inf
        attn_bias = attn_bias + attn_mask
    attn_bias, K, V = _padding_and_gqa(attn_bias, K, V, Q, nonpad_kv_seqlen, batch_size, kv_sequence_length)
    k_transpose = np.transpose(K, (0, 1, 3, 2))
    qk_matmul_output = np.matmul(Q * scale, k_transpose * scale)
    qk_with_bias = qk_matmul_output + attn_bias
    # Apply softcap
    if softcap is not None:
        qk_with_bias = _softcap(qk_with_bias, softcap)
    qk_softmax = _softmax_before(qk_with_bias)
    return np.matmul(qk_softmax, V).astype(Q.dtype)


def compute_attention_fixed(Q, K, V, attn_mask=None, nonpad_kv_seqlen=None, scale=None, is_causal=False, softcap=None):
    # --- copied (commit 2816da65b, _compute_attention, 4-D, no past_key; comments shortened) ---
    batch_size = Q.shape[0]
    if scale is None:
        q_head_size = Q.shape[3]
        scale = 1 / np.sqrt(q_head_size)
    scale = np.sqrt(scale)
    q_sequence_length = Q.shape[2]
    kv_sequence_length = K.shape[2]
    attn_bias = np.zeros((q_sequence_length, kv_sequence_length), dtype=Q.dtype)
    attn_mask = _pad_mask(attn_mask, kv_sequence_length)
    if is_causal:
        if attn_mask is not None and attn_mask.dtype == np.bool_:
            attn_mask = np.where(attn_mask, Q.dtype.type(0), Q.dtype.type(-np.inf))
        base = (
            np.zeros((q_sequence_length, kv_sequence_length), dtype=Q.dtype) if attn_mask is None else attn_mask.copy()
        )
        if nonpad_kv_seqlen is not None:  # (past_key is None here)
            # External/static cache: per-batch bottom-right frontier
            offset = nonpad_kv_seqlen.reshape(-1) - q_sequence_length  # (batch,)
            attn_bias = _apply_causal_fixed(base, offset)
        else:
            attn_bias = _apply_causal_fixed(base, 0)
    elif attn_mask is not None:
        if attn_mask.dtype == np.bool_:
            attn_mask = (1 - attn_mask).astype(Q.dtype)
            attn_mask[attn_mask == 1] = -np.inf
        attn_bias = attn_bias + attn_mask
    attn_bias, K, V = _padding_and_gqa(attn_bias, K, V, Q, nonpad_kv_seqlen, batch_size, kv_sequence_length)
    k_transpose = np.transpose(K, (0, 1, 3, 2))
    qk_matmul_output = np.matmul(Q * scale, k_transpose * scale)
    # Apply softcap before mask/bias addition.
    if softcap is not None:
        qk_matmul_output = _softcap(qk_matmul_output, softcap)
    qk_with_bias = qk_matmul_output + attn_bias
    qk_softmax = _softmax_fixed(qk_with_bias)
    # Fully-masked-row guard: decided on the additive bias, zeroed before P @ V
    row_all_masked = np.isneginf(np.max(attn_bias, axis=-1, keepdims=True))  # (..., q, 1)
    qk_softmax = np.where(row_all_masked, 0, qk_softmax)
    return np.matmul(qk_softmax, V).astype(Q.dtype)


SOFTCAP = 50.0  # Gemma 2's attention soft cap


def _bottom_right_causal(keep, Tq: int, Tk: int) -> bool:
    causal = torch.arange(Tk)[None, :] <= torch.arange(Tq)[:, None] + (Tk - Tq)
    return bool((keep == causal).all())


def _as_called(compute):
    def fn(q, k, v, attn_mask=None):
        if q.dtype == torch.bfloat16:
            raise Unsupported("numpy has no bfloat16")
        B, _, Tq, _ = q.shape
        Tk = k.shape[2]
        Q, K, V = (t.numpy() for t in (q, k, v))
        kw = {"softcap": SOFTCAP}
        if attn_mask is not None and _bottom_right_causal(attn_mask, Tq, Tk):
            kw.update(is_causal=True)  # a causal decoder; its queries past an external cache when Tq ≠ Tk
            if Tq != Tk:
                kw.update(nonpad_kv_seqlen=np.full(B, Tk))
        elif attn_mask is not None:
            kw.update(attn_mask=attn_mask.numpy())
        with np.errstate(all="ignore"):  # the code's own NaN (0/0, inf − inf) is what the battery judges
            return torch.from_numpy(compute(Q, K, V, **kw))

    return fn


HAZARDS = ["masked_keys", "masked_values"]
TARGETS = [
    {
        "name": "ONNX Attention reference (before #7867, #8068)",
        "fn": _as_called(compute_attention_before),
        "convention": "sdpa",
        "softcap": SOFTCAP,
        "expect": {
            **dict.fromkeys(HAZARDS, "hazard"),
            "empty_rows": "hazard",
            "decode_alignment": "fail",
            "q_longer_than_k": "fail",
            "sentinel_overrun": "fail",
        },
        "dtypes": ("fp32", "fp16"),  # numpy has no bfloat16
        "cause": "aligned top-left",
    },
    {  # the same code, its cap not declared: found by the scale check and said there once
        "name": "ONNX Attention reference (before #7867, #8068; cap not declared)",
        "fn": _as_called(compute_attention_before),
        "convention": "sdpa",
        "expect": {
            **dict.fromkeys(HAZARDS, "hazard"),
            "empty_rows": "hazard",
            "scale": "fail",
            "decode_alignment": "fail",
            "q_longer_than_k": "fail",
            "sentinel_overrun": "fail",
        },
        "dtypes": ("fp32", "fp16"),
        "cause": "the logits are soft-capped: cap·tanh(s/cap) with cap ≈ 50 fits every weight",
    },
    {
        "name": "ONNX Attention reference (fixed, 2816da65b)",
        "fn": _as_called(compute_attention_fixed),
        "convention": "sdpa",
        "softcap": SOFTCAP,
        "expect": dict.fromkeys(HAZARDS, "hazard"),
        "dtypes": ("fp32", "fp16"),
    },
]
