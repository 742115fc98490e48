"""`attnroute cost fit` (models/fit.py, cost/fit.py): a verb's peak predicted from the config alone, and that
prediction held to the peaks benchmarks/fit.py measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import attnroute as ar
from attnroute.cli import main
from attnroute.errors import InputError
from attnroute.models import config_of, facts_of
from attnroute.models.arithmetic import CHUNK
from attnroute.models.fit import GIB, WORKING, Shape, predict
from tests.read.zoo import build

ROOT = Path(__file__).resolve().parents[2]
LLAMA3_8B = {  # Llama-3-8B's config.json, as its shape
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
}


def test_the_parameters_are_counted_from_the_config_as_the_loaded_model_holds_them(tmp_path):
    path = build("gemma3_text", tmp_path)  # tied embeddings: counted once
    loaded = ar.load_model(str(path))
    assert Shape.of(facts_of(str(path)).config).parameters == sum(p.numel() for p in loaded.model.parameters())


def test_llama3_8b_fits_one_80g_gpu_for_a_circuit_at_4096_tokens_in_float32_not_in_24g(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA3_8B))
    got = ar.cost_fit(str(config), tokens=4096, device_memory="80G", device="cuda")
    rows = {r["verb"]: r for r in got["rows"]}
    assert got["parameters"] == 8_030_261_248  # Llama-3-8B's published count
    assert rows["circuit"]["weights"] == 4 * 8_030_261_248 and rows["circuit"]["runtime"] == 0  # on the device
    assert rows["circuit"]["fits"] and rows["circuit"]["peak"] < 80 * GIB
    assert "48 prompt pairs" in rows["circuit"]["calibrated_on"] and rows["heads"]["calibrated_on"] is None
    small = ar.cost_fit(str(config), tokens=4096, device_memory="24G", device="cuda", verb="heads")["rows"][0]
    assert small["fits"] is False and "weights" in small["verdict"]
    bf16 = {r["verb"]: r for r in ar.cost_fit(str(config), dtype="bfloat16", device_memory="24G")["rows"]}
    cast = 4 * CHUNK  # the output head's float32 copy while it runs, a block of rows at a time
    assert bf16["routes"]["working"] == WORKING["routes"][0] + cast and bf16["routes"]["fits"] is True
    assert bf16["circuit"]["weights"] == 2 * 8_030_261_248 and bf16["circuit"]["fits"] is True  # 16 GB + working
    on_gpu = ar.cost_fit(str(config), dtype="bfloat16", tokens=4096, device_memory="80G", device="cuda", verb="circuit")
    assert on_gpu["rows"][0]["fits"] is True  # the case: Llama-3-8B, 4,096 tokens, bf16, one 80 GB GPU
    assert bf16["heads"]["weights"] == 2 * 8_030_261_248


def test_the_prediction_is_the_sum_of_its_parts_and_grows_only_past_the_batches():
    shape = Shape(parameters=100_000_000, vocab=50_000, layers=24, hidden=1024, heads=16)
    for verb in WORKING:
        p = predict(shape, verb, "float32")
        assert p["peak"] == p["runtime"] + p["weights"] + p["working"]
        assert predict(shape, verb, "bfloat16")["weights"] == p["weights"] // 2
    short, long = predict(shape, "heads", "float32", 512), predict(shape, "heads", "float32", 16_384)
    assert short["peak"] == predict(shape, "heads", "float32")["peak"] < long["peak"]


def test_the_measured_peaks_are_predicted_within_15_percent_by_the_constants_in_the_code():
    """benchmarks/results/fit.json holds each run measured; the code's constants must still predict them
    (changing a constant without measuring again fails here), within 15 %. Left out of the fit, a prediction is
    within 40 %: four runs fit three constants, and with bf16's batches at half float32's the working memory is
    less linear in (1, the dtype's bytes, the vocabulary) than before (−28 to +39 % left out, docs/cost.md)."""
    result = json.loads((ROOT / "benchmarks" / "results" / "fit.json").read_text())
    shapes = {}
    assert {(r["verb"], r["model"], r["dtype"]) for r in result["rows"]} >= {
        (v, m, d)
        for v in ("heads", "patch", "circuit")
        for m in ("smollm2", "gemma3-270m")
        for d in ("float32", "bfloat16")
    }
    for r in result["rows"]:
        if r["model"] not in shapes:
            shapes[r["model"]] = Shape.of(config_of(r["model"]))
        now = predict(shapes[r["model"]], r["verb"], r["dtype"])["peak"] / GIB
        assert now == pytest.approx(r["predicted_gib"], abs=0.006), r
        assert abs(now / r["measured_gib"] - 1) <= 0.15, r
        assert r["left_out_error"] is None or abs(r["left_out_error"]) <= 0.40, r


def test_the_command_prints_the_table_and_refuses_bad_input_in_one_line(tmp_path, capsys):
    path = build("llama", tmp_path)
    out = tmp_path / "fit.json"
    assert main(["cost", "fit", "--model", str(path), "--device-memory", "8G", "--json", str(out)]) == 0
    assert [r["verb"] for r in json.loads(out.read_text())["rows"]] == list(WORKING)
    capsys.readouterr()
    for argv in (["--verb", "everything"], ["--device-memory", "lots"], ["--dtype", "int4"], ["--tokens", "0"]):
        assert main(["cost", "fit", "--model", str(path), *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "Traceback" not in err[0], argv


def test_a_config_without_a_model_type_is_refused_naming_model(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(InputError) as e:
        ar.cost_fit(str(bad))
    assert e.value.field == "model" and "model_type" in str(e.value)


def test_a_speech_model_is_refused_not_costed_as_a_text_model(capsys):
    """whisper-tiny's facts now come before its load (its CTranslate2 folder read): a speech model is refused by
    name, as the formula never measured an encoder that hears 1,500 frames."""
    assert main(["cost", "fit", "--model", "whisper-tiny", "--verb", "heads", "--device-memory", "8G"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "whisper-tiny is a speech model" in err[0]


def test_auto_costs_the_stored_dtype_for_every_verb(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**LLAMA3_8B, "torch_dtype": "bfloat16"}))
    rows = {r["verb"]: r for r in ar.cost_fit(str(config), device_memory="80G", device="cuda")["rows"]}
    assert rows["heads"]["dtype"] == "bfloat16" and rows["heads"]["weights"] == 2 * 8_030_261_248
    assert rows["circuit"]["dtype"] == "bfloat16" and rows["circuit"]["weights"] == 2 * 8_030_261_248
    assert rows["routes"]["dtype"] == "bfloat16" and rows["routes"]["weights"] == 2 * 8_030_261_248


def test_a_bundled_gguf_is_costed_before_its_first_load(tmp_path, monkeypatch, capsys):
    """With an empty cache the tokenizer's facts carry no config (it is written by the first load): cost fit read
    None and crashed with a traceback. It now reads the GGUF's own metadata: the same shape as the loaded model's."""
    from attnroute.models.facts import _facts

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _facts.cache_clear()
    out = tmp_path / "fit.json"
    assert (
        main(["cost", "fit", "--model", "smollm2", "--verb", "routes", "--device-memory", "8G", "--json", str(out)])
        == 0
    )
    got = json.loads(out.read_text())
    assert (got["parameters"], got["vocab"]) == (134_515_008, 49_152) and not any(tmp_path.glob("attnroute/*"))
    _facts.cache_clear()
