"""Conventions round-trip; polarity never flips silently (docs/pitfalls.md)."""

import pytest
import torch
import torch.nn.functional as F

import attnroute as ar

from .helpers import qkv


def logical_mask(B=3, T=7):
    return (ar.causal() & ar.padding([7, 5, 3], Tk=T)).materialize(B, 1, T, T)  # (B, 1, T, T)


def test_four_conventions_round_trip_and_give_identical_outputs():
    keep = logical_mask()
    q, k, v = qkv(3, 2, 2, 7, 7, 8)
    # (a) sdpa bool, (b) MHA bool drop-mask, (c) transformers 2-D padding + causal, (d) additive float
    as_mha = ar.to_mha(keep)
    as_add = ar.to_additive(keep)
    as_add_min = ar.to_additive(keep, torch.float16, sentinel="min")
    hf = ar.to_hf(ar.padding([7, 5, 3], Tk=7).materialize(3, 1, 1, 7))
    assert torch.equal(ar.from_mha(as_mha), keep)
    assert torch.equal(ar.from_additive(as_add), keep)
    assert torch.equal(ar.from_additive(as_add_min), keep)
    assert torch.equal(ar.to_mha(ar.to_mha(keep)), keep)  # involutive
    assert torch.equal(ar.from_hf_2d(hf), ar.padding([7, 5, 3], Tk=7).materialize(3, 1, 1, 7))
    keep_hf = (ar.from_hf(hf) & ar.causal()).materialize(3, 1, 7, 7)
    assert torch.equal(keep_hf, keep)
    mha_kpm = ar.from_mha(
        attn_mask=ar.to_mha(ar.causal().materialize(1, 1, 7, 7))[0, 0],
        key_padding_mask=ar.to_key_padding_mask(hf.bool()),
    )
    assert torch.equal(mha_kpm, keep)
    ours = ar.attend(q, k, v, keep, impl="eager")
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=keep), ours, atol=2e-6, rtol=0)
    # SDPA with the additive form agrees except on rows that see nothing (there it gives NaN or
    # uniform weights, depending on the sentinel; attnroute gives zeros).
    seen = keep.any(-1, keepdim=True)
    add_out = F.scaled_dot_product_attention(q, k, v, attn_mask=as_add)
    torch.testing.assert_close(torch.where(seen, add_out, 0), ours, atol=2e-6, rtol=0)


def test_torch_mha_with_converted_masks_matches_attend():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True, bias=False)
    x = torch.randn(3, 7, 8)
    keep = logical_mask()
    hf = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4])
    attn_mask = ar.to_mha(ar.causal().materialize(1, 1, 7, 7))[0, 0]
    out_mha, _ = mha(
        x, x, x, attn_mask=attn_mask, key_padding_mask=ar.to_key_padding_mask(hf.bool()), need_weights=False
    )
    w_q, w_k, w_v = mha.in_proj_weight.chunk(3)
    q, k, v = (ar.project(x, w, None, 2) for w in (w_q, w_k, w_v))
    ours = ar.attend(q, k, v, keep, impl="eager").transpose(1, 2).reshape(3, 7, 8) @ mha.out_proj.weight.T
    torch.testing.assert_close(out_mha, ours, atol=1e-5, rtol=0)


def test_zero_one_float_in_additive_slot_is_rejected():
    # docs/pitfalls.md (huggingface/transformers #46458): never silently add 1.0 to logits.
    with pytest.raises(ValueError, match="0/1 keep-mask"):
        ar.from_additive(torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="positional bias"):
        ar.from_additive(torch.tensor([[0.0, -0.5]]))


def test_bool_byte_float_give_the_same_mask_or_a_clear_error():
    keep = logical_mask()
    assert torch.equal(ar.from_additive(ar.to_additive(keep, torch.bfloat16)), keep)
    assert torch.equal(ar.from_hf_2d(keep[:, 0, -1].to(torch.uint8)), keep[:, :, -1:])
    with pytest.raises(TypeError, match="bool"):
        ar.to_mha(keep.to(torch.uint8))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_combining_min_sentinels_never_overflows(dtype):
    # docs/pitfalls.md: finfo.min + finfo.min = -inf in fp16 (transformers PR #17306).
    a = ar.to_additive(ar.causal().materialize(1, 1, 4, 4), dtype, sentinel="min")
    b = ar.to_additive(ar.padding([2], Tk=4).materialize(1, 1, 1, 4), dtype, sentinel="min")
    assert torch.isneginf(a + b).any()  # the naive sum overflows
    c = ar.combine_additive(a, b)
    assert torch.isfinite(c).all()
    assert torch.equal(ar.from_additive(c), (ar.causal() & ar.padding([2], Tk=4)).materialize(1, 1, 4, 4))


def test_to_hf_refuses_masks_that_are_not_padding():
    with pytest.raises(ValueError, match="differs between queries"):
        ar.to_hf(ar.causal().materialize(1, 1, 3, 3))
