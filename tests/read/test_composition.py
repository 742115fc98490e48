"""Composition scores against Elhage et al.'s definition computed here from the weights (d × d matrices formed),
on a grouped-query model: each query head with its own kv head."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnroute as ar
from attnroute.models import load
from attnroute.read.circuits import composition as composition_module

from .zoo import build


def _direct(model) -> dict[str, np.ndarray]:
    c = model.config
    H, Hkv, L = c.num_attention_heads, c.num_key_value_heads, c.num_hidden_layers
    D = c.hidden_size // H
    mats = []
    for layer in model.model.layers:
        a, g = layer.self_attn, layer.input_layernorm.weight.detach().double()
        Wq, Wk, Wv = (p.weight.detach().double() * g for p in (a.q_proj, a.k_proj, a.v_proj))  # norm folded
        Wo = a.o_proj.weight.detach().double()
        qk, ov = [], []
        for h in range(H):
            kv = h // (H // Hkv)
            qk.append(Wq[h * D : (h + 1) * D].T @ Wk[kv * D : (kv + 1) * D])
            ov.append(Wo[:, h * D : (h + 1) * D] @ Wv[kv * D : (kv + 1) * D])
        mats.append((qk, ov))
    fro = torch.linalg.matrix_norm
    out = {k: np.full((L, H, L, H), np.nan) for k in "qkv"}
    for l2 in range(L):
        for l1 in range(l2):
            for h1 in range(H):
                ov1 = mats[l1][1][h1]
                for h2 in range(H):
                    qk2, ov2 = mats[l2][0][h2], mats[l2][1][h2]
                    out["q"][l1, h1, l2, h2] = fro(qk2.T @ ov1) / (fro(qk2) * fro(ov1))
                    out["k"][l1, h1, l2, h2] = fro(qk2 @ ov1) / (fro(qk2) * fro(ov1))
                    out["v"][l1, h1, l2, h2] = fro(ov2 @ ov1) / (fro(ov2) * fro(ov1))
    return out


@pytest.mark.parametrize("budget", [None, 1], ids=["one-chunk", "layer-by-layer"])
def test_composition_matches_the_definition_on_grouped_queries(tmp_path, monkeypatch, budget):
    """``budget``: the packed Gram matrices held at once; 1 byte sends every sender and receiver layer in its
    own chunk (what a large model's d² does), which must give the same scores."""
    if budget is not None:
        monkeypatch.setattr(composition_module, "PACKED_BYTES", budget)
    loaded = load(str(build("llama", tmp_path, num_hidden_layers=4)))  # 4 query heads on 2 kv heads
    with torch.no_grad():  # the norms' weights made unequal so that folding them in matters
        for layer in loaded.model.model.layers:
            layer.input_layernorm.weight.uniform_(0.5, 1.5)
    r = ar.composition(loaded).to_dict()
    assert ar.CompositionResult.validate(r) is None
    want = _direct(loaded.model)
    for kind in "qkv":
        got = np.array([[[[np.nan if x is None else x for x in row] for row in m] for m in s] for s in r[kind]])
        np.testing.assert_allclose(got, want[kind], rtol=1e-4, equal_nan=True, err_msg=kind)  # float32 products
    assert r["top"]["k"][0]["score"] == pytest.approx(np.nanmax(want["k"]))


def test_composition_is_defined_on_soft_capped_qk_normed_and_post_normed_models(tmp_path):
    for arch in ("gemma2", "qwen3", "gpt2"):
        r = ar.composition(load(str(build(arch, tmp_path / arch)))).to_dict()
        vals = [x for s in r["k"] for m in s for row in m for x in row if x is not None]
        assert vals and all(0 <= x <= 1 for x in vals)


def test_the_command_prints_and_writes_the_scores(tmp_path, capsys):
    from attnroute.cli import main

    out = tmp_path / "composition.json"
    assert main(["composition", "--model", str(build("llama", tmp_path / "m")), "--json", str(out)]) == 0
    import json

    d = json.loads(out.read_text())
    assert len(d["k"]) == 2 and d["k"][1][0][0][0] is None  # a sender after its receiver: no score
    assert "L0.H3 → L1.H1" in capsys.readouterr().out


def test_the_circuits_weight_scores_are_computed_once_per_model_until_a_weight_changes(tmp_path, monkeypatch):
    loaded = load(str(build("llama", tmp_path)))
    calls = []
    real = composition_module.head_matrices
    monkeypatch.setattr(composition_module, "head_matrices", lambda *a: calls.append(1) or real(*a))
    first, stream = composition_module.weight_scores(loaded)
    again, _ = composition_module.weight_scores(loaded)
    assert len(calls) == 1 and again is first and stream == "decoder"
    with torch.no_grad():
        w = loaded.model.model.layers[1].self_attn.q_proj.weight
        w.add_(torch.randn(w.shape, generator=torch.Generator().manual_seed(0)))  # in place: its version moves
    changed, _ = composition_module.weight_scores(loaded)
    assert len(calls) == 2 and not np.allclose(changed["q"][0], first["q"][0], equal_nan=True)
    want = _direct(loaded.model)
    for kind in "qkv":
        np.testing.assert_allclose(changed[kind], want[kind], atol=1e-5)
