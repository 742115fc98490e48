"""HeadTable on real models: statistics agree with transformers' eager weights; roles and effects."""

import json

import numpy as np
import pytest
import torch

import attnroute as ar
from attnroute.engine.repeats import repeated_random_tokens
from attnroute.read import effects
from attnroute.read.heads import DEFAULT_TEXT, repeated_scores
from attnroute.read.stimuli import encode_text
from attnroute.read.textpass import body, text_statistics


def eager_attentions(lm, ids):
    lm.model.set_attn_implementation("eager")
    with torch.no_grad():
        return lm.model(input_ids=ids, output_attentions=True).attentions  # L × [B, H, T, T]


def independent_key_sets(tokenizer, ids):
    """Sink and punctuation keys written out again from their definitions (docs/head-scores.md)."""
    import string

    tokens = tokenizer.convert_ids_to_tokens(ids[0].tolist())
    special = set(tokenizer.all_special_ids or [])
    sink = [j == 0 or t in special for j, t in enumerate(ids[0].tolist())]
    punct = []
    for j, tok in enumerate(tokens):
        core = tok.replace("Ġ", "").replace("▁", "").strip()
        punct.append(bool(core) and all(ch in string.punctuation for ch in core) and not sink[j])
    return torch.tensor(sink), torch.tensor(punct)


