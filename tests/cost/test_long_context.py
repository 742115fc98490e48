"""The bill of long context: formulas, and a small measured run through the CLI."""

import json

import pytest

from attnroute.cli import main
from attnroute.cost.long_context import predicted_flops


def test_flop_formulas():
    assert predicted_flops("full", 1024) == 4 * 8 * 1024 * 1024 * 64
    assert predicted_flops("causal", 4) == 4 * 8 * 64 * (1 + 2 + 3 + 4)
    assert predicted_flops("window", 10, W=3) == 4 * 8 * 64 * (1 + 2 + 3 * 8)
    assert predicted_flops("window", 4096, W=4096) == predicted_flops("causal", 4096)
    assert predicted_flops("probsparse", 8192) < predicted_flops("window", 8192) < predicted_flops("causal", 8192)


@pytest.mark.slow
def test_cli_measures_every_variant(tmp_path, capsys):
    out = tmp_path / "bill.json"
    assert main(["cost", "bill", "--lengths", "64", "128", "--json", str(out), "--plot", str(tmp_path / "b.png")]) == 0
    data = json.loads(out.read_text())
    assert {(r["variant"], r["T"]) for r in data} == {
        (v, T) for v in ("full", "causal", "window", "probsparse") for T in (64, 128)
    }
    assert all(r["seconds"] > 0 and r["flops"] > 0 for r in data)
    assert (tmp_path / "b.png").stat().st_size > 5000
    assert main(["cost", "bill", "--lengths", "8"]) == 2
