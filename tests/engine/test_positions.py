"""Positions: what the position schemes promise (relative shifts, RoPE, conversions), proved."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import attnroute as ar


@given(
    m=st.integers(0, 500),
    n=st.integers(0, 500),
    shift=st.integers(1, 2000),
    pairing=st.sampled_from(["half_split", "interleaved"]),
    scaling=st.sampled_from([None, "linear", "ntk"]),
)
def test_rope_scores_depend_only_on_relative_offset(m, n, shift, pairing, scaling):
    D = 16
    g = torch.Generator().manual_seed(m * 1000 + n)
    q, k = (
        torch.randn(1, 1, 1, D, generator=g, dtype=torch.float64),
        torch.randn(1, 1, 1, D, generator=g, dtype=torch.float64),
    )
    inv = ar.rope_frequencies(D, scaling=scaling, factor=4.0)

    def rotated_score(pm, pn):
        cq, sq = (t.to(torch.float64) for t in _angles(pm, inv))
        ck, sk = (t.to(torch.float64) for t in _angles(pn, inv))
        return float((ar.apply_rope(q, cq, sq, pairing) * ar.apply_rope(k, ck, sk, pairing)).sum())

    a, b = rotated_score(m, n), rotated_score(m + shift, n + shift)
    assert abs(a - b) < 1e-9 * max(1.0, abs(a))


def _angles(p, inv):
    ang = torch.tensor([float(p)], dtype=torch.float64)[:, None] * inv
    return torch.cos(ang), torch.sin(ang)


def test_rope_pairings_agree_after_the_channel_permutation_and_differ_without():
    D, T = 8, 6
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 2, T, D, generator=g), torch.randn(1, 2, T, D, generator=g)
    pos = torch.arange(T)
    inter, half = ar.RoPE(D, pairing="interleaved"), ar.RoPE(D, pairing="half_split")
    p = ar.interleaved_to_half_split(D)
    qi, ki = inter(q, k, pos)
    qh, kh = half(q[..., p], k[..., p], pos)
    torch.testing.assert_close(qh, qi[..., p], atol=1e-6, rtol=0)
    torch.testing.assert_close(qh @ kh.transpose(-1, -2), qi @ ki.transpose(-1, -2), atol=1e-5, rtol=0)
    qm, km = half(q, k, pos)  # mixing conventions is detectable: scores change
    assert (qm @ km.transpose(-1, -2) - qi @ ki.transpose(-1, -2)).abs().max() > 1e-2
    assert torch.equal(p[ar.half_split_to_interleaved(D)], torch.arange(D))


def test_rope_scaling_formulas():
    D = 64
    base = ar.rope_frequencies(D)
    torch.testing.assert_close(ar.rope_frequencies(D, scaling="linear", factor=4.0), base / 4.0)
    ntk = ar.rope_frequencies(D, scaling="ntk", factor=4.0)
    assert ntk[0] == 1.0  # the highest frequency is untouched
    torch.testing.assert_close(ntk[-1], base[-1] / 4.0, rtol=1e-9, atol=0)  # the lowest is interpolated
    with pytest.raises(ValueError, match="scaling"):
        ar.rope_frequencies(D, scaling="yarn")


@given(p=st.integers(0, 400), k=st.integers(0, 100))
def test_sinusoidal_of_p_plus_k_is_a_fixed_linear_map_of_p(p, k):
    dim = 32
    pe = ar.sinusoidal(600, dim).double()
    M = ar.sinusoidal_shift(k, dim).double()
    torch.testing.assert_close(pe[p] @ M.T, pe[p + k], atol=1e-5, rtol=0)


def test_learned_positions_refuse_out_of_range():
    lp = ar.LearnedPositions(8, 4)
    assert lp(torch.arange(8)).shape == (8, 4)
    with pytest.raises(ValueError, match="beyond learned table"):
        lp(torch.tensor([8]))
