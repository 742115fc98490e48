"""why: a route's score split into (query side, key side) pairs that add up to it, on every kind of attention
attnroute reads; one pair's term against a computation written here from the definition."""

from __future__ import annotations

import json

import pytest
import torch

import attnroute as ar
from attnroute.cli import main
from attnroute.errors import InputError
from attnroute.models import load

from .test_circuits import _parts, _record, _write
from .zoo import build

TEXT = "the cat sat on the mat and the cat sat on the hat"  # 15 tokens with [CLS]/[SEP]-style ends


def _adds_up(r: dict) -> None:
    assert abs(r["difference"]) <= 1e-4 * max(1.0, abs(r["score"]))
    assert r["meta"]["relative_difference"] <= 1e-4
    q_total = sum(t["total"] for t in r["totals"]["query_side"])
    k_total = sum(t["total"] for t in r["totals"]["key_side"])
    bias = r["totals"].get("position_bias", 0.0)
    assert q_total + bias == pytest.approx(r["sum"], rel=1e-6, abs=1e-9)
    assert k_total + bias == pytest.approx(r["sum"], rel=1e-6, abs=1e-9)
    g = r["grouped"]  # a few lines per side, the rest in one: they sum to the score exactly
    for side in ("query_side", "key_side"):
        assert len(g[side]) <= 5 + 2 and sum(x["total"] for x in g[side]) == pytest.approx(r["sum"], abs=1e-9)
    assert sum(p["term"] for p in r["pairs"]) + g["pairs_rest"] == pytest.approx(r["sum"], abs=1e-9)
    for w in r["route_weights"]:
        assert 0 <= w["weight"] <= 1 and w["weight"] == pytest.approx(
            float(torch.exp(torch.tensor(w["score"] - w["lse"])))
        )


@pytest.mark.parametrize(
    "arch, head, query, key",
    [
        ("llama", "L1.H3", "11", "4"),  # grouped queries (4 heads on 2 kv heads), rotary
        ("gemma2", "L1.H2", "11", "7"),  # soft-cap, post-norms, a window of 6
        ("mistral", "L1.H1", "11", "9"),  # sliding window
        ("qwen3", "L1.H0", "12", "8"),  # QK-norm inside the attention module, on [B, T, H, D]
        ("gemma3_text", "L1.H0", 12, 8),  # QK-norm after the heads move forward, [B, H, T, D]; indices as ints
        ("gpt_oss", "L1.H3", "11", "9"),  # sinks, output-projection biases
        ("t5", "E1.H2", "7", "2"),  # an encoder's relative position bias
        ("t5", "L1.xH1", "0", "4"),  # cross-attention: query side in the decoder, key side in the encoder
        ("bert", "E1.H2", "7", "2"),  # post-LN, absolute positions: components carried through frozen LNs
        ("bart", "L1.xH1", "0", "4"),  # post-LN cross-attention: the key side is the encoder's output, split
        ("bart", "E1.H0", "5", "3"),
    ],
)
def test_the_pairs_add_up_to_the_score(arch, head, query, key, tmp_path):
    r = ar.why(load(str(build(arch, tmp_path))), TEXT, head=head, query=query, key=key, top=5).to_dict()
    assert ar.WhyResult.validate(r) is None
    _adds_up(r)
    assert len(r["pairs"]) == 5 and abs(r["pairs"][0]["term"]) >= abs(r["pairs"][-1]["term"])
    assert r["pairs"][0]["query_side"]["position"] == int(query) and r["pairs"][0]["key_side"]["position"] == int(key)
    if arch == "gemma2":
        assert r["meta"]["softcap"] and r["meta"]["softcap"] > 0
    if arch == "t5" and head == "E1.H2":
        assert r["meta"]["position_bias"] and r["totals"]["position_bias"] != 0
    if arch == "bert":  # absolute positions live in the embeddings: no position bias in the score
        assert not r["meta"]["position_bias"] and "position_bias" not in r["totals"]
    if "xH" in head:  # the key side is the encoder's
        assert {t["component"].get("stream") for t in r["totals"]["key_side"]} <= {"encoder", None}
        assert any(t["component"]["label"].startswith("E") for t in r["totals"]["key_side"])


