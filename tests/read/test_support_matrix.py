"""The support matrix: tiny random models of 29 architectures (tests/read/zoo.py), each either read —
routed logits equal to the model's own eager attention within tolerance, and the ablation shortcut
equal to full forwards — or refused in one line. The table in docs/reading-any-model.md is this test's result."""

from __future__ import annotations

import atexit
import functools
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from attnroute.engine import InputError
from attnroute.models import load
from attnroute.read import adapter, effects
from attnroute.read.heads import read_heads
from attnroute.read.verify import RoutingMismatch, routing_check

from . import zoo

READ = [a for a in zoo.ARCHS if a not in ("falcon", "bloom", "mpt")]
REFUSED = {
    "falcon": "ALiBi",
    "bloom": "ALiBi",
    "mpt": "ALiBi",
    "vit": "vit takes images",
    "whisper": "tokenizer has no <|startoftranscript|>",
}
README = Path(__file__).resolve().parents[2] / "docs" / "reading-any-model.md"  # the support matrix lives there


@functools.cache
def zoo_dir() -> Path:
    # 29 checkpoints, ~325 MB: removed when the worker exits, or every run leaves them in /tmp
    path = tempfile.mkdtemp(prefix="attnroute-zoo-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return Path(path)


@functools.cache
def loaded(arch: str):
    return load(str(zoo.build(arch, zoo_dir())))


def effect_batch(lm):
    from attnroute.read.verify import check_batch

    return check_batch(lm)  # two texts, right-padded: the shortcut must replay the padding mask too


@functools.cache
def result(arch: str) -> dict:
    if arch in REFUSED:
        try:
            loaded(arch)
        except InputError as e:
            return {"status": "refused", "reason": str(e)}
        return {"status": "read"}  # a refusal that did not happen: the test below fails
    lm = loaded(arch)
    check = routing_check(lm)
    batch = effect_batch(lm)
    info: dict = {}
    fast = effects.exact_sweep(lm, batch, modes=("zero", "uniform"), info=info)
    full = effects.exact_sweep(lm, batch, modes=("zero", "uniform"), reuse_residual=False)
    gap = max(float(np.nanmax(np.abs(fast[m] - full[m]))) for m in fast)
    return {
        "status": "read",
        "kind": lm.kind,
        "diff": check["max_abs_diff"],
        "tolerance": check["tolerance"],
        "shortcut": info["shortcut"]["used"],
        "shortcut_gap": gap,
        "nan": int(sum(np.isnan(fast[m]).sum() for m in fast)),
    }


@pytest.mark.parametrize("arch", READ)
def test_read_routed_equals_eager_and_shortcut_equals_full_forwards(arch):
    r = result(arch)
    assert r["status"] == "read"
    assert r["diff"] <= r["tolerance"]
    assert r["nan"] == 0  # every head measured, in both modes
    assert r["shortcut_gap"] <= 1e-5, f"the restart shortcut differs from full forwards by {r['shortcut_gap']:.3g}"
    assert r["shortcut"], "the restart shortcut (an encoder–decoder's: in its encoder) should be taken"


@pytest.mark.parametrize("arch", list(REFUSED))
def test_refused_in_one_line(arch):
    r = result(arch)
    assert r["status"] == "refused", f"{arch} was loaded; it must be refused"
    assert REFUSED[arch] in r["reason"] and "\n" not in r["reason"]


def test_kinds_come_from_the_registries():
    assert loaded("gpt2").kind == "causal"  # GPT2LMHeadModel: not an encoder
    assert loaded("bert").kind == "encoder"
    assert loaded("t5").kind == "seq2seq" and loaded("bart").kind == "seq2seq"


@pytest.mark.parametrize("arch", ["t5", "bart"])
def test_encoder_decoder_rows_carry_their_attention_kind(arch):
    lm = loaded(arch)
    assert lm.attention_kinds == ["self", "self", "decoder-self", "decoder-self", "cross", "cross"]
    table = read_heads(lm, "Alice gave Bob the book. Bob gave it back.", seeds=(0,), stimulus_batch=2, effect_batch=2)
    rows = table.to_dict()["rows"]
    assert [r["attention"] for r in rows[:: lm.n_heads]] == lm.attention_kinds
    assert [r["stream_layer"] for r in rows[:: lm.n_heads]] == [0, 1, 0, 1, 0, 1]
    cross = [r for r in rows if r["attention"] == "cross"]
    assert all(r["induction"] is None for r in cross)  # not defined across streams: null, not a number
    assert all(r["sink_mass"] is not None for r in rows)


@pytest.mark.parametrize("arch", ["gpt_oss", "t5"])
def test_dropping_what_the_model_passes_is_caught_at_run_time(arch, monkeypatch):
    """The old adapter dropped s_aux and position_bias; the run-time check must catch that class of bug."""
    lm = loaded(arch)
    real = adapter._engine_arguments

    def dropping(module, Tk, kwargs):
        args = real(module, Tk, kwargs)
        args["sinks"] = args["bias"] = None
        return args

    monkeypatch.setattr(adapter, "_engine_arguments", dropping)
    with pytest.raises(RoutingMismatch, match=r"first at layer 0 \(self-attention") as e:
        routing_check(lm)
    assert "\n" not in str(e.value)


def test_an_argument_attnroute_does_not_implement_is_refused_by_name():
    module = torch.nn.Module().eval()
    with pytest.raises(adapter.UnsupportedModel, match="passes `alibi` \\(ALiBi position slopes\\)"):
        adapter._engine_arguments(module, 8, {"alibi": torch.zeros(1)})
    with pytest.raises(adapter.UnsupportedModel, match="passes `frobnicate`"):
        adapter._engine_arguments(module, 8, {"frobnicate": 3})
    # bookkeeping and None are fine
    assert adapter._engine_arguments(module, 8, {"position_ids": torch.zeros(1), "head_mask": None})["bias"] is None


def test_roberta_is_cut_to_the_positions_it_has():
    lm = loaded("roberta")
    assert lm.max_positions == 128  # 130 entries, positions start at padding_idx + 1 = 2
    table = read_heads(lm, " ".join(["word"] * 400), seeds=(0,), stimulus_batch=2, ablation=False)
    assert table.meta["text_tokens"] == 128


def test_readme_table_is_this_tests_result():
    results = {a: result(a) for a in READ + list(REFUSED)}
    text = README.read_text()
    m = re.search(r"<!-- support-matrix:start -->\n(.*?)\n<!-- support-matrix:end -->", text, re.S)
    assert m, "docs/reading-any-model.md lacks the support-matrix markers"
    want = zoo.matrix_markdown(results)
    assert m.group(1).strip() == want.strip(), (
        "the support matrix in docs/reading-any-model.md is out of date; regenerate it with `python -m tests.read.zoo`"
    )


@pytest.mark.parametrize("arch", READ)
def test_heads_and_the_report_run_on_every_read_architecture(arch):
    """End to end, as `attnroute heads` and `attnroute report` run: no exception, every head has its
    estimate, the settled exact ablation measured some heads, rows labelled by attention kind."""
    from attnroute.read.report import routing_view
    from attnroute.show import report

    lm = loaded(arch)
    table = read_heads(
        lm,
        "Alice gave Bob the book, and Bob gave it back.",
        seeds=(0,),
        stimulus_batch=2,
        effect_batch=2,
        effect_len=8,
        exact=3,
    )
    assert table.meta["routing_check"]["max_abs_diff"] <= table.meta["routing_check"]["tolerance"]
    assert not np.isnan(table["grad_attr"]).any() and table.meta["ablation"]["heads_measured"] >= 3
    assert not np.isnan(table["entropy"]).any()
    page = report.build(routing_view(lm, "Alice gave Bob the book.", ablation=False))
    assert page.data["attention"] == lm.attention_kinds


@pytest.mark.parametrize("arch", ["t5", "bart"])
def test_decoder_ablations_read_one_clean_encoding_and_equal_rerunning_the_encoder(arch, monkeypatch):
    """An ablation in the decoder's self or cross layers cannot change the encoder's output: the sweep encodes
    once (a Whisper encoder's 1,500 frames were most of each forward) and its numbers are the full forwards'."""
    lm = loaded(arch)
    batch = effect_batch(lm)
    heads = [(layer, h) for layer in range(lm.n_layers) if lm.mode(layer) != "encoder" for h in range(lm.n_heads)]
    runs = []
    hook = lm.model.get_encoder().register_forward_hook(lambda *a: runs.append(1))
    try:
        got = effects.exact_sweep(lm, batch, modes=("zero", "uniform"), heads=heads, reuse_residual=False)
    finally:
        hook.remove()
    assert len(runs) == 2  # the clean pass and the one encoding, for every decoder head in both modes
    monkeypatch.setattr(effects, "clean_encoding", lambda *a: None)  # the encoder rerun in every forward
    want = effects.exact_sweep(lm, batch, modes=("zero", "uniform"), heads=heads, reuse_residual=False)
    for mode in want:
        assert np.array_equal(got[mode], want[mode], equal_nan=True) and np.isfinite(got[mode][lm.n_layers - 1]).all()


def test_a_wrong_shortcut_is_caught_and_full_forwards_are_used(monkeypatch):
    """If replaying the recorded block outputs does not reproduce the clean effect, the sweep says so
    and falls back to full forwards — whose numbers are the truth."""
    lm = loaded("qwen2")
    batch = effect_batch(lm)
    truth = effects.exact_sweep(lm, batch, reuse_residual=False)["zero"]
    real = effects.repeat_output  # the name effects looks up (from read/ground/copies.py)
    monkeypatch.setattr(effects, "repeat_output", lambda out, k: real(out, k) * 1.01)  # a subtly wrong replay
    info: dict = {}
    got = effects.exact_sweep(lm, batch, info=info)["zero"]
    assert info["shortcut"]["used"] is False and "differed from the full forward by" in info["shortcut"]["reason"]
    assert np.array_equal(got, truth)


def test_sink_logit_mass_is_read_for_sink_models_and_null_otherwise():
    text = "Alice gave Bob the book, and Bob gave it back."
    oss = read_heads(loaded("gpt_oss"), text, seeds=(0,), stimulus_batch=2, ablation=False)
    mass = oss["sink_logit_mass"]
    assert np.all((mass > 0) & (mass < 1))
    assert oss.meta["column_paths"]["sink_logit_mass"] == "blocked"
    llama = read_heads(loaded("llama"), text, seeds=(0,), stimulus_batch=2, ablation=False)
    assert np.isnan(llama["sink_logit_mass"]).all()
