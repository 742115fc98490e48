"""`attnroute bench` runs end to end and writes its figures (a smoke run: numbers, not timings)."""

import json

import pytest

from attnroute.cli import main

pytestmark = pytest.mark.slow  # trains or measures for seconds to tens of seconds; make test runs it


def test_bench_quick_writes_every_figure_and_json_goes_to_stdout_alone(tmp_path, capsys):
    out = tmp_path / "engine.json"
    assert main(["bench", "--quick", "--suite", "engine", "--out", str(tmp_path), "--json"]) == 0
    result = json.loads(out.read_text())
    said = capsys.readouterr()
    data = json.loads(said.out)  # nothing else on stdout: the tables went to stderr
    assert set(data) == {"engine"} and data["engine"] == result
    impls = {(r["T"], r["impl"]) for r in result["backends"]}
    assert impls == {(T, i) for T in (256, 512) for i in ("sdpa", "blocked", "blocked+probes", "eager")}
    sdpa = {r["T"]: r["seconds"] for r in result["backends"] if r["impl"] == "sdpa"}
    for r in result["backends"]:  # every ratio is this row's time over SDPA's at the same length
        assert r["seconds"] > 0
        assert r["time_vs_sdpa"] == pytest.approx(r["seconds"] / sdpa[r["T"]], rel=0.02, abs=0.01)
    assert all(0 < r["relative_error"] < 2 for r in result["probsparse"])
    assert result["generation"]["same_tokens"] is True
    assert "attention backends" in said.err


def test_read_tables_render_the_parts_that_ran(tmp_path, capsys):
    # a long-context-only result (no effects part) renders; ratios show median and range per round set
    result = {
        "long_context": [{"mode": "sdpa-body", "T": 256, "seconds": 0.3, "peak_rss_bytes": 2**30}],
        "ratios": [
            {
                "mode": "headtable",
                "T": 256,
                "rounds": 3,
                "seconds": [0.5, 0.4, 0.9],
                "baseline_seconds": [0.3] * 3,
                "ratio": 0.5 / 0.3,
            }
        ],
        "repeated": {"seeds": [0], "stimulus": "s", "fused_seconds": 1.0, "eager_seconds": 0.9, "max_abs_diff": 1e-7},
    }
    path = tmp_path / "read.json"
    path.write_text(json.dumps(result))
    assert main(["bench", "--from-json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Ablation effects" not in out
    row = "| 256 | attnroute HeadTable text statistics (fused) | 3 | 0.5 s (0.4–0.9) | 0.3 s (0.3–0.3) | 1.67× |"
    assert row in out
    assert "fused 1.00 s, eager weights 0.90 s" in out
