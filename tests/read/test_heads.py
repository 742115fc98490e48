"""HeadTable on real models: statistics agree with transformers' eager weights; roles and effects."""

import json

import numpy as np
import pytest
import torch

import attnroute as ar
from attnroute.read import effects
from attnroute.read.heads import DEFAULT_TEXT, repeated_scores, text_statistics
from attnroute.read.stimuli import encode_text, repeated_random_tokens


def eager_attentions(lm, ids):
    lm.model.set_attn_implementation("eager")
    with torch.no_grad():
        return lm.model(input_ids=ids, output_attentions=True).attentions  # L × [B, H, T, T]


@pytest.mark.parametrize("which", ["smollm2", "minilm"])
def test_streaming_statistics_equal_those_from_transformers_eager_weights(which, request):
    lm = request.getfixturevalue(which)
    ids, _ = encode_text(lm.tokenizer, DEFAULT_TEXT, None)
    cols, offsets = text_statistics(lm, ids, lambda *a: None)
    att = eager_attentions(lm, ids)
    T = ids.shape[1]
    rows = slice(1, T) if lm.causal else slice(0, T)  # rows that see >= 2 keys
    for layer, a in enumerate(att):
        a = a[0, :, rows].double()  # (H, rows, T)
        ent = -(torch.special.xlogy(a, a)).sum(-1).mean(-1)
        np.testing.assert_allclose(cols["entropy"][layer], ent.numpy(), atol=2e-4)
        np.testing.assert_allclose(cols["max_weight"][layer], a.max(-1).values.mean(-1).numpy(), atol=2e-5)
        np.testing.assert_allclose(cols["sink_mass"][layer] >= a[..., 0].mean(-1).numpy() - 1e-5, True)
    assert np.allclose(offsets.sum(-1), 1.0)


def test_repeated_token_scores_match_eager_diagonals(smollm2):
    stim = repeated_random_tokens(smollm2.tokenizer, S=12, batch=2, seed=5)
    scores = repeated_scores(smollm2, stim)
    att = eager_attentions(smollm2, stim.input_ids)
    S, P = stim.S, stim.prefix
    for layer in (0, 17, 29):
        a = att[layer].double()  # (B, H, T, T)
        q = torch.arange(P + S, P + 2 * S)
        ind = a[:, :, q, q - S + 1].mean((0, 2))
        prev = a[:, :, torch.arange(P + 1, P + 2 * S), torch.arange(P, P + 2 * S - 1)].mean((0, 2))
        np.testing.assert_allclose(scores["induction"][layer], ind.numpy(), atol=1e-5)
        np.testing.assert_allclose(scores["prev_token"][layer], prev.numpy(), atol=1e-5)


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


@pytest.mark.parametrize("mode", effects.MODES)
def test_exact_sweep_equals_one_forward_per_head(smollm2, mode):
    stim = repeated_random_tokens(smollm2.tokenizer, S=8, batch=2, seed=1)
    batch = {"input_ids": stim.input_ids, "attention_mask": stim.attention_mask}
    fast = effects.exact_sweep(smollm2, batch, modes=(mode,))[mode]
    base, means, _, _ = effects.clean_pass(smollm2, batch)
    for layer, head in [(0, 0), (12, 4), (29, 8)]:
        iv = effects.BatchedAblation(layer, [head], 2, mode, means[layer])
        with torch.no_grad(), ar.read_routed(smollm2, interventions=[iv], impl="eager"):
            out = smollm2.model(**batch)
        slow = float((effects.effect_loss(smollm2, batch, out) - base).mean())
        assert fast[layer, head] == pytest.approx(slow, abs=1e-5)


def test_gradient_estimate_ranks_like_the_exact_sweep(smollm2):
    stim = repeated_random_tokens(smollm2.tokenizer, S=12, batch=2, seed=2)
    batch = {"input_ids": stim.input_ids, "attention_mask": stim.attention_mask}
    exact = effects.exact_sweep(smollm2, batch, modes=("zero",))["zero"]
    est = effects.gradient_estimate(smollm2, batch)
    agree = effects.rank_agreement(est, exact)
    assert agree["spearman"] > 0.5, agree


def test_minilm_table_with_effects_and_json_contract(minilm, tmp_path):
    table = ar.read_heads(minilm, "A short sentence, with a comma. And a second one.", seeds=(0,))
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
    assert table.top("ablation_delta", 1)[0][2] > 0
