"""Streaming statistics equal those computed from eager weights; interventions agree across backends."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import attnroute as ar

from .helpers import qkv


def stats_from_weights(w, Tq, Tk, band):
    """The statistics the long way, from a full [B, H, Tq, Tk] weight matrix."""
    qpos = torch.arange(Tq) + Tk - Tq
    kpos = torch.arange(Tk)
    off = qpos[:, None] - kpos[None, :]
    plogp = torch.where(w > 0, w * torch.log(w.clamp_min(1e-300)), torch.zeros_like(w))
    seen = w.sum(-1) > 0
    return {
        "entropy": -plogp.sum(-1),
        "max_weight": w.max(-1).values,
        "argmax": torch.where(seen, w.argmax(-1), -1),
        "first_mass": w[..., 0],
        "prev_mass": (w * (off == 1)).sum(-1),
        "band_mass": (w * (off.abs() < band)).sum(-1),
    }


@given(
    Tq=st.integers(1, 40),
    Tk=st.integers(1, 40),
    G=st.integers(1, 3),
    block=st.integers(1, 9),
    kind=st.sampled_from(["causal", "window", "padding", "none"]),
    seed=st.integers(0, 99),
)
def test_blocked_streaming_stats_equal_eager_weights(Tq, Tk, G, block, kind, seed):
    q, k, v = qkv(2, 2 * G, 2, Tq, Tk, 8, dtype=torch.float64, seed=seed)
    q = q * 2
    mask = {
        "causal": ar.causal(),
        "window": ar.sliding_window(3),
        "none": None,
        "padding": ar.padding([Tk, max(0, Tk - 3)], Tk=Tk, side="left") & ar.causal(),
    }[kind]
    _, tr = ar.attend(q, k, v, mask, impl="eager", return_trace=True)
    want = stats_from_weights(tr.weights, Tq, Tk, band=3)
    probe = ar.RowStats(band=3)
    ar.attend(q, k, v, mask, impl="blocked", probes=[probe], block_size=block)
    for name, ref in want.items():
        got = probe.get(name)
        if name == "argmax":
            assert torch.equal(got, ref), name
        else:
            torch.testing.assert_close(got, ref.to(got.dtype), atol=1e-9, rtol=0, msg=name)
    n = probe.n_visible
    assert (probe.entropy <= torch.log(n.clamp_min(1).double()) + 1e-9).all()
    norm = probe.entropy_norm()
    assert ((norm >= 0) & (norm <= 1 + 1e-9)).all()


def test_uniform_row_has_entropy_log_n_and_keymass_sums():
    q = torch.zeros(1, 1, 4, 8)
    k, v = torch.randn(1, 1, 4, 8), torch.randn(1, 1, 4, 8)
    probe, delim = ar.RowStats(), ar.KeyMass(torch.tensor([True, False, False, True]))
    ar.attend(q, k, v, ar.causal(), impl="blocked", probes=[probe, delim], block_size=1)
    torch.testing.assert_close(probe.entropy[0, 0], torch.log(torch.arange(1, 5).float()))
    torch.testing.assert_close(delim.mass[0, 0], torch.tensor([1.0, 0.5, 1 / 3, 0.5]))
    torch.testing.assert_close(probe.entropy_norm()[0, 0, 1:], torch.ones(3))


INTERVENTIONS = {
    "zero": lambda T: ar.ZeroHead([1, 3]),
    "uniform": lambda T: ar.UniformWeights([0]),
    "temperature": lambda T: ar.Temperature([2], 3.0),
    "substitute": lambda T: ar.SubstituteWeights([1], torch.eye(T)),
    "replace": lambda T: ar.ReplaceOutput([0], torch.ones(1, 8)),
}


@pytest.mark.parametrize("name", list(INTERVENTIONS))
def test_interventions_agree_between_eager_and_blocked_and_touch_only_their_heads(name):
    q, k, v = qkv(2, 4, 2, 11, 11, 8)
    iv = INTERVENTIONS[name](11)
    base = ar.attend(q, k, v, ar.causal(), impl="eager")
    e = ar.attend(q, k, v, ar.causal(), impl="eager", interventions=[iv])
    b = ar.attend(q, k, v, ar.causal(), impl="blocked", interventions=[iv], block_size=3)
    torch.testing.assert_close(e, b, atol=2e-6, rtol=0)
    others = [h for h in range(4) if h not in iv.heads]
    torch.testing.assert_close(e[:, others], base[:, others])
    assert (e[:, iv.heads] - base[:, iv.heads]).abs().max() > 1e-3


OUTPUT_ONLY = {"zero": ar.ZeroHead([1, 3]), "replace": ar.ReplaceOutput([0], torch.ones(1, 8))}


@given(
    Tq=st.integers(1, 13),
    extra=st.integers(0, 6),
    G=st.sampled_from([1, 2, 4]),
    name=st.sampled_from(sorted(OUTPUT_ONLY)),
    kind=st.sampled_from(["causal", "none", "window"]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
)
def test_output_only_interventions_run_on_the_fused_kernel_as_on_eager(Tq, extra, G, name, kind, dtype):
    """A head zeroed or replaced edits no score or weight: auto takes sdpa and edits its output after, which
    must equal eager's edit (fp32 2e-6; bf16 two ulps at |out| ≤ 1: 1.6e-2). Scores or weights edited: eager."""
    Tk = Tq + extra
    q, k, v = (t.to(dtype) for t in qkv(2, 4, 4 // G, Tq, Tk, 8))
    mask = {"causal": ar.causal(), "none": None, "window": ar.sliding_window(3)}[kind]
    iv = OUTPUT_ONLY[name]
    fused, trace = ar.attend(q, k, v, mask, interventions=[iv], return_trace=True)
    assert trace.impl == "sdpa"
    plain = ar.attend(q, k, v, mask, impl="eager", interventions=[iv])
    tol = 2e-6 if dtype == torch.float32 else 1.6e-2
    torch.testing.assert_close(fused, plain, atol=tol, rtol=0)
    _, trace = ar.attend(q, k, v, mask, interventions=[iv, ar.Temperature([0], 2.0)], return_trace=True)
    assert trace.impl in ("eager", "rows")


def test_intervention_semantics():
    q, k, v = qkv(1, 2, 2, 6, 6, 4)
    out = ar.attend(q, k, v, ar.causal(), impl="eager", interventions=[ar.UniformWeights([0])])
    running_mean = v[0, 0].cumsum(0) / torch.arange(1, 7)[:, None]
    torch.testing.assert_close(out[0, 0], running_mean, atol=1e-6, rtol=0)
    out = ar.attend(q, k, v, ar.causal(), impl="eager", interventions=[ar.SubstituteWeights([1], torch.eye(6))])
    torch.testing.assert_close(out[0, 1], v[0, 1])
    hot = ar.attend(q, k, v, ar.causal(), impl="eager", interventions=[ar.Temperature([0, 1], 1e-4)])
    torch.testing.assert_close(
        hot, ar.attend(q, k, v, ar.causal(), impl="eager", scale=1e4 / math.sqrt(4)), atol=1e-5, rtol=0
    )
    out = ar.attend(q, k, v, None, impl="eager", interventions=[ar.ZeroHead(0, layer=3)], layer=2)
    assert (out[0, 0] != 0).any()  # an intervention for layer 3 leaves layer 2 alone


def test_bad_intervention_inputs():
    q, k, v = qkv(1, 2, 2, 3, 3, 4)
    with pytest.raises(ValueError, match=r"head indices must lie in \[0, 2\)"):
        ar.attend(q, k, v, impl="eager", interventions=[ar.ZeroHead([5])])
    with pytest.raises(ValueError, match="temperature must be > 0"):
        ar.Temperature([0], 0.0)
    with pytest.raises(ValueError, match=r"\[Tq, Tk\] = \[3, 3\]"):
        ar.attend(q, k, v, impl="eager", interventions=[ar.SubstituteWeights([0], torch.eye(4))])
    with pytest.raises(ar.UnsupportedRequest, match="scores or weights.*eager"):
        ar.attend(q, k, v, impl="sdpa", interventions=[ar.Temperature([0], 2.0)])
    with pytest.raises(ar.UnsupportedRequest, match="probes"):
        ar.attend(q, k, v, impl="sdpa", probes=[ar.RowStats()])
