"""Corpus reading: streamed sources, mergeable moments, Holm's correction, resumable checkpoints
(Ctrl-C and SIGKILL), and torch.distributed with 2 gloo processes equal to one process."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnroute.cli import main
from attnroute.models import load
from attnroute.read import corpus as corpus_mod
from attnroute.read.corpus import (
    CheckpointMismatch,
    CorpusInterrupted,
    holm,
    read_corpus,
)
from attnroute.read.moments import Moments

from .zoo import build

CORPUS = Path(__file__).resolve().parents[2] / "data" / "python-docs-topics.jsonl"
SMALL = dict(limit=6, max_tokens=48, exact=3, importance_tokens=24, seeds=(0,), stimulus_batch=2)


# ------------------------------------------------------------------------------------ moments


@given(
    data=st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=40),
    cut=st.integers(0, 40),
    holes=st.integers(0, 5),
)
def test_moments_merge_equals_sequential_and_numpy(data, cut, holes):
    x = np.array(data)[:, None].repeat(2, 1)  # two entries; the second has NaN holes (not observed)
    x[: min(holes, len(x)), 1] = np.nan
    seq, a, b = Moments((2,)), Moments((2,)), Moments((2,))
    for row in x:
        seq.add(row)
    for row in x[:cut]:
        a.add(row)
    for row in x[cut:]:
        b.add(row)
    a.merge(b)
    for m in (seq, a):
        for j in range(2):
            col = x[:, j][~np.isnan(x[:, j])]
            assert m.n[j] == len(col)
            if len(col):
                assert m.mean[j] == pytest.approx(col.mean(), rel=1e-9, abs=1e-9)
            if len(col) > 1:
                assert m.variance[j] == pytest.approx(col.var(ddof=1), rel=1e-7, abs=1e-7)
            else:
                assert np.isnan(m.variance[j])


def test_ci95_uses_students_t():
    m = Moments((1,))
    for v in (1.0, 2.0, 3.0, 4.0, 5.0):
        m.add([v])
    assert m.ci95()[0] == pytest.approx(2.776 * np.std([1, 2, 3, 4, 5], ddof=1) / np.sqrt(5))


def test_holm_by_hand():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    adjusted, reject = holm(p)  # sorted: .005×4=.02, .01×3=.03, .03×2=.06, .04×1=.04 → running max .06
    assert np.allclose(adjusted, [0.03, 0.06, 0.06, 0.02]) and list(reject) == [True, False, False, True]


# ------------------------------------------------------------------------------------ sources


def test_sources_stream_each_format(tmp_path):
    txt = tmp_path / "c.txt"
    txt.write_text("first doc\nstill first\n\n\nsecond doc\n\nthird\n")
    assert list(corpus_mod.documents(txt)) == ["first doc\nstill first\n", "second doc\n", "third\n"]
    assert list(corpus_mod.documents(txt, per_line=True, limit=2)) == ["first doc", "still first"]
    jl = tmp_path / "c.jsonl"
    jl.write_text('{"body": "a"}\n\n{"body": "b"}\n')
    assert list(corpus_mod.documents(jl, field="body")) == ["a", "b"]
    d = tmp_path / "d"
    d.mkdir()
    (d / "2.txt").write_text("two")
    (d / "1.txt").write_text("one")
    assert list(corpus_mod.documents(d)) == ["one", "two"]
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["p1", "p2", "p3"]}), tmp_path / "c.parquet")
    assert list(corpus_mod.documents(tmp_path / "c.parquet", limit=2)) == ["p1", "p2"]
    from datasets import Dataset

    Dataset.from_dict({"content": ["h1", "", "h2"]}).save_to_disk(str(tmp_path / "ds"))
    assert list(corpus_mod.documents(tmp_path / "ds", field="content")) == ["h1", "h2"]


@pytest.mark.parametrize(
    "content, field, message",
    [
        ('{"text": "a"}\nnot json\n', "text", "c.jsonl:2: not JSON"),
        ('{"body": "a"}\n', "text", "no 'text' field (it has: body); choose one with `field`"),
        ('{"text": 3}\n', "text", "the 'text' field is int, not text"),
    ],
)
def test_bad_jsonl_is_one_line_naming_the_line(tmp_path, content, field, message):
    path = tmp_path / "c.jsonl"
    path.write_text(content)
    with pytest.raises(corpus_mod.CorpusError, match=message.replace("(", r"\(").replace(")", r"\)")):
        list(corpus_mod.documents(path, field=field))


def test_the_bundled_corpus_is_real_text():
    docs = list(corpus_mod.documents(CORPUS))
    assert len(docs) == 79 and sum(map(len, docs)) > 400_000


# ------------------------------------------------------------------------------------ the read


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = build("llama", tmp_path_factory.mktemp("zoo"))
    return path, load(str(path))


def comparable(table) -> dict:
    d = table.to_dict()
    d["meta"] = {k: v for k, v in d["meta"].items() if k != "timings_s"}
    return d


def test_corpus_table_has_intervals_counts_and_significance(tiny):
    _, lm = tiny
    table = read_corpus(lm, CORPUS, **SMALL)
    d = table.to_dict()
    assert d["n_documents"] == 6 and d["n_tokens"] > 1000
    row = d["rows"][0]
    assert row["entropy_ci"] > 0 and row["sink_mass_ci"] > 0 and 0 <= row["role_stability"] <= 1
    imp = d["meta"]["importance"]
    assert len(imp["candidates"]) == 3 and imp["documents"] == 6 and "Holm" in imp["correction"]
    measured = [r for r in d["rows"] if r["ablation_delta"] is not None]
    assert len(measured) == 3 and all(
        r["ablation_delta_ci"] is not None and r["ablation_p_holm"] is not None for r in measured
    )
    assert imp["n_significant"] == sum(r["ablation_p_holm"] <= 0.05 for r in measured)


def test_interrupt_and_resume_equals_an_uninterrupted_read(tiny, tmp_path):
    _, lm = tiny
    whole = read_corpus(lm, CORPUS, **SMALL)
    ck = tmp_path / "ck.safetensors"
    stop = threading.Event()  # set after the second document, as the explorer or Ctrl-C would stop a read
    after_two = lambda e: e.stage == "corpus" and e.done >= 2 and stop.set()  # noqa: E731
    with pytest.raises(CorpusInterrupted, match=r"stopped after 2 of 6 documents .*rerun the same command"):
        read_corpus(lm, CORPUS, checkpoint=str(ck), checkpoint_every=100, stop=stop, progress=after_two, **SMALL)
    assert ck.exists()
    said = []
    resumed = read_corpus(lm, CORPUS, checkpoint=str(ck), progress=said.append, **SMALL)
    assert any(e.stage == "stage" and "resuming" in e.message for e in said)
    assert comparable(resumed) == comparable(whole)


def test_ctrl_c_inside_a_document_resumes_where_it_stopped(tiny, tmp_path, monkeypatch):
    """A read spends its time inside documents, so that is where Ctrl-C lands: the unfinished document is not
    counted (nor chained into the documents' digest), and the same command resumes on it."""
    from attnroute.read.corpus import read as corpus_read

    _, lm = tiny
    whole = read_corpus(lm, CORPUS, **SMALL)
    ck = tmp_path / "ck.safetensors"
    real, calls = corpus_read.document_delta, []

    def interrupted_in_the_third(*a, **k):
        calls.append(1)
        if len(calls) == 3:  # the third document's statistics are read; its ablation is cut short
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(corpus_read, "document_delta", interrupted_in_the_third)
    with pytest.raises(CorpusInterrupted, match=r"stopped after 2 of 6 documents"):
        read_corpus(lm, CORPUS, checkpoint=str(ck), checkpoint_every=100, **SMALL)
    monkeypatch.setattr(corpus_read, "document_delta", real)
    resumed = read_corpus(lm, CORPUS, checkpoint=str(ck), **SMALL)
    assert comparable(resumed) == comparable(whole)


def test_a_checkpoint_from_other_arguments_is_refused(tiny, tmp_path):
    _, lm = tiny
    ck = tmp_path / "ck.safetensors"
    read_corpus(lm, CORPUS, checkpoint=str(ck), **SMALL)
    with pytest.raises(CheckpointMismatch, match="written by another command"):
        read_corpus(lm, CORPUS, checkpoint=str(ck), **{**SMALL, "limit": 5})


def test_cli_ctrl_c_says_where_it_stopped(tiny, tmp_path, capsys, monkeypatch):
    from attnroute.read.corpus import read as corpus_read

    path, _ = tiny
    real = corpus_read.read_corpus

    def stopped_after_one(*a, progress=None, **k):
        stop = threading.Event()

        def relay(event):
            progress(event)
            if event.stage == "corpus" and event.done >= 1:
                stop.set()

        return real(*a, progress=relay, stop=stop, **k)

    monkeypatch.setattr(corpus_read, "read_corpus", stopped_after_one)
    code = main(
        [
            "heads",
            "--model",
            str(path),
            "--corpus",
            str(CORPUS),
            "--limit",
            "3",
            "--max-tokens",
            "48",
            "--checkpoint",
            str(tmp_path / "ck"),
            "--exact",
            "2",
        ]
    )
    err = capsys.readouterr().err
    assert code == 130 and "interrupted: stopped after 1 of 3 documents" in err


def _cli(model, out, *extra, env=None):
    return [
        sys.executable,
        "-m",
        "attnroute",
        "heads",
        "--model",
        str(model),
        "--corpus",
        str(CORPUS),
        "--limit",
        "6",
        "--max-tokens",
        "48",
        "--exact",
        "3",
        "--importance-tokens",
        "24",
        "--json",
        str(out),
        *extra,
    ]


def _in_process(argv: list[str], threads: int | None = None) -> None:
    """The command of ``argv`` (as _cli builds it) run by this process's main(): a child's start-up (importing
    torch and transformers, ~8 s) is only worth paying where the test needs a process to kill or a rank."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        assert main(argv[3:]) == 0
    finally:
        torch.set_num_threads(before)


def _rows(path):
    d = json.loads(Path(path).read_text())
    return d, {(r["layer"], r["head"]): r for r in d["rows"]}


def _torchrun(model, out: Path, ck: Path) -> subprocess.CompletedProcess:
    """The corpus read by two gloo ranks under torchrun (``--standalone``: a free port found by torchrun
    itself, so two runs on one machine never collide), checkpointed to ``ck``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torchrun = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc-per-node", "2"]
    cmd = [*torchrun, "-m", "attnroute", *_cli(model, out, "--checkpoint", str(ck))[3:]]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def two_ranks(tiny, tmp_path_factory):
    """One torchrun launch (two processes importing torch: ~20 s) shared by the tests that need one."""
    where = tmp_path_factory.mktemp("ranks")
    return where, _torchrun(tiny[0], where / "two.json", where / "ck")


def test_two_gloo_ranks_equal_one_process(tiny, two_ranks, tmp_path):
    model, _ = tiny
    _in_process(_cli(model, tmp_path / "one.json"), threads=1)  # the ranks' one thread each
    where, done = two_ranks
    assert done.returncode == 0, done.stderr[-2000:]
    one, a = _rows(tmp_path / "one.json")
    two, b = _rows(where / "two.json")
    assert two["meta"]["ranks"] == 2 and one["n_tokens"] == two["n_tokens"] and one["n_documents"] == two["n_documents"]
    for key, ra in a.items():
        rb = b[key]
        for col, va in ra.items():
            vb = rb[col]
            if isinstance(va, float):
                assert vb == pytest.approx(va, rel=1e-5, abs=1e-6), (key, col)
            else:
                assert va == vb, (key, col)
    assert "rank 1:" in done.stderr and "rank 0:" in done.stderr  # a summary per rank


def test_max_weight_adds_offset_histograms_with_intervals(tiny):
    _, lm = tiny
    table = read_corpus(lm, CORPUS, max_weight=True, **{**SMALL, "exact": 0})
    d = table.to_dict()
    offs = d["rows"][0]["argmax_offsets"]
    assert sum(offs.values()) == pytest.approx(1.0, abs=1e-3)  # a histogram over the buckets
    assert d["rows"][0]["max_weight_ci"] is not None and d["meta"]["importance"]["candidates"] == []


def test_a_checkpoint_from_another_model_is_refused(tiny, tmp_path):
    _, lm = tiny
    ck = tmp_path / "ck.safetensors"
    read_corpus(lm, CORPUS, checkpoint=str(ck), **SMALL)
    other = load(str(build("mistral", tmp_path)))
    with pytest.raises(CheckpointMismatch, match="written by another command"):
        read_corpus(other, CORPUS, checkpoint=str(ck), **SMALL)


def test_one_document_gives_no_significance_and_says_why(tiny):
    _, lm = tiny
    imp = read_corpus(lm, CORPUS, **{**SMALL, "limit": 1}).to_dict()["meta"]["importance"]
    assert imp["documents"] == 1 and imp["n_significant"] is None and imp["significant_heads"] is None
    assert "no test over documents can run" in imp["note"]


def test_skipped_documents_are_counted_in_the_json(tiny, tmp_path):
    _, lm = tiny
    path = tmp_path / "c.jsonl"
    good = [json.loads(line) for line in CORPUS.read_text().splitlines()[:3]]
    path.write_text("\n".join([json.dumps(good[0]), '{"text": 12}', json.dumps(good[1]), json.dumps(good[2])]))
    meta = read_corpus(lm, path, skip_bad=True, **{**SMALL, "limit": None}).to_dict()["meta"]
    assert meta["n_documents"] == 3 and meta["skipped"]["count"] == 1
    assert meta["skipped"]["documents"][0]["where"].endswith("c.jsonl:2")


# ------------------------------------------------------------------------------------ checkpoints carry their integrity


def _rewrite(path: Path, mutate, keep_digest: bool = False) -> None:
    """Load a checkpoint, change its arrays (``mutate(state)``) and write it back — with its digest
    recomputed (a consistent file of wrong numbers) unless ``keep_digest`` (a file changed behind it)."""
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    from attnroute.read.ground.checkpoint import state_digest

    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata()
    state = load_file(str(path))
    mutate(state)
    if not keep_digest:
        meta["state"] = state_digest(state)
    save_file(state, str(path), metadata=meta)


def _set_counters(docs, tokens):
    def mutate(state):
        state["counters"] = np.asarray([docs, tokens], dtype=np.int64)

    return mutate


def _nan_mean(state):
    state["entropy.mean"] = np.full_like(state["entropy.mean"], np.nan)


def _wrong_shape(state):
    for k in [k for k in state if k.startswith("entropy.")]:
        state[k] = state[k][:1]


DAMAGE = {
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[:200]), "is damaged or not an attnroute corpus checkpoint"),
    "random bytes": (lambda p: p.write_bytes(os.urandom(4096)), "is damaged or not an attnroute corpus checkpoint"),
    "a changed number": (
        lambda p: _rewrite(p, lambda s: s["entropy.mean"].__setitem__((0, 0), 9.0), keep_digest=True),
        "its numbers do not match their digest",
    ),
    "a missing array": (lambda p: _rewrite(p, lambda s: s.pop("role_counts")), "is damaged (KeyError"),
    "wrong shapes": (lambda p: _rewrite(p, _wrong_shape), "arrays of the wrong shape (entropy)"),
    "NaN statistics": (lambda p: _rewrite(p, _nan_mean), "statistics that cannot come from"),
    "a count of -5": (lambda p: _rewrite(p, _set_counters(-5, 100)), "impossible counts"),
    "a count of 10^9": (lambda p: _rewrite(p, _set_counters(10**9, 100)), "written for other documents"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_checkpoint_is_refused_in_one_line(tiny, tmp_path, damage):
    _, lm = tiny
    ck = tmp_path / "ck.safetensors"
    stop = threading.Event()
    with pytest.raises(CorpusInterrupted):
        read_corpus(
            lm, CORPUS, checkpoint=str(ck), stop=stop, progress=lambda e: e.stage == "corpus" and stop.set(), **SMALL
        )
    harm, words = DAMAGE[damage]
    harm(ck)
    with pytest.raises(CheckpointMismatch, match=re.escape(words)) as e:
        read_corpus(lm, CORPUS, checkpoint=str(ck), **SMALL)
    assert "\n" not in str(e.value) and str(e.value).endswith("remove it to start over")


def test_a_checkpoint_of_other_documents_or_fewer_of_them_is_refused(tiny, tmp_path):
    _, lm = tiny
    lines = CORPUS.read_text().splitlines()
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(lines[:6]) + "\n")
    ck = tmp_path / "ck.safetensors"
    stop = threading.Event()
    after_four = lambda e: e.stage == "corpus" and e.done >= 4 and stop.set()  # noqa: E731
    with pytest.raises(CorpusInterrupted):
        read_corpus(lm, corpus, checkpoint=str(ck), stop=stop, progress=after_four, **{**SMALL, "limit": None})
    rewritten = [
        json.dumps({"text": json.loads(lines[1])["text"] + " (edited)"}) if i == 1 else x
        for i, x in enumerate(lines[:6])
    ]
    corpus.write_text("\n".join(rewritten) + "\n")  # same count, one document rewritten
    with pytest.raises(CheckpointMismatch, match="written for other documents: the first 4 documents"):
        read_corpus(lm, corpus, checkpoint=str(ck), **{**SMALL, "limit": None})
    corpus.write_text("\n".join(lines[:3]) + "\n")  # cut to 3 documents
    with pytest.raises(CheckpointMismatch, match="has read 4, and this rank's share of the corpus now holds 3"):
        read_corpus(lm, corpus, checkpoint=str(ck), **{**SMALL, "limit": None})
    moved = tmp_path / "moved.jsonl"
    moved.write_text("\n".join(lines[:6]) + "\n")  # the same documents elsewhere resume
    assert read_corpus(lm, moved, checkpoint=str(ck), **{**SMALL, "limit": None}).to_dict()["n_documents"] == 6


