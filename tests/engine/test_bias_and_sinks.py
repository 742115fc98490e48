"""Additive score bias (T5, ALiBi) and per-head sink logits (gpt-oss): every backend that can express
them agrees with the list reference; the others refuse by name; both match transformers' own eager
functions for those models."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import attnroute as ar
from attnroute.engine.probes import row_stats_probe
from attnroute.engine.tolerance import TOLERANCE

from .helpers import eager64, qkv
from .test_backends_agree import MASKS, make_mask


def bias_and_sinks(B, H, Tq, Tk, seed, bias_shape):
    g = torch.Generator().manual_seed(seed + 7)
    shape = {"full": (B, H, Tq, Tk), "heads": (1, H, Tq, Tk), "per_key": (1, H, 1, Tk)}[bias_shape]
    return 2 * torch.randn(*shape, generator=g), 2 * torch.randn(H, generator=g)


@given(
    B=st.integers(1, 2),
    Hkv=st.integers(1, 3),
    G=st.integers(1, 3),
    Tq=st.integers(1, 9),
    Tk=st.integers(1, 11),
    D=st.sampled_from([1, 4, 7]),
    mask=st.sampled_from(MASKS),
    bias_shape=st.sampled_from(["full", "heads", "per_key"]),
    use_bias=st.booleans(),
    use_sinks=st.booleans(),
    seed=st.integers(0, 999),
)
def test_bias_and_sinks_agree_with_reference(B, Hkv, G, Tq, Tk, D, mask, bias_shape, use_bias, use_sinks, seed):
    H = Hkv * G
    q, k, v = qkv(B, H, Hkv, Tq, Tk, D, seed=seed)
    m = make_mask(mask, B, Tq, Tk, seed)
    bias, sinks = bias_and_sinks(B, H, Tq, Tk, seed, bias_shape)
    kw = {"bias": bias if use_bias else None, "sinks": sinks if use_sinks else None}
    ref = ar.attend(q, k, v, m, impl="reference", **kw)
    for impl in ("eager", "blocked"):
        out = ar.attend(q, k, v, m, impl=impl, block_size=3, **kw)
        assert (out - ref).abs().max() <= 5 * TOLERANCE[torch.float32], impl
    if not use_sinks:
        out = ar.attend(q, k, v, m, impl="sdpa", **kw)
        assert (out - ref).abs().max() <= 5 * TOLERANCE[torch.float32], "sdpa"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_bias_and_sinks_low_precision(dtype):
    """fp16/bf16 through eager and blocked: within the dtype's tolerance of the fp64 result."""
    q, k, v = qkv(2, 6, 2, 9, 13, 16, seed=3)
    bias, sinks = bias_and_sinks(2, 6, 9, 13, 3, "heads")
    ref = eager64(q, k, v, ar.causal(), bias=bias.double(), sinks=sinks.double())
    for impl in ("eager", "blocked"):
        out = ar.attend(
            q.to(dtype),
            k.to(dtype),
            v.to(dtype),
            ar.causal(),
            impl=impl,
            bias=bias.to(dtype),
            sinks=sinks.to(dtype),
            block_size=4,
        )
        assert (out.double() - ref).abs().max() <= 4 * TOLERANCE[dtype], (impl, dtype)


def test_sinks_take_mass_and_rows_that_see_nothing_give_zeros():
    q, k, v = qkv(1, 2, 2, 3, 4, 4, seed=1)
    keep = torch.tensor([[True, True, False, False], [False] * 4, [True] * 4])[None, None]
    sinks = torch.tensor([0.5, -1.0])
    out, trace = ar.attend(q, k, v, keep, sinks=sinks, impl="eager", return_trace=True)
    w = trace.weights
    assert torch.equal(out[:, :, 1], torch.zeros_like(out[:, :, 1]))  # nothing to see: zeros, not NaN
    assert torch.equal(w[:, :, 1], torch.zeros_like(w[:, :, 1]))
    # by hand for row 0, head 0: softmax over [s_00, s_01, sink]
    s = (q[0, 0, 0] @ k[0, 0, :2].T) / 2.0
    full = torch.softmax(torch.cat([s, sinks[:1]]), 0)
    assert torch.allclose(w[0, 0, 0, :2], full[:2], atol=1e-6)
    assert torch.all(w.sum(-1)[:, :, [0, 2]] < 1)  # the sink took some of each row


