"""The receivers' gradients taken through one head's columns of the projection (headvjp.py) equal the plain
batched backward, on every kind of projection: separate q/k/v (llama, grouped kv heads), GPT-2's fused
Conv1D, GPT-NeoX's per-head interleaved fused projection, Phi-3's fused Linear, per-head q/k norms (Qwen3,
Gemma 3), and T5's cross-attention keys and values read from the encoder."""

from __future__ import annotations

import pytest
import torch

from attnroute.models import load
from attnroute.read.circuits import estimate, headvjp
from attnroute.read.circuits.estimate import GradPass, _start_delta, _toward

from .test_circuits import edge_run
from .zoo import build

SLICED = ["gemma3_text", "gpt2", "gpt_neox", "llama", "phi3", "qwen3", "t5"]  # a Linear reads the normed input


def _plain(y, n, cot, units, taps, memo, key):
    return headvjp.plain_vjp(y, n, headvjp._per_head(cot, units))


@pytest.mark.parametrize("copies", [1, 2])
@pytest.mark.parametrize("arch", SLICED)
def test_head_sliced_gradients_equal_the_plain_backward(arch, copies, tmp_path, monkeypatch):
    """Per receiver, summed over ``copies`` stacked IG steps: head_vjp's columns, the written-out norm
    derivative and the fused path (layers after the first) against autograd's batched backward alone."""
    run = edge_run(load(str(build(arch, tmp_path))))
    steps = {s: _toward(_start_delta(run, s), [0.0, 0.5][:copies]) for s in run.layout.streams} if copies > 1 else {}
    grad = GradPass(run, steps, copies=copies)
    used: list = []

    def spy(*args, **kwargs):
        g = headvjp.fused_through_norm(*args, **kwargs)
        used.append(g is not None)
        return g

    monkeypatch.setattr(estimate, "fused_through_norm", spy)
    fast = {tuple(rs): g for rs, g in grad.receivers()}
    monkeypatch.setattr(estimate, "fused_through_norm", lambda *args, **kwargs: None)
    monkeypatch.setattr(estimate, "head_vjp", _plain)
    monkeypatch.setattr(estimate, "norm_vjp", lambda normed, x, gn, *rest: headvjp.plain_vjp(normed, x, gn))
    plain = {tuple(rs): g for rs, g in grad.receivers()}
    assert fast.keys() == plain.keys()
    for rs, g in plain.items():
        scale = float(g.abs().max()) or 1.0
        torch.testing.assert_close(fast[rs], g, rtol=1e-5, atol=1e-6 * scale, msg=f"{arch} receivers {rs}")
    assert sum(used) >= 3  # past the first layer (which maps the columns) the fused path ran: its checks passed


def _module_and_cotangent(mix: bool):
    """q = reshape(Linear(n)) into 2 heads of 4, plus (mix) a term that adds every column into each head."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8, bias=False)
    n = torch.randn(2, 3, 8, requires_grad=True)
    with headvjp.linear_taps(torch.nn.Sequential(lin)) as taps:
        out = lin(n)
    heads = out.view(2, 3, 2, 4).transpose(1, 2)  # (B, H, T, D)
    if mix:
        heads = heads + out.sum(-1)[:, None, :, None]
    return heads, n, torch.randn(heads.shape), taps


@pytest.mark.parametrize("mix", [False, True])
def test_the_column_map_holds_only_for_heads_separable_after_the_projection(mix):
    q, n, cot, taps = _module_and_cotangent(mix)
    memo: dict = {}
    g = headvjp.head_vjp(q, n, cot, [0, 1], taps, memo, "q")
    torch.testing.assert_close(g, headvjp.plain_vjp(q, n, headvjp._per_head(cot, [0, 1])))
    assert (memo["q"] is False) == mix  # mixed heads share columns: refused, the plain backward from then on
    again = headvjp.head_vjp(q, n, cot, [0, 1], taps, memo, "q")  # the mapped path (or the refused one)
    torch.testing.assert_close(again, g)
    if not mix:
        assert [c[0].tolist() for c in (memo["q"][0], memo["q"][1])] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_a_path_the_projections_do_not_carry_fails_the_sum_check():
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8, bias=False)
    n = torch.randn(2, 3, 8, requires_grad=True)
    with headvjp.linear_taps(torch.nn.Sequential(lin)) as taps:
        out = lin(n)
    q = (out + 2 * n).view(2, 3, 2, 4).transpose(1, 2)  # a second path from n, past the Linear
    memo: dict = {}
    g = headvjp.head_vjp(q, n, torch.randn(q.shape), [0, 1], taps, memo, "q")
    assert memo["q"] is False
    assert g.shape == (2, *n.shape)


@pytest.mark.parametrize("arch", ["llama", "gemma2"])
def test_the_gradient_pass_with_recomputed_blocks_gives_the_same_gradients(arch, tmp_path, monkeypatch):
    """Past RECOMPUTE_FROM tokens each block is run again in the backward (recompute.py): the hooks that keep
    q, k, v, outputs, leaves and the stream's record must let the forward's call count, not the rerun's."""
    run = edge_run(load(str(build(arch, tmp_path))))
    stored = GradPass(run, {})
    monkeypatch.setattr(estimate, "RECOMPUTE_FROM", 1)
    again = GradPass(run, {})
    assert stored.grads.keys() == again.grads.keys() and len(stored.grads) > 0
    for key, g in stored.grads.items():
        torch.testing.assert_close(again.grads[key], g, rtol=1e-5, atol=1e-7, msg=str(key))
    for j, g in stored.leaf_grads.items():
        torch.testing.assert_close(again.leaf_grads[j], g, rtol=1e-5, atol=1e-7)
    for key, r in stored.rec.items():
        assert again.rec[key].keys() == r.keys()
        torch.testing.assert_close(again.rec[key]["x_mlp"], r["x_mlp"])
        assert not again.rec[key]["x_in"].requires_grad or again.rec[key]["x_in"].grad_fn is not None
    want = {tuple(rs): g for rs, g in stored.receivers()}
    for rs, g in again.receivers():
        torch.testing.assert_close(g, want[tuple(rs)], rtol=1e-5, atol=1e-7)
