"""A pair with no gap is a verdict, not a crash: where the clean and corrupt runs agree (to the rounding a metric
of their scale carries: ground/stats.gap), every ratio that divides by their difference — normalized effects,
faithfulness, CPR, CMD, a route's share of the gap — is null, and the verdict says why. The circuit CLI once
crashed formatting a null CPR after running every edge (no JSON written), and a 3-token pair's 2.4e-7 rounding
difference was taken as a gap ("CPR 0.25", "42 edges reach faithfulness 2.00")."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import attnroute as ar
from attnroute.cli import main
from attnroute.models import load
from attnroute.read.ground.stats import gap

from .zoo import build

SAME = [ar.PromptPair("the cat sat on the mat and", "the cat sat on the mat and", " the", " a")]
SHORT = [ar.PromptPair("the cat", "the cat", " the", " a")]  # runs that differ only by rounding


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build("llama", tmp_path_factory.mktemp("nogap"))


def test_the_gap_rule_tells_rounding_from_a_difference():
    assert gap([0.3300001], [0.33]) is None  # 1e-7 on a metric of scale 1: rounding
    assert gap([1000.05], [1000.0]) is None  # 5e-2 on a scale of 1,000 (float32 relative 1e-4 × 1,000 = 0.1)
    assert gap([0.31], [0.30]) == pytest.approx(0.01)
    assert gap([0.31], [0.30], torch.bfloat16) is None  # bfloat16 rounds at ~1e-1 relative (READ_TOLERANCE)
    assert gap([float("nan")], [0.0]) is None


@pytest.mark.parametrize("pairs", [SAME, SHORT], ids=["equal texts", "three tokens"])
def test_a_circuit_with_no_gap_has_no_cpr_and_says_why(tiny_dir, pairs):
    r = ar.circuit(load(str(tiny_dir)), pairs, exact=0)
    c = r.circuit
    assert c["cpr"] is None and c["cmd"] is None and c["chosen"]["k"] is None and "no gap" in c["chosen"]["reason"]
    assert all(p["faithfulness"] is None for p in c["curve"])
    assert any("undefined" in line for line in r.to_dict()["verdict"]["lines"])
    assert all(e["normalized"] is None for e in r.edges)


def test_the_circuit_cli_with_no_gap_writes_every_output_and_exits_0(tiny_dir, tmp_path, capsys):
    out, csv, png = tmp_path / "c.json", tmp_path / "c.csv", tmp_path / "c.png"
    argv = ["circuit", "--model", str(tiny_dir), "--clean", SAME[0].clean, "--corrupt", SAME[0].corrupt]
    argv += ["--answer", " the", "--wrong", " a", "--exact", "0"]
    assert main([*argv, "--json", str(out), "--csv", str(csv), "--plot", str(png)]) == 0
    data = json.loads(out.read_text())
    assert data["circuit"]["cpr"] is None and csv.stat().st_size > 0 and png.read_bytes()[:4] == b"\x89PNG"
    said = " ".join(capsys.readouterr().out.split())
    assert "no gap: CPR, CMD undefined" in said


def test_patching_path_patching_and_routes_with_no_gap_normalize_nothing(tiny_dir):
    loaded = load(str(tiny_dir))
    p = ar.patch(loaded, SAME, exact="all")
    assert p.meta.normalized_defined is False
    assert all(r["normalized"] is None and r["estimate_normalized"] is None for r in p.rows)
    assert all(np.isfinite(r["delta"]) for r in p.rows)  # the deltas themselves stand
    one = ar.path_patch(loaded, SAME, sender="L0.H3", receiver="L1.H1", channel="k").to_dict()
    assert one["edge"]["normalized"] is None
    routes = ar.routes(loaded, prompts=SAME, layers=[0], verify=2).routes
    assert routes and all(r["toward_corrupt"] is None and r["exact_toward_corrupt"] is None for r in routes)