def test_a_checkpoint_of_other_weights_with_the_same_config_is_refused(tiny, tmp_path):
    import shutil

    import torch

    path, lm = tiny
    ck = tmp_path / "ck.safetensors"
    read_corpus(lm, CORPUS, checkpoint=str(ck), **SMALL)
    tuned = tmp_path / "runB" / path.name  # the same folder name and config, one weight changed
    shutil.copytree(path, tuned)
    other = load(str(tuned))
    with torch.no_grad():
        other.model.lm_head.weight[0, 0] += 1.0  # a fine-tune that froze the embeddings
    with pytest.raises(CheckpointMismatch, match="written by another command .other arguments, model weights"):
        read_corpus(other, CORPUS, checkpoint=str(ck), **SMALL)


def test_killed_at_random_points_then_resumed_equals_one_read(tiny, tmp_path):
    """SIGKILL after a random number of checkpoints, twice in a row, then a run to the end."""
    model, _ = tiny
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    _in_process(_cli(model, tmp_path / "whole.json"))  # only a killed run needs a process of its own
    ck = tmp_path / "ck.safetensors"
    rng = np.random.default_rng(7)
    for _ in range(2):
        kill_after = int(rng.integers(1, 4))  # checkpoints written by this run before the kill
        proc = subprocess.Popen(
            _cli(model, tmp_path / "resumed.json", "--checkpoint", str(ck), "--checkpoint-every", "1"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        seen = 0
        for line in proc.stderr:
            seen += "checkpoint:" in line
            if seen >= kill_after:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    _in_process(_cli(model, tmp_path / "resumed.json", "--checkpoint", str(ck), "--checkpoint-every", "1"))
    (whole, a), (resumed, b) = _rows(tmp_path / "whole.json"), _rows(tmp_path / "resumed.json")
    assert a == b and whole["n_tokens"] == resumed["n_tokens"] and whole["n_documents"] == resumed["n_documents"]


def test_torchrun_with_one_damaged_rank_checkpoint_refuses_once_on_every_rank(tiny, two_ranks, tmp_path):
    where, first = two_ranks
    assert first.returncode == 0, first.stderr[-3000:]
    for shard in where.glob("ck.rank*-of-2"):  # the finished two-rank checkpoint, copied: the fixture's stays whole
        (tmp_path / shard.name).write_bytes(shard.read_bytes())
    damaged = tmp_path / "ck.rank1-of-2"
    damaged.write_bytes(damaged.read_bytes()[:100])
    done = _torchrun(tiny[0], tmp_path / "two.json", tmp_path / "ck")
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode != 0 and len(errors) == 1, done.stderr[-3000:]
    assert errors[0].startswith("error: --checkpoint: rank 1: checkpoint") and "is damaged" in errors[0]
    # no rank prints a traceback: the one torchrun prints is its launcher's report of a failed child
    # (ChildFailedError, torch's elastic agent), with no frame of attnroute in it
    assert not re.search(r'File ".*/attnroute/', done.stderr) and "ChildFailedError" in done.stderr
    assert "rank 0:" not in done.stderr  # rank 0 read no shard: it refused with rank 1


def test_report_refuses_a_corpus_for_an_encoder_decoder_before_reading_the_text(tmp_path, capsys, monkeypatch):
    import attnroute.read.report as capture

    t5 = build("t5", tmp_path)
    monkeypatch.setattr(capture, "read_heads", lambda *a, **k: pytest.fail("the text was read before the refusal"))
    assert main(["report", "--model", str(t5), "--corpus", str(CORPUS), "--out", str(tmp_path / "r.html")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert err == [
        "error: --corpus: a corpus read covers causal LMs and encoders; read an encoder-decoder one text at a time"
    ]


def test_cli_refuses_a_damaged_checkpoint_in_one_line_and_leaves_it_as_it_was(tiny, tmp_path, capsys):
    import hashlib

    model, _ = tiny
    ck = tmp_path / "ck.safetensors"
    ck.write_bytes(os.urandom(2048))
    before = hashlib.sha256(ck.read_bytes()).hexdigest()
    argv = ["heads", "--model", str(model), "--corpus", str(CORPUS), "--limit", "3", "--max-tokens", "48"]
    assert main([*argv, "--exact", "2", "--checkpoint", str(ck), "--json", str(tmp_path / "h.json")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and err[0].startswith("error: --checkpoint ") and "remove it to start over" in err[0]
    assert hashlib.sha256(ck.read_bytes()).hexdigest() == before and not (tmp_path / "h.json").exists()
