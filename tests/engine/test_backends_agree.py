"""Every backend agrees with the list reference (fp64) and with an fp64 eager, on awkward shapes."""

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

import attnroute as ar

from .helpers import eager64, qkv

FAST = ("eager", "blocked", "sdpa")


def make_mask(kind, B, Tq, Tk, seed, window=None):
    g = torch.Generator().manual_seed(seed)
    if kind == "none":
        return None
    if kind == "causal":
        return ar.causal()
    if kind == "causal_top_left":
        return ar.causal("top_left")
    if kind == "padding":
        lengths = torch.randint(0, Tk + 1, (B,), generator=g)
        return ar.padding(lengths, Tk=Tk, side="left" if seed % 2 else "right")
    if kind == "window":
        return ar.sliding_window(window or 1 + seed % 3)
    if kind == "causal_padding":
        return ar.causal() & ar.padding(torch.randint(1, Tk + 1, (B,), generator=g), Tk=Tk)
    return torch.rand(B, 1, Tq, Tk, generator=g) < 0.6  # a random bool tensor


MASKS = ["none", "causal", "causal_top_left", "padding", "window", "causal_padding", "random"]


@given(
    B=st.integers(1, 2),
    Hkv=st.integers(1, 3),
    G=st.integers(1, 3),
    Tq=st.integers(1, 13),
    Tk=st.integers(1, 13),
    D=st.sampled_from([1, 3, 8, 16]),
    Dv=st.sampled_from([None, 5]),
    kind=st.sampled_from(MASKS),
    block=st.integers(1, 6),
    seed=st.integers(0, 1000),
)
# every mask kind is drawn at least once, whatever the profile's example budget
@example(B=2, Hkv=2, G=2, Tq=7, Tk=9, D=8, Dv=5, kind="window", block=3, seed=4)
@example(B=2, Hkv=1, G=3, Tq=9, Tk=9, D=3, Dv=None, kind="causal_padding", block=2, seed=5)
@example(B=2, Hkv=2, G=1, Tq=5, Tk=11, D=16, Dv=None, kind="padding", block=4, seed=7)
@example(B=1, Hkv=3, G=1, Tq=8, Tk=5, D=8, Dv=5, kind="causal_top_left", block=1, seed=2)
@example(B=2, Hkv=1, G=2, Tq=6, Tk=6, D=1, Dv=None, kind="random", block=5, seed=9)
@example(B=1, Hkv=2, G=2, Tq=12, Tk=13, D=8, Dv=None, kind="causal", block=6, seed=1)
@example(B=1, Hkv=1, G=1, Tq=3, Tk=13, D=16, Dv=5, kind="none", block=2, seed=0)
def test_backends_match_list_reference_fp32(B, Hkv, G, Tq, Tk, D, Dv, kind, block, seed):
    q, k, v = qkv(B, Hkv * G, Hkv, Tq, Tk, D, Dv, seed=seed)
    mask = make_mask(kind, B, Tq, Tk, seed)
    ref = ar.attend(q.double(), k.double(), v.double(), mask, impl="reference")
    assert torch.isfinite(ref).all()
    for impl in FAST:
        out = ar.attend(q, k, v, mask, impl=impl, block_size=block)
        assert out.shape == (B, Hkv * G, Tq, Dv or D)
        torch.testing.assert_close(out.double(), ref, atol=ar.TOLERANCE[torch.float32], rtol=0, msg=f"{impl} {kind}")


def naive_same_dtype(q, k, v, keep):
    """A plain low-precision implementation: the baseline of flash-attention's 2x rule."""
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
    s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    s = s.masked_fill(~keep, float("-inf")) if keep is not None else s
    return torch.softmax(s, dim=-1) @ v


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "B,H,Hkv,Tq,Tk,D,Dv,kind",
    [
        (1, 4, 2, 97, 97, 59, 59, "causal"),
        (2, 6, 3, 33, 97, 64, 40, "causal_padding"),  # Tq < Tk: decode/chunked-prefill alignment
        (1, 9, 3, 61, 97, 64, 64, "causal"),  # Tq < Tk ≤ 2·Tq: SDPA's is_causal on the zero-padded square
        (1, 3, 1, 1025, 1025, 16, 16, "window"),  # MQA, long odd length, a window of 257 keys
        (2, 2, 2, 65, 31, 111, 111, "none"),  # Tq > Tk, odd head dim
    ],
)
def test_low_precision_within_twice_plain_error(dtype, B, H, Hkv, Tq, Tk, D, Dv, kind):
    q, k, v = qkv(B, H, Hkv, Tq, Tk, D, Dv, dtype=dtype, seed=7)
    mask = make_mask(kind, B, Tq, Tk, 3, window=257)
    ref = eager64(q, k, v, mask)
    keep = None if mask is None else mask.materialize(B, H, Tq, Tk)
    plain = naive_same_dtype(q, k, v, keep)
    for impl in FAST:
        out = ar.attend(q, k, v, mask, impl=impl, block_size=64)
        assert out.dtype == dtype
        ar.assert_close_to_reference(out, plain, ref, what=f"{impl} {dtype} {kind}")


