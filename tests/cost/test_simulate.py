"""Serving simulation: exact accounting on tiny streams, the CLI, bad input."""

import json

import pytest

from attnroute.cli import main
from attnroute.cost import serving
from attnroute.cost.serving import ServeRequest, simulate


def test_contiguous_and_paged_accounting_exactly():
    reqs = [ServeRequest(3, 2), ServeRequest(3, 2)]
    c = simulate(reqs, "contiguous", capacity_tokens=16, block_size=2, max_len=8)
    assert (c.steps, c.max_batch) == (2, 2)
    assert c.real_share == pytest.approx((8 / 16 + 10 / 16) / 2)
    p = simulate(reqs, "paged", capacity_tokens=16, block_size=2, max_len=8)
    assert p.real_share == pytest.approx((8 / 8 + 10 / 12) / 2) and p.waste < c.waste


def test_shared_prefix_blocks_are_stored_once():
    reqs = [ServeRequest(5, 1, prefix=4, group=0) for _ in range(3)]
    reserved, real = serving._slots("paged+shared", [serving._Running(r, 1) for r in reqs], 2, 64)
    assert reserved == (2 + 3 * 1) * 2  # two shared prefix blocks once, one own block each
    plain, _ = serving._slots("paged", [serving._Running(r, 1) for r in reqs], 2, 64)
    assert plain == 3 * 3 * 2


def test_preemption_recomputes_when_blocks_run_out():
    reqs = [ServeRequest(2, 6), ServeRequest(2, 6)]
    r = simulate(reqs, "paged", capacity_tokens=10, block_size=2, max_len=8)
    assert r.preemptions >= 1 and r.steps > 6


def test_cli_json_and_the_vllm_anchor(capsys, tmp_path):
    assert main(["cost", "simulate", "--json", "--plot", str(tmp_path / "s.png"), "--n", "150"]) == 0
    data = json.loads(capsys.readouterr().out)
    by = {p["policy"]: p for p in data["policies"]}
    assert 0.5 < by["contiguous"]["waste"] < 0.9  # vLLM: 60-80 % wasted by contiguous reservation
    assert by["paged"]["waste"] < 0.05  # vLLM: under 4 %
    assert by["paged+shared"]["max_batch"] >= by["paged"]["max_batch"] > by["contiguous"]["max_batch"]
    assert (tmp_path / "s.png").stat().st_size > 5000


def test_csv_requests_and_errors(capsys, tmp_path):
    good = tmp_path / "r.csv"
    good.write_text("prompt_tokens,output_tokens,prefix_tokens,prefix_group\n10,5,4,0\n12,7,4,0\n")
    assert main(["cost", "simulate", "--requests", str(good), "--json"]) == 0
    bad = tmp_path / "bad.csv"
    bad.write_text("prompt_tokens,output_tokens\n10,x\n")
    assert main(["cost", "simulate", "--requests", str(bad)]) == 2
    assert "line 2: lengths must be integers" in capsys.readouterr().err
    assert main(["cost", "simulate", "--dist", "poisson"]) == 2
    assert main(["cost", "simulate", "--budget-gb", "0"]) == 2
