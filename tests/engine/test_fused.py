"""The fused backend: output and lse from torch's flash kernel, statistics from one more fused pass —
each equal to the blocked backend's block-by-block statistics and to the fp64 reference."""

import math

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

import attnroute as ar
from attnroute.engine.fused_probes import FusedKeyMass, FusedRowStats
from attnroute.engine.probes import KeyVectors

from .helpers import qkv


def mask_of(kind, B, Tq, Tk, seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "none": None,
        "causal": ar.causal(),
        "causal_tl": ar.causal(align="top_left"),  # torch's is_causal grid, also when Tq != Tk
        "left": ar.causal() & ar.padding(torch.randint(0, Tk + 1, (B,), generator=g), Tk=Tk, side="left"),
        "right": ar.padding(torch.randint(1, Tk + 1, (B,), generator=g), Tk=Tk),
        "window": ar.sliding_window(1 + seed % 4),
    }[kind]


TOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def fused_and_blocked(q, k, v, mask, vectors, per_head=None, diagonals=(1, 2)):
    """vectors [B|1, 1, Tk, C] are the same for every head; per_head [B|1, H, Tk, C] differ per query head
    (the fused backend packs them per kv group)."""
    fr, km, kh = FusedRowStats(band=3, diagonals=diagonals), FusedKeyMass(), FusedKeyMass()
    km.vectors, kh.vectors = vectors, per_head
    out = ar.attend(q, k, v, mask, impl="fused", probes=[fr, km] + ([kh] if per_head is not None else []))
    rs, kv, kvh = ar.RowStats(band=3), KeyVectors(), KeyVectors()
    kv.vectors, kvh.vectors = vectors, per_head
    probes = [rs, kv] + ([kvh] if per_head is not None else [])
    ref = ar.attend(q, k, v, mask, impl="blocked", block_size=3, probes=probes)
    if per_head is not None:
        torch.testing.assert_close(kh.rows(), kvh.rows(), atol=TOL[q.dtype], rtol=0, msg="per-head key vectors")
    return out, fr, km, ref, rs, kv


