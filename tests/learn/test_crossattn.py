"""learn crossattn: a tiny encoder-decoder from attnroute's own layers learns copy-or-reverse (chosen by
one source token); heads are pruned per attention mode; swapping cross-attention maps makes the output
follow the swapped routes."""

import json

import pytest
import torch

from attnroute.cli import main
from attnroute.learn.crossattn import COPY, REV, CrossSettings, make_batch, run
from attnroute.show import learn_figures

FAST = dict(steps=300, eval_batch=256, every=100)


@pytest.fixture(scope="module")
def result():
    return run(CrossSettings(**FAST))


def test_the_task_needs_the_source_and_is_learned(result):
    src, tgt_in, target = make_batch(CrossSettings(), 4, torch.Generator().manual_seed(0))
    for s, t in zip(src, target):
        assert t.tolist() == (s[1:].tolist() if s[0] == COPY else s[1:].flip(0).tolist())
        assert s[0] in (COPY, REV)
    assert result["train"][-1]["accuracy"] > 0.97


def test_pruning_curves_per_mode(result):
    for rows in result["prune"].values():
        assert [r["removed"] for r in rows] == list(range(9))  # 2 layers × 4 heads, one at a time
        assert rows[-1]["loss"] > rows[0]["loss"]  # every head of the mode gone: the task breaks
    assert set(result["verdict"]["removable"]) == {"encoder self", "decoder self", "cross"}


def test_swapped_cross_maps_carry_the_route(result):
    sw = result["swap"]
    assert sw["own_follows_b"] > 0.95 and sw["swapped_follows_a"] > 0.9 and sw["positions_compared"] > 500


def test_figure_and_cli(result, tmp_path, capsys):
    assert learn_figures.png(result)[:4] == b"\x89PNG"
    code = main(["learn", "crossattn", "--steps", "100", "--out", str(tmp_path)])
    assert code == 0, capsys.readouterr().err
    data = json.loads((tmp_path / "crossattn.json").read_text())
    assert data["experiment"] == "crossattn" and (tmp_path / "crossattn.html").stat().st_size > 10_000
