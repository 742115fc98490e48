"""Map swap on SmolLM2: a prompt's own maps change nothing; two prompts that differ in one word swap
maps and keep their own answer (the maps carry structure, the values carry content)."""

import json

import pytest

from attnroute.cli import main
from attnroute.read.experiments.swap import SwapError, swap

A, B = "The capital of France is the city of", "The capital of Spain is the city of"


def test_swapping_a_prompts_own_maps_changes_nothing(smollm2):
    r = swap(smollm2, B, B, window=10).to_dict()
    assert max(row["kl_from_b"] for row in r["layers"]) < 1e-6


def test_one_word_apart_the_swapped_output_stays_with_b(smollm2):
    r = swap(smollm2, A, B, window=5).to_dict()
    assert r["top_a"] == " Paris" and r["top_a"] != r["top_b"] and len(r["layers"]) == 26
    assert all(row["kl_from_b"] < 0.1 < row["kl_from_a"] for row in r["layers"])


def test_different_token_counts_are_refused(smollm2):
    with pytest.raises(SwapError, match="same count"):
        swap(smollm2, "The capital of France is", "The capital of the United Kingdom is")


def test_cli_json(smollm2, tmp_path, capsys):
    js = tmp_path / "s.json"
    assert main(["swap", A, B, "--window", "29", "--heads", "0,4", "--json", str(js)]) == 0, capsys.readouterr().err
    data = json.loads(js.read_text())
    assert data["heads"] == [0, 4] and [row["layers"] for row in data["layers"]] == [[0, 28], [1, 29]]