def test_entropy_probe_counts_the_sink_as_an_outcome():
    q, k, v = qkv(2, 4, 2, 6, 6, 8, seed=2)
    sinks = torch.tensor([2.0, -3.0, 0.0, 1.0])
    probe = row_stats_probe()
    _, trace = ar.attend(
        q, k, v, ar.causal(), sinks=sinks, impl="blocked", probes=[probe], return_trace=True, block_size=2
    )
    _, tr = ar.attend(q, k, v, ar.causal(), sinks=sinks, impl="eager", return_trace=True)
    w = tr.weights.double()
    p_sink = 1 - w.sum(-1)
    direct = -torch.special.xlogy(w, w).sum(-1) - torch.special.xlogy(p_sink, p_sink)
    assert torch.allclose(probe[None].get("entropy").double(), direct, atol=1e-5)


def test_backends_that_cannot_express_them_refuse():
    q, k, v = qkv(1, 2, 2, 3, 3, 4)
    with pytest.raises(ar.UnsupportedRequest, match="sink"):
        ar.attend(q, k, v, sinks=torch.zeros(2), impl="sdpa")
    with pytest.raises(ar.UnsupportedRequest, match="sink"):
        ar.attend(q, k, v, sinks=torch.zeros(2), impl="fused")
    with pytest.raises(ar.UnsupportedRequest, match="bias"):
        ar.attend(q, k, v, bias=torch.zeros(1, 2, 3, 3), impl="fused")


@pytest.mark.parametrize(
    "bad, match",
    [
        (torch.zeros(1, 3, 3, 3), "its H is 3"),
        (torch.full((1, 2, 3, 3), float("nan")), "NaN"),
        (torch.zeros(1, 2, 3, 3, dtype=torch.long), "float tensor"),
    ],
)
def test_bad_bias_is_refused(bad, match):
    q, k, v = qkv(1, 2, 2, 3, 3, 4)
    with pytest.raises(ar.InputError, match=match):
        ar.attend(q, k, v, bias=bad)


def test_bad_sinks_are_refused():
    q, k, v = qkv(1, 2, 2, 3, 3, 4)
    with pytest.raises(ar.InputError, match=r"shape \[H\]"):
        ar.attend(q, k, v, sinks=torch.zeros(3))


# ------------------------------------------------------------ against transformers' own eager functions


class _Module(torch.nn.Module):
    def __init__(self, groups=1, sinks=None):
        super().__init__()
        self.num_key_value_groups, self.training = groups, False
        if sinks is not None:
            self.sinks = torch.nn.Parameter(sinks)


def test_t5_position_bias_matches_transformers_eager():
    from transformers.models.t5.modeling_t5 import eager_attention_forward

    q, k, v = qkv(2, 4, 4, 6, 6, 8, seed=5)
    bias = torch.randn(1, 4, 6, 6)
    keep = torch.ones(2, 1, 6, 6, dtype=torch.bool)
    keep[1, ..., 4:] = False  # padding in the second example
    additive = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
    theirs, _ = eager_attention_forward(_Module(), q, k, v, additive, scaling=1.0, position_bias=bias)
    ours = ar.attend(q, k, v, keep, scale=1.0, bias=bias, impl="blocked")
    assert (ours.transpose(1, 2) - theirs).abs().max() < 1e-5


def test_gpt_oss_sinks_match_transformers_eager():
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    q, k, v = qkv(2, 6, 2, 7, 7, 8, seed=6)
    sinks = torch.randn(6)
    keep = ar.causal().rows(2, 6, 7, 7, 0, 7)
    additive = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
    theirs, _ = eager_attention_forward(_Module(3, sinks), q, k, v, additive, scaling=0.3)
    for impl in ("eager", "blocked"):
        ours = ar.attend(q, k, v, ar.causal(), scale=0.3, sinks=sinks, impl=impl, block_size=3)
        assert (ours.transpose(1, 2) - theirs).abs().max() < 1e-5, impl