@pytest.mark.parametrize(
    "arch, head, query, key",
    [("llama", "L1.H3", 11, 4), ("gemma2", "L1.H2", 11, 7), ("mistral", "L1.H1", 11, 9), ("gpt_oss", "L1.H3", 11, 9)],
)
def test_the_routes_weight_is_the_models_own_attention_weight(arch, head, query, key, tmp_path):
    """why says the weight its score carries against the row (soft-cap, window and sinks included): the
    model's own eager attention probability of that route."""
    from attnroute.read.stimuli import encode_text

    loaded = load(str(build(arch, tmp_path)))
    r = ar.why(loaded, TEXT, head=head, query=str(query), key=str(key)).to_dict()
    (w,) = r["route_weights"]
    assert any(line.startswith(f"weight {w['weight']:.3f}") for line in r["verdict"]["lines"])
    ids, _ = encode_text(loaded.tokenizer, TEXT, None, add_bos=loaded.causal)
    model, before = loaded.model, loaded.model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            att = model(input_ids=ids, output_attentions=True).attentions
    finally:
        model.set_attn_implementation(before)
    layer, h = int(head[1]), int(head.split("H")[1])
    assert w["weight"] == pytest.approx(float(att[layer][0, h, query, key]), abs=1e-5)


def test_one_pair_against_the_definition(tmp_path):
    """llama, L1.H3 (kv head 1), route 11 → 4: the term (L0.H2 at 11) × (L0.MLP at 4), computed here from the
    writes, the RMSNorm at the run's σ, the projections and rotary — no attnroute code."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    loaded = load(str(build("llama", tmp_path)))
    model, tok = loaded.model, loaded.tokenizer
    r = ar.why(loaded, TEXT, head="L1.H3", query="11", key="4", top=10_000).to_dict()
    ids = torch.tensor([tok(TEXT)["input_ids"]])
    rec = _record(model, ids)
    p = _parts(model, 1)
    x = rec[("x", 1)]
    sigma = (x.pow(2).mean(-1, keepdim=True) + p["attn_norm"].variance_epsilon).sqrt()
    gamma = p["attn_norm"].weight
    cos, sin = model.model.rotary_emb(x, torch.arange(ids.shape[1])[None])
    D = model.config.head_dim if getattr(model.config, "head_dim", None) else 64 // 4

    def side(proj, write, h):
        y = proj(gamma * write / sigma)  # [1, T, heads·D]
        return y.view(1, ids.shape[1], -1, D).transpose(1, 2)[:, h : h + 1]  # [1, 1, T, D]

    with torch.no_grad():
        q = side(p["q"], _write(model, rec, "head", 0, 2), 3)
        k = side(p["k"], _write(model, rec, "mlp", 0, None), 1)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        want = float((q[0, 0, 11] * k[0, 0, 4]).sum()) * D**-0.5
    got = next(
        x["term"] for x in r["pairs"] if x["query_side"]["label"] == "L0.H2" and x["key_side"]["label"] == "L0.MLP"
    )
    assert got == pytest.approx(want, rel=1e-4, abs=1e-6)


def test_routes_average_their_terms(tmp_path):
    loaded = load(str(build("llama", tmp_path)))
    one = [ar.why(loaded, TEXT, head="L1.H1", query=q, key=k).to_dict() for q, k in (("11", "4"), ("12", "5"))]
    both = ar.why(loaded, TEXT, head="L1.H1", routes="induction").to_dict()
    assert both["meta"]["routes"] >= 2
    routes_file = tmp_path / "routes.json"
    rows = [{"layer": 1, "head": 1, "query": q, "key": k} for q, k in ((11, 4), (12, 5))]
    routes_file.write_text(json.dumps({"routes": rows}))
    listed = ar.why(loaded, TEXT, head="L1.H1", routes=str(routes_file)).to_dict()
    assert listed["score"] == pytest.approx((one[0]["score"] + one[1]["score"]) / 2, rel=1e-5)
    by = lambda r: {t["component"]["label"]: t["total"] for t in r["totals"]["key_side"]}  # noqa: E731
    for label, total in by(listed).items():
        assert total == pytest.approx((by(one[0])[label] + by(one[1])[label]) / 2, rel=1e-4, abs=1e-7)
    _adds_up(both)


def test_masked_routes_and_bad_heads_are_refused(tmp_path):
    loaded = load(str(build("mistral", tmp_path)))
    with pytest.raises(InputError, match="mask forbids"):
        ar.why(loaded, TEXT, head="L1.H0", query="12", key="2")  # outside the window of 6
    with pytest.raises(InputError, match="mask forbids"):
        ar.why(loaded, TEXT, head="L1.H0", query="3", key="5")  # a key after its query
    with pytest.raises(InputError, match="2 layers × 4 heads"):
        ar.why(loaded, TEXT, head="L5.H0", query="3", key="2")
    with pytest.raises(InputError, match="2 layers × 4 heads"):
        ar.why(load(str(build("bert", tmp_path / "b"))), TEXT, head="E2.H0", query="3", key="2")
    with pytest.raises(InputError, match="has no decoder; its heads are E0.H0 … E1.H3"):  # not "0 layers"
        ar.why(load(str(tmp_path / "b" / "bert")), TEXT, head="L1.H1", query="3", key="2")
    with pytest.raises(InputError, match=r"has no encoder; its heads are L0.H0 … L1.H3"):
        ar.why(loaded, TEXT, head="E0.H0", query="3", key="2")


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--head", "L1"], "--head"),
        (["--head", "L1.H0"], "--query"),
        (["--head", "L1.H0", "--query", "1", "--key", "0", "--routes", "induction"], "--routes"),
        (["--head", "L1.H0", "--routes", "nowhere.json"], "--routes"),
        (["--head", "L1.H0", "--query", "1", "--key", "0", "--top", "0"], "--top"),
    ],
)
def test_flags_are_refused_in_one_line_before_the_model_loads(argv, field, capsys):
    assert main(["why", TEXT, "--model", "/nonexistent/model", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and field in err


def test_the_command_writes_json_a_graph_and_the_report_draws_it(tmp_path, capsys):
    model = build("llama", tmp_path / "m")
    out, png = tmp_path / "why.json", tmp_path / "why.png"
    argv = ["why", TEXT, "--model", str(model), "--head", "L1.H3", "--query", "11", "--key", "4", "--json", str(out)]
    assert main([*argv, "--plot", str(png)]) == 0
    d = json.loads(out.read_text())
    _adds_up(d)
    assert "L1.H3" in capsys.readouterr().out and png.read_bytes()[:4] == b"\x89PNG"
    page = tmp_path / "page.html"
    assert main(["report", TEXT, "--model", str(model), "--no-ablation", "--out", str(page), "--add", str(out)]) == 0
    html = page.read_text()
    assert 'data-experiment="why"' in html and "Why a head attends where it does" in html


@pytest.mark.slow
def test_smollm2_previous_token_head_writes_what_the_induction_head_keys_on():
    """SmolLM2's L18.H6 on repeated random words: over its induction routes, the key side's largest component
    is a previous-token head's write at the key (issue 33's heads list L16.H0 among them)."""
    loaded = load("smollm2")
    words = " river stone cloud table garden window paper music candle forest ladder mirror".split()
    text = " ".join(words + words)
    r = ar.why(loaded, text, head="L18.H6", routes="induction").to_dict()
    _adds_up(r)
    assert r["meta"]["routes"] >= len(words) - 1  # the first word has no leading space: its repeat differs
    keys = [t["component"]["label"] for t in r["totals"]["key_side"][:3]]
    assert "L16.H0" in keys


def test_the_positions_axis_of_a_qk_norm_is_found_or_refused_not_guessed():
    """A QK-norm's input is [B, T, H, D] (Qwen3) or [B, H, T, D] (Gemma 3): the positions are the axis of size T.
    With as many heads as tokens either could be: refused in one line."""
    from attnroute.read.circuits.layout import CircuitUnsupported
    from attnroute.read.circuits.qk import _seq_axis

    assert _seq_axis(torch.zeros(1, 4, 9, 16), 9, "Gemma3RMSNorm") == 2
    assert _seq_axis(torch.zeros(1, 9, 4, 16), 9, "Qwen3RMSNorm") == 1
    assert _seq_axis(torch.zeros(1, 9, 64), 9, "Olmo2RMSNorm") == 1  # normed over every head at once
    with pytest.raises(CircuitUnsupported, match="ambiguous"):
        _seq_axis(torch.zeros(1, 4, 4, 16), 4, "Gemma3RMSNorm")


def test_positions_from_python_are_indices_or_words_and_nothing_else():
    from attnroute.errors import InputTypeError
    from attnroute.settings import KnockoutSettings, WhySettings

    why = WhySettings(text="a b c d", head="L1.H0", query=[3, 2], key=0)
    assert (why.query, why.key) == ("3,2", "0")
    assert KnockoutSettings(text="a b c", source=2, target="a").source == "2"
    for bad in (1.5, True, [], [1, "x"], -1, ""):
        with pytest.raises(InputTypeError, match="query must be a word of the text or token indices"):
            WhySettings(text="a b c d", head="L1.H0", query=bad, key=0)