def test_eager64_equals_list_reference():
    q, k, v = qkv(2, 6, 2, 9, 11, 7, 4, dtype=torch.float64, seed=3)
    mask = ar.causal() & ar.padding([11, 6], Tk=11, side="left")
    torch.testing.assert_close(eager64(q, k, v, mask), ar.attend(q, k, v, mask, impl="reference"), atol=1e-12, rtol=0)


def test_auto_reports_its_choice():
    q, k, v = qkv()
    _, t = ar.attend(q, k, v, ar.causal(), return_trace=True)
    assert t.impl == "sdpa" and "fused" in t.reason
    _, t = ar.attend(q, k, v, ar.causal(), probes=[ar.RowStats()], return_trace=True)
    assert t.impl == "eager"
    _, t = ar.attend(q, k, v, ar.causal(), probes=[ar.RowStats()], return_trace=True, memory_budget=16)
    assert t.impl == "blocked" and "exceeds" in t.reason


def test_grouped_heads_follow_repeat_interleave_not_tile():
    # docs/pitfalls.md: Hq=6, Hkv=2 equals MHA with K/V expanded by repeat_interleave.
    q, k, v = qkv(1, 6, 2, 5, 5, 8)
    for impl in ("reference",) + FAST:
        out = ar.attend(q, k, v, ar.causal(), impl=impl)
        inter = ar.attend(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), ar.causal(), impl="eager")
        tiled = ar.attend(q, k.repeat(1, 3, 1, 1), v.repeat(1, 3, 1, 1), ar.causal(), impl="eager")
        torch.testing.assert_close(out.float(), inter, atol=2e-6, rtol=0)
        assert (out.float() - tiled).abs().max() > 1e-2


def test_custom_scale_and_dv_differs():
    q, k, v = qkv(1, 2, 2, 4, 6, 8, 3)
    ref = ar.attend(q.double(), k.double(), v.double(), scale=0.37, impl="reference")
    for impl in FAST:
        torch.testing.assert_close(ar.attend(q, k, v, scale=0.37, impl=impl).double(), ref, atol=2e-6, rtol=0)


def test_softcap_none_and_zero_mean_the_same_and_sdpa_refuses():
    q, k, v = qkv(1, 2, 2, 4, 6, 8)
    q = q * 10
    ref = ar.attend(q.double(), k.double(), v.double(), softcap=5.0, impl="reference")
    for impl in ("eager", "blocked"):
        torch.testing.assert_close(ar.attend(q, k, v, softcap=5.0, impl=impl).double(), ref, atol=2e-6, rtol=0)
        torch.testing.assert_close(ar.attend(q, k, v, softcap=0.0, impl=impl), ar.attend(q, k, v, impl=impl))
    with pytest.raises(ar.UnsupportedRequest, match="soft-cap"):
        ar.attend(q, k, v, softcap=5.0, impl="sdpa")


def test_large_magnitude_bf16_logits_stay_finite():
    # docs/pitfalls.md: bf16 q = k filled with 133120.0 (pytorch #121558).
    q = torch.full((1, 2, 4, 8), 133120.0, dtype=torch.bfloat16)
    v = torch.arange(32, dtype=torch.bfloat16).view(1, 1, 4, 8).expand(1, 2, 4, 8)  # distinct values show the weights
    ref = eager64(q, q, v, ar.causal())
    # equal logits: each causal row averages the values it may see
    expected = torch.stack([v[0, 0, : i + 1].double().mean(0) for i in range(4)])
    torch.testing.assert_close(ref[0, 0], expected)
    for impl in FAST:
        out = ar.attend(q, q, v, ar.causal(), impl=impl)
        assert torch.isfinite(out).all(), impl
        torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=0)
