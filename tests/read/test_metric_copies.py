"""A metric on k copies of n prompts (patch's, the circuit's and the ablation's batched forwards) is read a
slice of copies at a time when the per-prompt fields tiled (kl's clean log-probabilities [n, V]) or the logits
widened would be large: the numbers are those of one call on everything, values and gradients."""

from __future__ import annotations

import pytest
import torch

from attnroute.read.ground import copies as copies_mod
from attnroute.read.ground.copies import metric_of_copies
from attnroute.read.ground.metrics import logit_diff, resolve


def _case(dtype, k=7, n=3, V=50, T=4):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(k * n, 1, V, generator=g) * 3).to(dtype).requires_grad_()
    ids = torch.randint(0, V, (n, T), generator=g)
    batch = {"input_ids": ids.repeat(k, 1), "attention_mask": torch.ones(k * n, T, dtype=torch.long)}
    clean = torch.log_softmax(torch.randn(n, V, generator=g), -1)
    fields = {"answer": ids[:, 0], "wrong": ids[:, 1], "clean_logprobs": clean, "unused": None}
    return x, batch, fields, n, k


def _one_call(metric, x, batch, fields, k):
    tiled = {f: v.repeat(k, *([1] * (v.dim() - 1))) for f, v in fields.items() if v is not None}
    return metric(x, {**batch, **tiled})


@pytest.mark.parametrize("name", ["logit-diff", "prob", "logprob", "kl"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tile", [1, 600, 64 << 20])  # one copy a call, two copies, all at once
def test_slices_of_copies_give_one_calls_numbers_and_gradient(monkeypatch, name, dtype, tile):
    monkeypatch.setattr(copies_mod, "TILE_BYTES", tile)
    metric = resolve(name)[1]
    x, batch, fields, n, k = _case(dtype)
    got = metric_of_copies(metric, x, batch, fields, n)
    (g_got,) = torch.autograd.grad(got.sum(), x)
    want = _one_call(metric, x, batch, fields, k)
    (g_want,) = torch.autograd.grad(want.sum(), x)
    assert got.shape == (k * n,) and torch.equal(got, want) and torch.equal(g_got, g_want)


def test_a_user_metric_sees_each_prompt_with_its_own_fields_in_every_slice(monkeypatch):
    monkeypatch.setattr(copies_mod, "TILE_BYTES", 600)
    seen = []

    def metric(x, batch):
        assert x.shape[0] == batch["input_ids"].shape[0] == batch["answer"].shape[0]
        seen.append(x.shape[0])
        return x[:, -1].float().gather(1, batch["answer"][:, None])[:, 0] + batch["input_ids"][:, 0]

    x, batch, fields, n, k = _case(torch.float32)
    got = metric_of_copies(metric, x, batch, fields, n)
    assert torch.equal(got, _one_call(metric, x, batch, fields, k)) and len(seen) > 2 and sum(seen) == 2 * k * n


def test_logit_diff_widens_the_two_logits_it_reads_to_the_rows_numbers():
    x, batch, fields, n, k = _case(torch.bfloat16)
    b = {"answer": fields["answer"].repeat(k), "wrong": fields["wrong"].repeat(k)}
    row = x[:, -1].float()
    want = row.gather(1, b["answer"][:, None])[:, 0] - row.gather(1, b["wrong"][:, None])[:, 0]
    assert torch.equal(logit_diff(x, b), want)
