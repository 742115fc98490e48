"""Lengths past a model's positions are cut (and said) or refused before the model runs, the same way
in every command: a GPT-2-style model with a learned position table of 64 entries, where one token
too many is an IndexError mid-forward."""

import json

import pytest

from attnroute.cli import main

from .zoo import build

pytestmark = pytest.mark.slow

LONG = " ".join(f"word{i}" for i in range(120))  # far more than 64 tokens


@pytest.fixture(scope="module")
def short(tmp_path_factory):
    return str(build("gpt2", tmp_path_factory.mktemp("short"), folder="gpt2-64", n_positions=64))


REFUSED = [
    (["heads", "--max-tokens", "512"], "--max-tokens (512 tokens) is longer than the model's 64 positions"),
    (["report", "--max-tokens", "100"], "--max-tokens (100 tokens) is longer than the model's 64 positions"),
    (["report", "--generate", "60"], "the text and its continuation"),
    (["knockout", LONG, "--from", "word100", "--to", "word3"], "the text (291 tokens) is longer"),
    (["swap", LONG, LONG.replace("word5 ", "word6 ")], "the prompt (291 tokens) is longer"),
    (["needle", "--lengths", "256"], "the longest context (256 tokens) is longer than the model's 64 positions"),
    (["heads", "--corpus", "data/python-docs-topics.jsonl", "--max-tokens", "512"], "--max-tokens (512 tokens)"),
]


@pytest.mark.parametrize("argv, words", REFUSED, ids=lambda x: x[0] if isinstance(x, list) else "")
def test_a_length_past_the_positions_is_refused_before_the_model_runs(short, argv, words, capsys):
    assert main([*argv, "--model", short]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and words in err and "must fit in 64" in err


def test_heads_fits_its_stimulus_and_says_so(short, tmp_path, capsys):
    out = tmp_path / "h.json"
    assert main(["heads", "--model", short, "--text", LONG, "--exact", "2", "--json", str(out)]) == 0
    meta = json.loads(out.read_text())["meta"]
    assert meta["text_tokens"] == 64 and meta["tokens_cut"] > 0  # the text cut to the positions, and said
    assert "sequences of 32 random tokens" in meta["stimulus"]  # 2·32 = 64 (this tokenizer has no BOS)
    err = capsys.readouterr().err
    assert "uses 32 tokens per repeat" in err and "the text was cut to its first 64 tokens" in err


def test_report_takes_the_positions_as_its_default_length(short, tmp_path):
    out = tmp_path / "r.json"
    assert main(["report", LONG, "--model", short, "--out", str(tmp_path / "r.html"), "--json", str(out)]) == 0
    assert len(json.loads(out.read_text())["tokens"]) == 64
