"""`attnroute bench` runs end to end and writes its figures (a smoke run: numbers, not timings)."""

import json

import pytest

from attnroute.cli import main

pytestmark = pytest.mark.slow  # trains or measures for seconds to tens of seconds; make test runs it


def test_bench_quick_writes_every_figure(tmp_path, capsys):
    out = tmp_path / "engine.json"
    assert main(["bench", "--quick", "--suite", "engine", "--out", str(tmp_path)]) == 0
    result = json.loads(out.read_text())
    impls = {(r["T"], r["impl"]) for r in result["backends"]}
    assert impls == {(T, i) for T in (256, 512) for i in ("sdpa", "blocked", "blocked+probes", "eager")}
    for r in result["backends"]:
        assert r["seconds"] > 0
        if r["impl"] == "sdpa":
            assert r["time_vs_sdpa"] == 1.0
    assert all(0 < r["relative_error"] < 2 for r in result["probsparse"])
    assert result["generation"]["same_tokens"] is True
    assert "attention backends" in capsys.readouterr().out
