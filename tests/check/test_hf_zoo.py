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


def test_a_window_forgotten_for_cached_keys_fails_cached_decode_and_the_config_is_restored(tmp_path, monkeypatch):
    """transformers 4.34's Mistral, rebuilt on today's code: the cache keeps every key and a step after a
    cache gets a mask with no window (4.34 prepended zeros for the cached keys). A whole sequence is still
    windowed, so only decoding through the cache shows it — with the tiny model's window narrowed to 3."""
    import inspect

    import transformers
    from transformers import masking_utils
    from transformers.models.mistral import modeling_mistral

    from attnroute.check.report import check
    from attnroute.check.targets import resolve

    targets = resolve(f"hf:{build('mistral', tmp_path)}")
    healthy = {t.name: check(t, only=("cached_decode",)).checks[0] for t in targets}
    assert all(c.outcome.value == "pass" and "narrowed to 3 keys" in c.detail for c in healthy.values()), healthy

    class KeepsEveryKey(transformers.DynamicCache):
        def __init__(self, config=None, **kw):
            super().__init__(**kw)  # no config: no sliding layers, nothing cropped

    def unwindowed_after_a_cache(**kw):
        past = kw["cache"].get_seq_length() if kw.get("cache") is not None else 0
        return (masking_utils.create_causal_mask if past else masking_utils.create_sliding_window_causal_mask)(**kw)

    monkeypatch.setattr(transformers, "DynamicCache", KeepsEveryKey)
    monkeypatch.setattr(modeling_mistral, "DynamicCache", KeepsEveryKey)
    monkeypatch.setattr(modeling_mistral, "create_sliding_window_causal_mask", unwindowed_after_a_cache)
    for t in targets:
        c = check(t, only=("cached_decode",)).checks[0]
        assert c.outcome.value == "fail" and "window is not applied to the cached keys" in c.detail, c.detail
        lm = inspect.getclosurevars(t.extras["cached_decode"]).nonlocals["lm"]
        assert lm.model.config.sliding_window == 6  # narrowed for the check, restored after
