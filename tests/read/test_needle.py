"""The needle probe on SmolLM2: the last query's weight on the needle equals the eager weights', the
model answers at short context, and the CLI writes JSON and a figure."""

import json

import numpy as np

from attnroute.cli import main
from attnroute.read.capture import capture_weights
from attnroute.read.experiments.needle import NeedleResult, haystack, needle, probe_length


def test_fused_needle_weight_and_entropy_equal_the_eager_weights(smollm2):
    ids, pos = haystack(smollm2, 200, "4729", seed=3)
    mass, entropy, text, answered = probe_length(smollm2, ids, pos, "4729")
    w = capture_weights(smollm2, ids)  # L × [H, T, T]
    eager_mass = np.stack([layer[:, -1, pos].sum(-1) for layer in w])
    last = np.stack([layer[:, -1] for layer in w])
    eager_entropy = -(last * np.log(np.clip(last, 1e-30, None))).sum(-1)
    assert np.abs(mass - eager_mass).max() < 1e-4 and np.abs(entropy - eager_entropy).max() < 1e-3
    assert answered and "4729" in text.replace(" ", "")


def test_dilution_reports_retrieval_heads_per_length(smollm2, tmp_path, capsys):
    js, png = tmp_path / "n.json", tmp_path / "n.png"
    code = main(["needle", "--lengths", "128,384", "--json", str(js), "--plot", str(png)])
    assert code == 0, capsys.readouterr().err
    data = json.loads(js.read_text())
    assert [r["length"] for r in data["lengths"]] == [128, 384] and len(data["retrieval_heads"]) == 3
    first = data["lengths"][0]
    assert first["answered"] and all(
        0 <= h["needle_weight"] <= 1 and h["entropy"] >= 0 for h in first["retrieval_heads"]
    )
    assert first["retrieval_heads"][0]["needle_weight"] == first["best_head"]["needle_weight"]
    assert png.stat().st_size > 10_000


def test_a_length_beyond_the_model_is_refused(smollm2, capsys):
    code = main(["needle", "--lengths", "256,9000"])
    assert (
        code == 2
        and "the longest context (9000 tokens) is longer than the model's 8192 positions; --lengths must fit"
        in capsys.readouterr().err
    )


def test_needle_api_is_seeded_and_typed(smollm2):
    a = needle(smollm2, (160,), seed=1)
    b = needle(smollm2, (160,), seed=1)
    assert isinstance(a, NeedleResult) and a.lengths[0]["needle_positions"] == b.lengths[0]["needle_positions"]
    assert json.loads(a.to_json()) == json.loads(json.dumps(a.to_dict()))  # its JSON is its to_dict
