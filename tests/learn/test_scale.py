"""learn scale, shortened: √d_k at init, saturation and the stall without the scale."""

import math

import pytest
import torch

from attnroute.engine import TinyConfig
from attnroute.learn import scale
from attnroute.learn.train import build_model

pytestmark = pytest.mark.slow  # trains or measures for seconds to tens of seconds; make test runs it


@pytest.fixture(scope="module")
def inputs():
    return scale.TASK.sample(32, torch.Generator().manual_seed(0)).inputs


def test_logit_std_at_init_follows_sqrt_dk(inputs):
    rows = scale.init_logits(scale.ScaleSettings(init_dims=(16, 64, 512)), inputs)
    for r in rows:
        assert r["unscaled_std"] == pytest.approx(math.sqrt(r["head_dim"]), rel=0.1)  # 4, 8, 22.63
        assert r["scaled_std"] == pytest.approx(1.0, rel=0.1)
        assert r["unscaled_max_weight"] > 2 * r["scaled_max_weight"]  # saturation, before any training
    assert [r["unscaled_max_weight"] for r in rows] == sorted(r["unscaled_max_weight"] for r in rows)


def test_score_moments_match_a_direct_computation(inputs):
    model = build_model(TinyConfig(n_layers=1, n_heads=1, head_dim=32, max_len=48, positions="learned"), 0)
    probe = scale.ScoreMoments()
    with torch.no_grad():
        model(inputs, impl="eager", probes=[probe])
        x = model.blocks[0].norm1(model.embed(inputs) + model.pos(torch.arange(inputs.shape[1])))
        q, k = model.blocks[0].attn.q_proj(x), model.blocks[0].attn.k_proj(x)  # (B, T, 32)
        s = q @ k.transpose(1, 2) / math.sqrt(32)  # (B, T, T)
    visible = s[:, torch.ones(48, 48, dtype=torch.bool).tril()]
    assert probe.std == pytest.approx(float(visible.double().std(unbiased=False)), rel=1e-4)


def test_logit_gradient_probe_matches_autograd():
    from attnroute import attend, causal

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 8, generator=g, requires_grad=True) for _ in range(3))
    r = torch.randn(2, 3, 7, 8, generator=g)
    probe = scale.LogitGrad()
    (attend(q, k, v, causal(), impl="eager", probes=[probe]) * r).sum().backward()
    s = (q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(~torch.ones(7, 7, dtype=torch.bool).tril(), -math.inf)
    s.retain_grad()
    (torch.softmax(s, -1) @ v * r).sum().backward()
    assert math.sqrt(probe.sumsq) == pytest.approx(float(s.grad.norm()), rel=1e-5)


def test_gradients_take_no_step_and_leave_nothing_behind():
    model = build_model(TinyConfig(n_layers=2, n_heads=2, max_len=48, positions="rope"), 0)
    before = [p.detach().clone() for p in model.parameters()]
    grads = scale.gradients(model, scale.TASK.sample(8, torch.Generator().manual_seed(1)))
    assert grads["grad_logits"] > 0 and grads["grad_q"] > 0 and grads["grad_k"] > 0
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_unscaled_training_stalls_where_scaled_learns():
    s = scale.ScaleSettings(steps=600, every=100)  # the scaled run learns between steps 500 and 600 (0.68 → 2.9 nats)
    eval_batch = scale.TASK.sample(64, torch.Generator().manual_seed(5))
    scaled = scale.run_one(s, 64, True, eval_batch)
    unscaled = scale.run_one(s, 64, False, eval_batch)
    assert scaled["learned"] and not unscaled["learned"]
    u, sc = unscaled["curves"], scaled["curves"]
    assert u["max_weight"][0] > 0.75 > 0.3 > sc["max_weight"][0]
    assert sum(u["grad_logits"]) < sum(sc["grad_logits"])