@given(
    B=st.integers(1, 2),
    Hkv=st.integers(1, 2),
    G=st.integers(1, 3),
    Tq=st.integers(1, 12),
    Tk=st.integers(1, 12),
    D=st.sampled_from([2, 8, 16]),
    kind=st.sampled_from(["none", "causal", "causal_tl", "left", "right", "window"]),
    seed=st.integers(0, 500),
)
@example(B=2, Hkv=2, G=2, Tq=9, Tk=9, D=8, kind="left", seed=3)  # grouped heads, rows that see nothing
@example(B=1, Hkv=1, G=3, Tq=4, Tk=11, D=16, kind="causal", seed=1)  # decoding: Tq < Tk, bottom-right
@example(B=2, Hkv=1, G=1, Tq=10, Tk=10, D=2, kind="window", seed=2)
@example(B=2, Hkv=2, G=1, Tq=5, Tk=8, D=8, kind="right", seed=5)  # cross-attention shapes
@example(B=1, Hkv=1, G=2, Tq=9, Tk=4, D=8, kind="causal_tl", seed=4)  # top-left, rows past Tk see every key
def test_fused_statistics_equal_the_blocked_backends(B, Hkv, G, Tq, Tk, D, kind, seed):
    q, k, v = qkv(B, Hkv * G, Hkv, Tq, Tk, D, seed=seed)
    mask = mask_of(kind, B, Tq, Tk, seed)
    g = torch.Generator().manual_seed(seed)
    vectors = torch.rand(B, 1, Tk, 3, generator=g)
    per_head = torch.rand(1 + seed % B, Hkv * G, Tk, 2, generator=g)  # [B|1, H, Tk, 2]
    out, fr, km, ref, rs, kv = fused_and_blocked(q, k, v, mask, vectors, per_head)
    tol = TOL[torch.float32]
    torch.testing.assert_close(out, ref, atol=tol, rtol=0)
    for name in ("entropy", "band_mass", "prev_mass", "first_mass", "n_visible"):
        torch.testing.assert_close(fr.get(name), rs.get(name).float(), atol=10 * tol, rtol=0, msg=name)
    torch.testing.assert_close(km.rows(), kv.rows(), atol=tol, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_within_the_dtype_tolerance_of_fp64(dtype):
    q, k, v = qkv(2, 4, 2, 33, 33, 16, dtype=dtype, seed=4)
    mask = ar.causal() & ar.padding([33, 20], Tk=33, side="left")
    fr = FusedRowStats()
    out = ar.attend(q, k, v, mask, impl="fused", probes=[fr])
    rs = ar.RowStats()
    ref = ar.attend(q.double(), k.double(), v.double(), mask, impl="eager", probes=[rs])
    torch.testing.assert_close(out.double(), ref, atol=TOL[dtype], rtol=0)
    torch.testing.assert_close(fr.get("entropy").double(), rs.get("entropy").double(), atol=10 * TOL[dtype], rtol=0)


def test_one_hot_and_uniform_rows_have_entropy_zero_and_log_n():
    T, D = 6, 4
    k = torch.zeros(1, 1, T, D)
    q = torch.zeros(1, 1, T, D)  # every score 0: each causal row is uniform over its i + 1 keys
    fr = FusedRowStats()
    ar.attend(q, k, torch.randn(1, 1, T, D), ar.causal(), impl="fused", probes=[fr])
    torch.testing.assert_close(fr.get("entropy")[0, 0], torch.log(torch.arange(1, T + 1).float()), atol=1e-6, rtol=0)
    k1 = torch.zeros(1, 1, T, T)  # key j points along e_j, far enough that row i puts all weight on key i
    k1[0, 0, torch.arange(T), torch.arange(T)] = 1e4
    fr = FusedRowStats()
    ar.attend(k1, k1, torch.randn(1, 1, T, T), None, impl="fused", probes=[fr], scale=1.0)  # row i: all on key i
    assert torch.equal(fr.get("entropy")[0, 0], torch.zeros(T))
    assert math.isclose(float(fr.entropy_norm()[0, 0, 0]), 0.0)


def test_what_is_not_linear_in_the_weights_is_refused_naming_blocked():
    q, k, v = qkv(1, 2, 2, 5, 5, 8)
    with pytest.raises(ar.UnsupportedRequest, match="blocked"):
        ar.attend(q, k, v, impl="fused", probes=[ar.RowStats()])  # max weight / argmax need the weights
    with pytest.raises(ar.UnsupportedRequest, match="soft-cap"):
        ar.attend(q, k, v, impl="fused", softcap=5.0)
    with pytest.raises(ar.UnsupportedRequest, match="impl='fused'"):
        ar.attend(q, k, v, impl="blocked", probes=[FusedRowStats()])
    km = FusedKeyMass()
    km.vectors = torch.ones(1, 3, 5, 2)  # 3 is neither 1 nor H = 2: bad input, said with the shape expected
    with pytest.raises(ar.InputError, match=r"\[B\|1, H\|1, Tk, C\] = \[1\|1, 2\|1, 5, C\], got \[1, 3, 5, 2\]"):
        ar.attend(q, k, v, impl="fused", probes=[km])


@pytest.mark.parametrize("mask", [ar.causal(), None, ar.sliding_window(3)], ids=["causal", "none", "window"])
@pytest.mark.parametrize("Tq", [10, 7])  # 7: queries are the last 7 positions of 10 keys (bottom-right)
def test_named_diagonals_equal_the_weights(mask, Tq):
    # offsets near each other share a window of keys, far ones get their own (0..3 and 9), negative ones
    # look ahead (0 under a causal mask)
    offsets = (0, 3, 9, 1, -2, 2)
    q, k, v = qkv(2, 4, 2, Tq, 10, 8, seed=9)
    fr = FusedRowStats(diagonals=offsets)
    ar.attend(q, k, v, mask, impl="fused", probes=[fr])
    _, trace = ar.attend(q, k, v, mask, impl="eager", return_trace=True)
    w = trace.weights  # (B, H, Tq, 10)
    for off in offsets:
        expect = torch.zeros(2, 4, Tq)
        for i in range(Tq):
            j = i + 10 - Tq - off
            if 0 <= j < 10:
                expect[:, :, i] = w[:, :, i, j]
        torch.testing.assert_close(fr.rows(off), expect, atol=1e-6, rtol=0, msg=f"offset {off}")