def value_norms_by_projection(lm, ids, layer):
    """‖v_j W_O^h‖ by pushing every head's value through its own slice of the output projection."""
    values = {}
    module = lm.attention_modules[layer]
    v_lin = getattr(module, "v_proj", None) or module.value
    hook = v_lin.register_forward_hook(lambda m, i, o: values.__setitem__("v", o.detach()))
    with torch.no_grad():
        lm.model(input_ids=ids)
    hook.remove()
    H, Hkv = lm.n_heads, lm.n_kv_heads
    W = lm.out_projections[layer].weight.detach().double()  # (C, H·D)
    D = W.shape[1] // H
    v = values["v"][0].double().view(-1, Hkv, D)  # (T, Hkv, D)
    out = torch.zeros(H, v.shape[0], dtype=torch.float64)
    for h in range(H):
        out[h] = (v[:, h // (H // Hkv)] @ W[:, h * D : (h + 1) * D].T).norm(dim=-1)  # (T,)
    return out


@pytest.mark.parametrize("max_weight", [False, True], ids=["fused", "blocked"])
@pytest.mark.parametrize("which", ["smollm2", "minilm"])
def test_every_text_column_equals_an_independent_computation_from_eager_weights(which, max_weight, request):
    """Each column recomputed from transformers' own eager weights by its definition, so a statistic
    replaced by a constant (or by the wrong key set) fails here."""
    lm = request.getfixturevalue(which)
    ids, _ = encode_text(lm.tokenizer, DEFAULT_TEXT, None)
    cols, offsets, paths = text_statistics(lm, ids, lambda *a: None, max_weight=max_weight)
    assert paths["entropy"] == ("blocked" if max_weight else "fused")
    att = eager_attentions(lm, ids)
    T = ids.shape[1]
    rows = torch.arange(1, T) if lm.causal else torch.arange(T)  # rows that see >= 2 keys
    n_vis = (rows + 1 if lm.causal else torch.full((len(rows),), T)).double()
    sink, punct = independent_key_sets(lm.tokenizer, ids)
    qpos, kpos = rows[:, None], torch.arange(T)[None, :]
    band = ((qpos - kpos).abs() < 4).double()
    for layer, a in enumerate(att):
        a = a[0, :, rows].double()  # (H, rows, T)
        ent = -(torch.special.xlogy(a, a)).sum(-1)  # (H, rows)
        expect = {
            "entropy": ent.mean(-1),
            "entropy_norm": (ent / torch.log(n_vis)).mean(-1),
            "sink_mass": a[..., sink].sum(-1).mean(-1),
            "punct_mass": a[..., punct].sum(-1).mean(-1),
            "local": (a * band).sum(-1).mean(-1),
        }
        for name, value in expect.items():
            np.testing.assert_allclose(cols[name][layer], value.numpy(), atol=3e-4, err_msg=f"{name} L{layer}")
        if layer in (0, len(att) - 1):
            fn = value_norms_by_projection(lm, ids, layer)[:, None, :]  # (H, 1, T)
            weighted = a * fn  # ‖α_ij f(x_j)‖ = α_ij ‖f(x_j)‖
            share = weighted[..., sink].sum(-1) / weighted.sum(-1)
            np.testing.assert_allclose(cols["norm_mass"][layer], share.mean(-1).numpy(), atol=3e-4)
        if not max_weight:  # the fused path leaves what is not linear in the weights to the blocked one
            assert np.isnan(cols["max_weight"][layer]).all() and np.isnan(offsets[layer]).all()
            continue
        np.testing.assert_allclose(cols["max_weight"][layer], a.max(-1).values.mean(-1).numpy(), atol=3e-4)
        arg = a.argmax(-1)  # (H, rows)
        off = rows[None, :] - arg
        first = (arg == 0).double().mean(-1)
        prev = ((off == 1) & (arg != 0)).double().mean(-1)
        np.testing.assert_allclose(offsets[layer, :, 0], first.numpy(), atol=1e-6)
        np.testing.assert_allclose(offsets[layer, :, 2], prev.numpy(), atol=1e-6)
    if max_weight:
        assert np.allclose(offsets.sum(-1), 1.0)


@pytest.mark.parametrize("impl", [None, "eager"])  # the default (fused) path and the weights' path
def test_repeated_token_scores_match_eager_diagonals(smollm2, impl):
    stim = repeated_random_tokens(smollm2.tokenizer, S=12, batch=2, seed=5)
    scores = repeated_scores(smollm2, stim, impl=impl)
    att = eager_attentions(smollm2, stim.input_ids)
    S, P = stim.S, stim.prefix
    for layer in (0, 17, 29):
        a = att[layer].double()  # (B, H, T, T)
        q = torch.arange(P + S, P + 2 * S)
        ind = a[:, :, q, q - S + 1].mean((0, 2))
        prev = a[:, :, torch.arange(P + 1, P + 2 * S), torch.arange(P, P + 2 * S - 1)].mean((0, 2))
        np.testing.assert_allclose(scores["induction"][layer], ind.numpy(), atol=1e-5)
        np.testing.assert_allclose(scores["prev_token"][layer], prev.numpy(), atol=1e-5)


def test_repeated_scores_refuse_an_unknown_path(smollm2):
    stim = repeated_random_tokens(smollm2.tokenizer, S=4, batch=1, seed=0)
    with pytest.raises(ar.InputError, match="impl"):
        repeated_scores(smollm2, stim, impl="blocked")


def test_statistics_pass_keeps_no_kv_cache(smollm2):
    # one reading pass never reuses a cache; at 4,096 tokens SmolLM2's would hold 189 MB to the end
    out = body(smollm2)(input_ids=torch.tensor([[1, 2, 3]]))
    assert out.past_key_values is None


def test_smollm2_has_induction_and_previous_token_heads(smollm2):
    table = ar.read_heads(smollm2, ablation=False)
    assert table["entropy"].shape == (30, 9)
    ind, prev = table.with_role("induction"), table.with_role("previous-token")
    assert len(ind) >= 3 and len(prev) >= 3
    assert max(table["induction"].ravel()) > 0.6
    # induction heads sit above a previous-token head (the two-layer circuit of Olsson et al.)
    assert min(l for l, _ in ind) > min(l for l, _ in prev)
    loss = table.meta["induction_loss"]
    assert loss["second_repeat"] < loss["first_repeat"] / 2
    assert ((table["role_stability"] >= 0) & (table["role_stability"] <= 1)).all()
    assert ((table["entropy_norm"] >= 0) & (table["entropy_norm"] <= 1 + 1e-6)).all()


def one_forward_per_head(lm, batch, layer, head, mode):
    """The slow oracle, built without the code under test: zero or mean ablation edits the head's slice
    of the output projection's input with a forward pre-hook (plain torch); uniform ablation uses the
    engine's UniformWeights on that one head."""
    proj = lm.out_projections[layer]
    D = proj.in_features // lm.n_heads
    cols = slice(head * D, (head + 1) * D)
    if mode == "uniform":
        with torch.no_grad(), ar.read_routed(lm, interventions=[ar.UniformWeights([head], layer)], impl="eager"):
            return lm.model(**batch)
    seen = {}
    grab = proj.register_forward_pre_hook(lambda m, args: seen.__setitem__("x", args[0].detach().clone()))
    with torch.no_grad():
        lm.model(**batch)
    grab.remove()
    fill = torch.zeros(D) if mode == "zero" else seen["x"][..., cols].mean(dim=(0, 1))

    def edit(module, args):
        x = args[0].clone()
        x[..., cols] = fill.to(x.dtype)
        return (x,)

    hook = proj.register_forward_pre_hook(edit)
    try:
        with torch.no_grad():
            return lm.model(**batch)
    finally:
        hook.remove()


@pytest.mark.parametrize("mode", effects.MODES)
def test_exact_sweep_equals_one_forward_per_head(smollm2, mode):
    stim = repeated_random_tokens(smollm2.tokenizer, S=8, batch=1, seed=1)
    batch = {"input_ids": stim.input_ids, "attention_mask": stim.attention_mask}
    # every head of the first, a middle and the last layer: the sweep batches a layer's heads together and
    # restarts from the layer, which is what is checked here, at a ninth of the cost of all 30 layers
    swept = [(layer, h) for layer in (0, 12, 29) for h in range(smollm2.n_heads)]
    fast = effects.exact_sweep(smollm2, batch, modes=(mode,), heads=swept)[mode]
    assert np.isfinite(fast[[0, 12, 29]]).all() and np.isnan(fast[1]).all()  # the heads asked for, no others
    base, _, _, _ = effects.clean_pass(smollm2, batch)
    for layer, head in [(0, 0), (12, 4), (29, 8)]:
        out = one_forward_per_head(smollm2, batch, layer, head, mode)
        slow = float((effects.effect_loss(smollm2, batch, out) - base).mean())
        assert fast[layer, head] == pytest.approx(slow, abs=1e-5)


def test_gradient_estimate_ranks_like_the_exact_sweep(smollm2):
    stim = repeated_random_tokens(smollm2.tokenizer, S=12, batch=1, seed=2)
    batch = {"input_ids": stim.input_ids, "attention_mask": stim.attention_mask}
    # every third layer's 9 heads, 90 of 270 (5 s, not 14): rank_agreement compares the heads measured
    heads = [(layer, h) for layer in range(0, smollm2.n_layers, 3) for h in range(smollm2.n_heads)]
    exact = effects.exact_sweep(smollm2, batch, modes=("zero",), heads=heads)["zero"]
    assert np.isnan(exact).sum() == 180
    est = effects.gradient_estimate(smollm2, batch)
    agree = effects.rank_agreement(est, exact)
    assert agree["spearman"] > 0.8, agree  # measured 0.93 (0.88 over all 270 heads)


def test_minilm_table_with_effects_and_json_contract(minilm, tmp_path):
    table = ar.read_heads(minilm, "A short sentence, with a comma. And a second one.", seeds=(0,), exact="all")
    path = tmp_path / "heads.json"
    table.to_json(path)
    data = json.loads(path.read_text())
    assert data["model"] == "minilm" and data["layers"] == 6 and data["heads"] == 12
    assert len(data["rows"]) == 72 and data["rows"][0]["layer"] == 0 and data["rows"][-1]["head"] == 11
    needed = {
        "layer",
        "head",
        "entropy",
        "entropy_norm",
        "max_weight",
        "sink_mass",
        "prev_token",
        "duplicate",
        "induction",
        "local",
        "role",
        "norm_mass",
        "grad_attr",
        "ablation_delta",
    }
    assert needed <= set(data["rows"][0])
    assert all(r["ablation_delta"] is not None for r in data["rows"])
    assert all(r["ablation_mean"] is None for r in data["rows"])  # mean and uniform only when asked
    assert table.meta["ablation"]["statement"] == "exact for all 72 heads"
    assert table.top("ablation_delta", 1)[0][2] > 0


def test_after_layer_runs_once_the_probes_before_it_have_read_the_layer():
    # text_statistics reduces each layer to per-head means inside the forward (memory: one layer's rows),
    # which relies on a fused call handing its block to the probes in list order
    from attnroute.engine.fused_probes import FusedRowStats
    from attnroute.engine.probes import PerLayer
    from attnroute.read.textpass import AfterLayer

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g) for _ in range(3))
    rows, seen = PerLayer(FusedRowStats), []
    after = AfterLayer(lambda layer: seen.append((layer, rows[layer].get("entropy").shape)))
    for layer in (0, 1):
        ar.attend(q, k, v, ar.causal(), impl="fused", probes=[rows, after], layer=layer)
    assert seen == [(0, (1, 2, 6)), (1, (1, 2, 6))]
    with pytest.raises(ar.UnsupportedRequest, match="fused"):
        ar.attend(q, k, v, ar.causal(), impl="blocked", probes=[after])
