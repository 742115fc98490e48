"""`attnroute patch | routes` as a user runs them, and --metric on heads, knockout and swap."""

import json

import numpy as np
import pytest
import torch

import attnroute as ar
from attnroute.cli import main
from attnroute.models import load
from attnroute.show import sections

from .zoo import build

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
PAIR = ["--clean", CLEAN, "--corrupt", CORRUPT, "--answer", " Mary", "--wrong", " John"]


def test_patch_cli_writes_the_json_contract_csv_figure_and_a_report_section(smollm2, tmp_path, capsys):
    js, cs, png = tmp_path / "p.json", tmp_path / "p.csv", tmp_path / "p.png"
    argv = [
        "patch",
        *PAIR,
        "--sites",
        "head,k",
        "--exact",
        "6",
        "--json",
        str(js),
        "--csv",
        str(cs),
        "--plot",
        str(png),
    ]
    assert main(argv) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "tokens (row 1, clean): [0]'<|im_start|>' [1]'When'" in err  # the BOS it prepended, said
    d = json.loads(js.read_text())
    assert d["experiment"] == "patch" and ar.PatchResult.validate(d) is None
    heads = [r for r in d["rows"] if r["site"] == "head"]
    assert len(heads) == 270 and sum(r["exact"] is not None for r in heads) == 6  # exact: the measured Δ, or null
    exact = next(r for r in heads if r["exact"] is not None)
    assert exact["exact"] == exact["delta"]
    assert {"layer", "head", "site", "normalized", "normalized_ci", "delta", "values"} <= set(exact)
    assert len(exact["values"]) == 1 and exact["normalized_ci"] is None  # one prompt: no interval
    m = d["meta"]
    assert m["metric"] == "logit-diff" and m["direction"] == "denoising" and m["m_clean"] > 0 > m["m_corrupt"]
    assert m["prompts"][0]["clean"] == ar.tokens("smollm2", CLEAN)  # the Python helper gives the CLI's tokens
    kv = [r for r in d["rows"] if r["site"] == "k"]
    assert len(kv) == 90 and kv[0]["query_heads"] == [0, 1, 2]
    assert cs.read_text().splitlines()[0].startswith("layer,head,site,position,exact,normalized")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = sections.load(js, "add")
    assert "Activation patching" in html and "data:image/png;base64," in html


def test_patch_per_position_gives_a_layer_head_position_grid(smollm2):
    r = ar.patch(smollm2, clean=CLEAN, corrupt=CORRUPT, answer=" Mary", wrong=" John", positions="John", exact=3)
    d = r.to_dict()
    assert d["meta"]["positions"]["resolved"] == [4, 10]  # both Johns
    assert "occurs 2 times" in d["meta"]["positions"]["note"]
    assert {row["position"] for row in d["rows"]} == {4, 10} and len(d["rows"]) == 30 * 9 * 2
    assert r.grid["head"].shape == (30, 9, 11)


def test_noising_starts_from_the_clean_run(smollm2):
    r = ar.patch(
        smollm2,
        clean=CLEAN,
        corrupt=CORRUPT,
        answer=" Mary",
        wrong=" John",
        direction="noising",
        sites=("layer",),
        exact="all",
    )
    d = r.to_dict()
    last = max((x for x in d["rows"]), key=lambda x: x["layer"])
    # patching every head of the last layer from the corrupt run moves the metric from clean towards corrupt
    assert last["normalized"] < 1 and d["meta"]["m_clean"] > d["meta"]["m_corrupt"]


def test_routes_cli_json_csv_and_figure(smollm2, tmp_path, capsys):
    js, cs, png = tmp_path / "r.json", tmp_path / "r.csv", tmp_path / "r.png"
    argv = [
        "routes",
        CLEAN,
        "--answer",
        " Mary",
        "--wrong",
        " John",
        "--top",
        "8",
        "--verify",
        "3",
        "--json",
        str(js),
        "--csv",
        str(cs),
        "--plot",
        str(png),
    ]
    assert main(argv) == 0, capsys.readouterr().err
    d = json.loads(js.read_text())
    assert ar.RoutesResult.validate(d) is None and len(d["routes"]) == 8
    verified = [r["exact"] is not None for r in d["routes"]]  # the top 3 first, then what the band asks for
    assert verified[:3] == [True] * 3 and sum(verified) == d["meta"]["settle"]["measured"] >= 3
    assert cs.read_text().count("\n") == 9 and png.read_bytes()[:4] == b"\x89PNG"
    assert "Route attribution" in sections.load(js, "add")


def test_knockout_and_swap_report_your_metric_beside_their_own(smollm2):
    k = ar.knockout(
        smollm2, CLEAN, source="14", target="Mary", window=15, metric="logit-diff", answer=" Mary", wrong=" John"
    ).to_dict()
    assert k["metric"]["name"] == "logit-diff" and k["metric"]["clean"] > 0
    assert all("delta_metric_route" in w for w in k["windows"])
    s = ar.swap(smollm2, CORRUPT, CLEAN, window=30, metric="logit-diff", answer=" Mary", wrong=" John").to_dict()
    assert s["metric"]["b"] > 0 > s["metric"]["a"]
    row = s["layers"][0]
    assert row["delta_metric"] == pytest.approx(row["metric"] - s["metric"]["b"])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return load(str(build("llama", tmp_path_factory.mktemp("zoo"))))


def test_heads_metric_effects_equal_zero_ablation_measured_here(tiny):
    """heads --metric: Δ M of zero-ablating a head, against one forward per head with ZeroHead written here."""
    prompts = [
        ar.PromptPair("the cat sat on the mat and", "x", " the", " a"),
        ar.PromptPair("a dog ran in the big park and", "x", " the", " a", row=2),
    ]
    t = ar.read_heads(
        settings=ar.HeadsSettings(
            model=tiny, metric="logit-diff", prompts=prompts, exact="all", verify=False, seeds=(0,)
        )
    )
    got = t.columns["ablation_delta"]
    from attnroute.read.adapter import routed
    from attnroute.read.ground.metrics import logit_diff
    from attnroute.read.ground.prompts import encode

    tok = tiny.tokenizer
    want = np.zeros_like(got)
    for p in prompts:
        ids = encode(tok, "causal", p.clean)[None]
        f = {
            k: torch.tensor([tok(getattr(p, k), add_special_tokens=False)["input_ids"][0]]) for k in ("answer", "wrong")
        }
        with torch.no_grad():
            base = float(logit_diff(tiny.model(input_ids=ids).logits, f)[0])
            for l in range(tiny.n_layers):
                for h in range(tiny.n_heads):
                    with routed(tiny, interventions=[ar.ZeroHead([h], layer=l)], impl="eager"):
                        want[l, h] += (float(logit_diff(tiny.model(input_ids=ids).logits, f)[0]) - base) / len(prompts)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert t.meta.metric == "logit-diff" and "Δ logit-diff" in t.meta.effect_batch
