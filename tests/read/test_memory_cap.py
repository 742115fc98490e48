"""max_memory (`--max-memory SIZE`): sizes read as `free -h` counts them, every batching budget scaled to what
the cap leaves beside the loaded model, the same numbers under any cap, a cap that cannot be met refused
before any work with the figure that would do, and the peak measured and said (ground/budget.py)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import attnroute as ar
from attnroute.cli import main
from attnroute.errors import InputError
from attnroute.models import load
from attnroute.promptset import PromptPair
from attnroute.read.ground import budget
from attnroute.read.ground.pool import KEEP_BYTES, RUN_TOKENS, RunPool, chunk_groups
from attnroute.read.ground.prompts import tokenize_pairs
from attnroute.settings.base import size

from .zoo import build

PAIRS = (
    PromptPair("the cat sat on the mat and", "the dog sat on the mat and", " the", " a", row=1),
    PromptPair("the owl sat on the mat and", "the fox sat on the mat and", " the", " a", row=2),
    PromptPair("a bird flew over the house and", "a bird ran over the house and", " the", " a", row=3),
)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return load(str(build("llama", tmp_path_factory.mktemp("zoo"))))


@pytest.mark.parametrize(
    "given, want",
    [("4G", 4 << 30), ("3.5GiB", int(3.5 * 2**30)), ("2500M", 2500 << 20), ("4gb", 4 << 30), (123456, 123456)],
)
def test_sizes_read_as_powers_of_1024(given, want):
    assert size(given, "max_memory") == want


@pytest.mark.parametrize("bad", ["lots", "-1G", "0", "4 gigs", True, 0, -5, 2.5])
def test_a_size_that_is_not_one_is_refused_by_name(bad):
    with pytest.raises(InputError, match="max_memory must be a size such as 4G"):
        ar.PatchSettings(prompts="ioi", max_memory=bad)


def test_the_scale_is_what_the_cap_leaves_beside_what_is_resident():
    now, fixed = 1 << 30, budget.FIXED_WORKING
    assert budget.plan(now + fixed + budget.DEFAULT_WORKING // 2, now) == pytest.approx(0.5)
    assert budget.plan(now + 10 * budget.DEFAULT_WORKING, now) == 1.0  # a cap never grows the batches
    with pytest.raises(InputError, match=r"needs about 0\.88 GiB at its smallest batches: give at least 1\.88 GiB"):
        budget.plan(now + (800 << 20), now)  # 800 MiB beyond the model: below the fixed 768 MiB and 128 MiB of batches


def test_the_budgets_shrink_inside_a_bound_and_come_back_after(tiny_llama):
    groups, _ = tokenize_pairs(tiny_llama.tokenizer, tiny_llama.kind, PAIRS * 40, "logit-diff")
    outside = len(chunk_groups(groups))
    cap = budget.resident() + budget.FIXED_WORKING + int(budget.MIN_SCALE * budget.DEFAULT_WORKING) + (64 << 20)
    with budget.Bound(cap) as bound:
        scale = bound.report()["scale"]
        assert scale == pytest.approx(budget.MIN_SCALE + 1 / 32, rel=0.05)  # 128 + 64 MiB of 2 GiB
        assert budget.scaled(RUN_TOKENS) == int(RUN_TOKENS * scale)
        assert RunPool(lambda g: g, []).keep_bytes == int(KEEP_BYTES * scale)
        inside = chunk_groups(groups)
    assert len(inside) > outside  # 120 prompts of 8–9 tokens: one run each length by default, cut under the cap
    assert [r for c in inside for r in c.rows] == [r for c in chunk_groups(groups) for r in c.rows]
    assert budget.scaled(RUN_TOKENS) == RUN_TOKENS


def test_a_circuit_under_the_smallest_cap_is_the_same_circuit(tiny_llama):
    """Only batching budgets are scaled: at 1/16 of them the runs, copies and stacks are cut finer, and every
    estimate, exact edge and curve point is what the uncapped run gives (float32 sums in another order)."""
    free = ar.circuit(tiny_llama, PAIRS, no_checkpoint=True, progress=False).to_dict()
    cap = budget.resident() + budget.FIXED_WORKING + int(budget.MIN_SCALE * budget.DEFAULT_WORKING) + (64 << 20)
    capped = ar.circuit(tiny_llama, PAIRS, no_checkpoint=True, progress=False, max_memory=cap).to_dict()
    memory = capped["meta"]["memory"]
    assert memory["scale"] < 0.12 and memory["cap"] == cap and memory["peak"] >= memory["resident"] > 0
    assert "memory" not in free["meta"]
    for key in ("estimate", "exact"):
        a = np.array([np.nan if r[key] is None else r[key] for r in free["rows"]], dtype=float)
        b = np.array([np.nan if r[key] is None else r[key] for r in capped["rows"]], dtype=float)
        np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-5, equal_nan=True)
    fa = [p["faithfulness"] for p in free["circuit"]["curve"]]
    fb = [p["faithfulness"] for p in capped["circuit"]["curve"]]
    np.testing.assert_allclose(fb, fa, atol=1e-5)


def test_smollm2_patch_under_a_cap_keeps_it_and_says_its_peak(smollm2, tmp_path):
    # the top 12 exactly, not settled: the cap's point is the same numbers in smaller batches, not the settle rule
    run = dict(no_checkpoint=True, progress=False, exact=12)
    free = ar.patch(smollm2, PAIRS, **run).to_dict()
    cap = budget.resident() + budget.FIXED_WORKING + budget.DEFAULT_WORKING // 4
    result = ar.patch(smollm2, PAIRS, **run, max_memory=cap)
    (tmp_path / "p.json").write_text(result.to_json())
    assert ar.load(tmp_path / "p.json").meta.memory == result.meta.memory  # the memory said reloads with it
    capped = result.to_dict()
    memory = capped["meta"]["memory"]
    assert memory["kept"] is True and memory["peak"] <= cap
    assert memory["scale"] == pytest.approx(0.25, abs=0.05)  # what was resident moves by a few MiB between reads
    assert not any(line.startswith("memory:") for line in capped["verdict"]["lines"])
    key = lambda r: (r["site"], r["layer"], r["head"])  # noqa: E731
    got = {key(r): r["normalized"] for r in capped["rows"] if r["exact"]}
    want = {key(r): r["normalized"] for r in free["rows"] if r["exact"]}
    assert got.keys() == want.keys() and len(got) >= 10
    np.testing.assert_allclose([got[k] for k in want], list(want.values()), atol=1e-5)


def test_a_cap_passed_is_said_in_the_verdict():
    line = budget.said({"cap": 2 << 30, "resident": 1 << 30, "scale": 0.33, "peak": 3 << 30, "kept": False})
    assert line.startswith("memory: the peak was 3.00 GiB, past max_memory 2.00 GiB")
    assert budget.said({"cap": 2 << 30, "peak": 1 << 30, "kept": True}) is None and budget.said({}) is None


def test_the_cli_refuses_a_cap_below_the_loaded_model_before_any_work(tmp_path, capsys):
    out = tmp_path / "c.json"
    code = main(["circuit", "--model", "smollm2", "--prompts", "ioi", "--max-memory", "200M", "--json", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not out.exists()
    # the model loads first (what it holds is what the cap is weighed against), then one line, before any work
    errors = [line for line in err if line.startswith("error:")]
    assert len(errors) == 1 and errors[0] == err[-1] and not any("Traceback" in line for line in err)
    assert "--max-memory 0.20 GiB leaves 0.00 GiB beyond the" in errors[0] and "give at least" in errors[0]


def test_the_cli_refuses_a_size_it_cannot_read(capsys):
    assert main(["patch", "--prompts", "ioi", "--max-memory", "a lot"]) == 2
    assert capsys.readouterr().err == "error: --max-memory must be a size such as 4G, 3.5GiB or 2500M, got 'a lot'\n"


def test_under_a_cap_a_run_holds_what_its_share_of_the_cap_holds():
    """study.pool with a run's cost per token: its runs cut to RUN_SHARE of the capped working set, or the cap
    refused when one prompt of the longest length does not fit, with the cap that would do."""
    cap = budget.resident() + budget.FIXED_WORKING + budget.DEFAULT_WORKING // 4
    with budget.Bound(cap) as bound:
        room = budget.RUN_SHARE * bound.report()["scale"] * budget.DEFAULT_WORKING
        assert budget.run_tokens(1024, 1 << 20, 15, cap) == int(room // (1 << 20))  # ~256 tokens at 1 MiB each
        assert budget.run_tokens(100, 1 << 20, 15, cap) == 100  # never more than the scaled RUN_TOKENS
        assert budget.run_tokens(1024, None, 15, cap) == 1024  # a verb that states no cost per token
        with pytest.raises(InputError, match=r"one prompt of 500 tokens holds about 0\.49 GiB: give at least"):
            budget.run_tokens(1024, 1 << 20, 500, cap)
    # no cap: within the whole default share (2 GiB: 1,024 tokens at 1 MiB each, 256 at 8 MiB), one token at least
    assert budget.run_tokens(1024, 1 << 20, 500, None) == 1024
    assert budget.run_tokens(1024, 8 << 20, 15, None) == 256
    assert budget.run_tokens(1024, budget.DEFAULT_WORKING * 2, 15, None) == 1  # chunk_groups keeps one prompt a run


def test_a_cap_that_cuts_a_circuits_runs_leaves_its_qk_layers_and_estimates_as_they_were(tiny_llama, monkeypatch):
    """The QK fix chooses the layers whose q, k matter most (here 1 of the 2), which it did run by run: a cap
    that cut the runs finer chose again on each piece. Chosen over the uncapped run's prompts (circuit.qk_groups,
    estimate.chosen_over), the estimates under a cap that cuts every run to 2 prompts are the uncapped ones."""
    circuit_module = importlib.import_module("attnroute.read.circuits.circuit")
    estimate = importlib.import_module("attnroute.read.circuits.estimate")

    monkeypatch.setattr(estimate, "QK_LAYERS", 1)
    pairs = PAIRS * 3  # 9 prompts, two lengths
    free = ar.circuit(tiny_llama, pairs, no_checkpoint=True, progress=False, exact=0).to_dict()
    # the batches at half their size, and a run's work made to cost an 18th of its share a token: runs of 18
    # tokens at most — 2 prompts of 8 or 9 tokens
    monkeypatch.setattr(circuit_module, "_work_per_token", lambda g, l: int(budget.DEFAULT_WORKING / 4 / 18))
    cap = budget.resident() + budget.FIXED_WORKING + budget.DEFAULT_WORKING // 2
    runs = []
    monkeypatch.setattr(estimate, "GradPass", _counting(estimate.GradPass, runs))
    capped = ar.circuit(tiny_llama, pairs, no_checkpoint=True, progress=False, exact=0, max_memory=cap).to_dict()
    assert capped["meta"]["estimate"] == free["meta"]["estimate"]
    assert max(runs) <= 2 < len(runs)  # every run of 2 prompts at most, chosen over their groups
    a = np.array([r["estimate"] for r in free["rows"]])
    b = np.array([r["estimate"] for r in capped["rows"]])
    np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-5)


def _counting(cls, seen: list):
    class Counted(cls):
        def __init__(self, run, *a, **k):
            seen.append(run.n)
            super().__init__(run, *a, **k)

    return Counted


def test_heads_under_a_cap_takes_its_gradient_by_rows_and_finds_the_same_effects(tiny_llama):
    """heads' effect batch (8 sequences of repeated tokens): under the smallest cap its gradient estimate is
    taken a row at a time (effects.GRAD_TOKENS scaled) and its ablations carry fewer copies a forward; the
    estimate and the exact effects are the uncapped ones."""
    text = "the cat sat on the mat and the dog sat on the rug"
    free = ar.heads(tiny_llama, text, progress=False)
    cap = budget.resident() + budget.FIXED_WORKING + int(budget.MIN_SCALE * budget.DEFAULT_WORKING) + (64 << 20)
    capped = ar.heads(tiny_llama, text, progress=False, max_memory=cap)
    assert capped.meta.memory["scale"] < 0.12 and free.meta.memory is None
    assert np.isfinite(free.columns["ablation_delta"]).sum() >= 4  # some heads ablated exactly
    for column in ("grad_attr", "ablation_delta"):
        np.testing.assert_allclose(capped.columns[column], free.columns[column], atol=1e-5, rtol=1e-4, equal_nan=True)


def test_a_half_precision_model_batches_the_tokens_a_float32_one_does_in_half_the_bytes(tiny_llama):
    """Budgets counted in bytes let a bf16 model batch twice the tokens in the same memory, and its peak stayed
    0.7–0.8× float32's: its batches are now at dtype_factor (1/2), under a cap at most that; float32 at 1."""
    import torch

    model = tiny_llama.model
    assert budget.dtype_factor(model) == 1.0 and budget.dtype_factor(None) == 1.0
    half = type(model)(model.config).to(torch.bfloat16)
    assert budget.dtype_factor(half) == 0.5
    with budget.Bound(None, model=half) as bound:
        assert budget.scaled(1000) == 500 and bound.report() == {}
        assert budget.run_tokens(1024, 1 << 20, 16, None) == min(1024, budget.DEFAULT_WORKING // 2 // (1 << 20))
    assert budget.scaled(1000) == 1000  # left as it was
    with budget.Bound(64 << 30, model=half) as bound:  # a cap that leaves room for all: still half
        assert bound.report()["scale"] == 0.5
    with budget.Bound(None, model=model):
        assert budget.scaled(1000) == 1000
