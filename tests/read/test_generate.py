"""Routes of generated tokens: the weights recorded while decoding with the KV cache equal the weights
of one full forward over prompt + continuation; the report marks the generated tokens."""

import json

import numpy as np

from attnroute.cli import main
from attnroute.read.capture import capture_weights, generate_with_weights
from attnroute.read.stimuli import encode_text

from .zoo import build


def test_cached_decoding_weights_equal_a_full_forward(smollm2):
    ids, _ = encode_text(smollm2.tokenizer, "The quick brown fox", None)
    out, weights = generate_with_weights(smollm2, ids, 5)
    assert out.shape[1] == ids.shape[1] + 5 and len(weights) == smollm2.n_layers
    full = capture_weights(smollm2, out)
    assert max(float(np.abs(a - b).max()) for a, b in zip(weights, full)) < 1e-5
    assert all(np.allclose(w.sum(-1), 1, atol=1e-5) for w in weights)  # every row recorded, none left zero


def test_sliding_windows_and_grouped_heads_too(tmp_path):
    from attnroute.models import load

    lm = load(str(build("mistral", tmp_path)))  # window 6 < 4 + 7 tokens: the cache's window applies
    ids, _ = encode_text(lm.tokenizer, "alpha beta gamma", None)
    out, weights = generate_with_weights(lm, ids, 7)
    full = capture_weights(lm, out)
    assert max(float(np.abs(a - b).max()) for a, b in zip(weights, full)) < 1e-5


def test_report_generate_marks_the_continuation(tmp_path, capsys):
    model = build("llama", tmp_path)
    js = tmp_path / "r.json"
    code = main(
        [
            "report",
            "Alice gave Bob",
            "--model",
            str(model),
            "--generate",
            "4",
            "--no-ablation",
            "--out",
            str(tmp_path / "r.html"),
            "--json",
            str(js),
        ]
    )
    assert code == 0, capsys.readouterr().err
    data = json.loads(js.read_text())
    assert data["generated_from"] == len(data["tokens"]) - 4 and data["weights"]["T"] == len(data["tokens"])
