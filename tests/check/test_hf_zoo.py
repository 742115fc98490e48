"""`attnroute check hf:PATH` on tiny random models of architectures the bundled models do not cover:
no traceback, the model's own scale is the expected one, and what the battery cannot call is n/a with
the reason, or refused in one line (exit 2)."""

import json

import pytest

from attnroute.cli import main
from tests.read.zoo import build


def run_check(tmp_path, arch, capsys):
    path = tmp_path / "check.json"
    code = main(["check", f"hf:{build(arch, tmp_path)}", "--json", str(path)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, (json.loads(path.read_text()) if path.exists() else None), err


def outcomes(report, impl):
    target = next(t for t in report["targets"] if t["target"].endswith(f"[{impl}]"))
    return {c["name"]: c for c in target["checks"]}, target["counts"]


@pytest.mark.parametrize("arch", ["granite", "t5"])
def test_a_models_own_scale_is_the_expected_one(tmp_path, arch, capsys):
    """granite's attention_multiplier and T5's unscaled scores are the models' design, not bugs."""
    code, report, _ = run_check(tmp_path, arch, capsys)
    assert code == 0
    for impl in ("eager", "sdpa"):
        checks, counts = outcomes(report, impl)
        assert checks["scale"]["outcome"] == "pass" and counts["fail"] == 0 and counts["pass"] > 20


def test_an_implementation_transformers_refuses_is_na_with_its_reason(tmp_path, capsys):
    code, report, _ = run_check(tmp_path, "gemma2", capsys)
    assert code == 0
    eager, counts = outcomes(report, "eager")
    assert counts["pass"] > 20  # the battery stands for gemma2's first full-attention layer
    target = next(t for t in report["targets"] if t["target"].endswith("[eager]"))
    assert target["softcap"] == 50.0  # its attn_logit_softcapping, applied by the model's code and the reference
    sdpa, counts = outcomes(report, "sdpa")
    assert counts["pass"] == counts["fail"] == 0 and all(c["outcome"] == "n/a" for c in sdpa.values())
    assert "transformers refuses sdpa for this model" in sdpa["scale"]["detail"]


def test_a_sliding_window_the_battery_cannot_express_is_na_not_fail(tmp_path, capsys):
    code, report, _ = run_check(tmp_path, "mistral", capsys)
    checks, counts = outcomes(report, "eager")
    assert counts["fail"] == 0 and counts["n/a"] > 0
    assert any("sliding window of 6 tokens" in c["detail"] for c in checks.values() if c["outcome"] == "n/a")


def test_sink_logits_are_refused_in_one_line(tmp_path, capsys):
    code, report, err = run_check(tmp_path, "gpt_oss", capsys)
    assert code == 2 and "sink logits" in err and len(err.strip().splitlines()) == 1
