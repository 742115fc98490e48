"""Rows that see nothing give zeros with finite gradients; masked garbage never leaks (docs/pitfalls.md)."""

import pytest
import torch

import attnroute as ar

from .helpers import qkv

IMPLS = ("reference", "eager", "blocked", "sdpa")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def empty_row_masks():
    left_pad = ar.padding([6, 0], Tk=6, side="left")  # example 1 has no real key at all
    return {
        "left_padding_all_padded": left_pad & ar.causal(),
        "q_gt_k_bottom_right": ar.causal(),  # Tq=9 > Tk=6: the top 3 rows see nothing (FA #1778)
        "explicit_rows": torch.tensor([True, False, True, False, True, True, True, False, True])[
            None, None, :, None
        ].expand(2, 1, 9, 6),
    }


# the reference computes in fp64 whatever the input dtype, so it runs once
COMBOS = [("reference", torch.float32)] + [(i, d) for i in IMPLS[1:] for d in DTYPES]


@pytest.mark.parametrize("impl,dtype", COMBOS)
@pytest.mark.parametrize("name", list(empty_row_masks()))
def test_empty_rows_are_zero_with_finite_gradients(impl, dtype, name):
    mask = empty_row_masks()[name]
    q, k, v = (t.requires_grad_(impl != "reference") for t in qkv(2, 4, 2, 9, 6, 8, dtype=dtype))
    out = ar.attend(q, k, v, mask, impl=impl, block_size=2)
    keep = (mask if isinstance(mask, torch.Tensor) else mask.materialize(2, 4, 9, 6)).expand(2, 4, 9, 6)
    empty = ~keep.any(-1)  # (B, H, Tq)
    assert empty.any()
    assert torch.isfinite(out).all()
    assert (out[empty] == 0).all()
    if impl != "reference":
        out.float().square().sum().backward()
        for t in (q, k, v):
            assert torch.isfinite(t.grad).all(), f"{impl}: non-finite grad"


def test_q_longer_than_k_top_rows_zero_exact_keep():
    q, k, v = qkv(1, 1, 1, 5, 2, 4)
    out, tr = ar.attend(q, k, v, ar.causal(), impl="eager", return_trace=True)
    assert (out[0, 0, :3] == 0).all()
    assert (tr.weights[0, 0, :3] == 0).all() and torch.isneginf(tr.lse[0, 0, :3]).all()


@pytest.mark.parametrize("impl", ["eager", "blocked", "sdpa"])
@pytest.mark.parametrize("garbage", [float("nan"), float("inf"), float("-inf"), 1e10])
def test_garbage_in_masked_keys_and_values_never_leaks(impl, garbage):
    # docs/pitfalls.md (pytorch #101967, flash-attention #1228): padding beyond each length holds garbage.
    q, k, v = qkv(2, 4, 2, 6, 8, 8)
    mask = ar.causal() & ar.padding([8, 5], Tk=8)
    clean = ar.attend(q, k, v, mask, impl=impl)
    k2, v2 = k.clone(), v.clone()
    k2[1, :, 5:] = garbage
    v2[1, :, 5:] = garbage
    dirty = ar.attend(q, k2, v2, mask, impl=impl)
    assert torch.equal(clean, dirty)


def test_visible_non_finite_value_propagates_like_ieee_in_eager():
    # Visible garbage is not hidden: the row that may see a NaN value gets NaN, the others do not.
    q, k, v = qkv(1, 1, 1, 4, 4, 4)
    v = v.clone()
    v[0, 0, 2, 1] = float("nan")
    out = ar.attend(q, k, v, ar.causal(), impl="eager")
    assert torch.isfinite(out[0, 0, :2]).all()
    assert torch.isnan(out[0, 0, 2:, 1]).all() and torch.isfinite(out[0, 0, 2:, 0]).all()
    with pytest.raises(ar.UnsupportedRequest, match="some rows may see"):
        ar.attend(q, k, v, ar.causal(), impl="sdpa")


def test_empty_sequences_give_empty_or_zero_outputs():
    # docs/pitfalls.md: zero-length query or key sets.
    q, k, v = qkv(1, 2, 2, 0, 5, 4)
    assert ar.attend(q, k, v).shape == (1, 2, 0, 4)
    q, k, v = qkv(1, 2, 2, 3, 0, 4)
    out = ar.attend(q, k, v, impl="eager")
    assert out.shape == (1, 2, 3, 4) and (out == 0).all()


@pytest.mark.parametrize("impl", ["eager", "blocked"])
def test_a_float16_overflow_of_q_dot_k_is_refused_by_name_not_read_as_nan(impl):
    """Head dim 256 with entries of 200: q·k·scale ≈ 6·10⁵, past float16's 65,504, is inf before the scale. torch's
    SDPA accumulates in float32 and gives finite output, so NaN weights here would misread a working model."""
    from attnroute.errors import InputError

    q = torch.full((1, 2, 3, 256), 200.0, dtype=torch.float16)
    v = torch.randn(1, 2, 3, 8).half()
    assert torch.isfinite(torch.nn.functional.scaled_dot_product_attention(q.float(), q.float(), v.float())).all()
    with pytest.raises(InputError, match="overflows float16") as e:
        ar.attend(q, q, v, impl=impl, layer=3)
    assert e.value.field == "dtype" and "layer 3" in str(e.value) and "\n" not in str(e.value)
    out = ar.attend(q.bfloat16(), q.bfloat16(), v.bfloat16(), impl=impl)  # bfloat16 has float32's range
    assert torch.isfinite(out).all()
