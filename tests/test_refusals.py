"""Bad input, class by class: a one-line refusal (InputError / exit 2), the right number where the
input is legal, and nothing the user gave overwritten."""

import hashlib
import json
import math
import os
from pathlib import Path

import pytest
import torch

import attnroute as ar
from attnroute.cli import main
from attnroute.cost.kv import spec_from_config
from attnroute.engine.jsonable import strict
from attnroute.engine.paged import PagedKVCache


def qkv(B=1, H=2, T=6, D=8, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(B, H, T, D, generator=g).to(dtype) for _ in range(3)]


# ------------------------------------------------------------------------------------ the API


def _paged_wrong_d():
    pool = PagedKVCache(4, 2, 1, 2, 8)
    pool.add_sequence(0)
    try:
        pool.append(0, 0, torch.zeros(2, 3, 5), torch.zeros(2, 3, 5))
    finally:
        assert len(pool.free) == 4  # nothing was reserved for the refused append


API_CASES = {
    "window 2.5": (lambda: ar.sliding_window(2.5), "window must be an integer"),
    "window 0": (lambda: ar.sliding_window(0), "sliding window must be >= 1"),
    "padding beyond Tk": (lambda: ar.attend(*qkv(T=5), ar.padding([9])), "exceed the 5 keys"),
    "padding float lengths": (lambda: ar.padding([2.5]), "padding lengths must be integers"),
    "document Tq > Tk": (
        lambda: ar.attend(qkv(T=6)[0], *qkv(T=4)[1:], ar.document(torch.tensor([0, 0, 1, 1]))),
        "needs Tq <= Tk",
    ),
    "cache broadcast": (
        lambda: ar.KVCache(1, 3, 2, 8, 16).append(0, torch.zeros(1, 2, 1, 8), torch.zeros(1, 2, 1, 8)),
        "no broadcasting",
    ),
    "cache layer -1": (
        lambda: ar.KVCache(2, 1, 2, 8, 16).append(-1, torch.zeros(1, 2, 1, 8), torch.zeros(1, 2, 1, 8)),
        "layer must be >= 0",
    ),
    "cache 2.5 batch": (lambda: ar.KVCache(1, 2.5, 2, 8, 16), "batch must be an integer"),
    "paged wrong D": (_paged_wrong_d, "must be [Hkv, T_new, D] = [2, T_new, 8]"),
    "paged unknown id": (lambda: PagedKVCache(4, 2, 1, 2, 8).gather(7, 0), "unknown sequence id 7"),
    "D = 0": (lambda: ar.attend(*qkv(D=0)), "head dims must be >= 1"),
    "integer q": (lambda: ar.attend(*(t.long() for t in qkv())), "must be real floating point"),
    "complex q": (lambda: ar.attend(*(t.to(torch.complex64) for t in qkv())), "must be real floating point"),
    "block_size 2.5": (
        lambda: ar.attend(*qkv(), ar.causal(), impl="blocked", block_size=2.5),
        "block_size must be an integer",
    ),
    "nan scale": (lambda: ar.attend(*qkv(), scale=float("nan")), "scale must be a finite number"),
    "reference with grad": (
        lambda: ar.attend(*(t.requires_grad_() for t in qkv()), impl="reference"),
        "carries no gradients",
    ),
    "sdpa with scale 0": (lambda: ar.attend(*qkv(), ar.causal(), impl="sdpa", scale=0.0), "scale <= 0"),
}


@pytest.mark.parametrize("case", list(API_CASES))
def test_api_refuses_with_an_input_error_naming_the_field(case):
    fn, words = API_CASES[case]
    with pytest.raises(ar.InputError, match=words.replace("[", r"\[").replace("]", r"\]")) as e:
        fn()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("scale", [0.0, -0.5])
def test_auto_keeps_scales_sdpa_cannot_do_off_the_fused_path(scale):
    q, k, v = qkv()
    out, trace = ar.attend(q, k, v, ar.causal(), scale=scale, return_trace=True)
    assert trace.impl != "sdpa" and torch.isfinite(out).all()
    torch.testing.assert_close(out, ar.attend(q, k, v, ar.causal(), scale=scale, impl="eager"))


def test_nan_inputs_propagate_and_never_turn_into_zeros():
    q, k, v = qkv()
    q[0, 0, 2, 0] = float("nan")
    out = ar.attend(q, k, v, ar.causal())
    assert torch.isnan(out[0, 0, 2]).all() and torch.isfinite(out[0, 0, :2]).all()
    k2 = qkv()[1]
    k2[0, 0, 0, 0] = float("nan")  # key 0 is visible to every causal row
    out = ar.attend(qkv()[0], k2, qkv()[2], ar.causal())
    assert torch.isnan(out[0, 0]).all() and torch.isfinite(out[0, 1]).all()  # head 0 reads the NaN key
    with pytest.raises(ar.UnsupportedRequest, match="non-finite query"):
        ar.attend(q, k, v, ar.causal(), impl="sdpa")


# ------------------------------------------------------------------------------------ cost


GEMMA2_9B = {
    "model_type": "gemma2",
    "num_hidden_layers": 42,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 256,
    "hidden_size": 3584,
    "sliding_window": 4096,
}
QWEN2_7B = {
    "model_type": "qwen2",
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "hidden_size": 3584,
    "sliding_window": 4096,
    "use_sliding_window": False,
    "max_window_layers": 28,
}


def test_kv_windows_are_read_per_layer():
    # Gemma-2 alternates sliding (4,096) and global layers: 21 · 8,192 + 21 · 4,096 tokens · 8,192 B
    assert spec_from_config(GEMMA2_9B, "fp16").cache_bytes(8192) == 2_113_929_216
    # Qwen2 with use_sliding_window false keeps every token in every layer
    assert spec_from_config(QWEN2_7B, "fp16").cache_bytes(32768) == 1_879_048_192
    sliding = {**QWEN2_7B, "use_sliding_window": True, "max_window_layers": 14}  # layers 14… slide
    assert spec_from_config(sliding, "fp16").cache_bytes(32768) == 14 * (32768 + 4096) * 2048
    mistral = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, "sliding_window": 10}
    assert spec_from_config(mistral, "fp32").cache_bytes(100) == 2 * 10 * 2 * 4 * 16 * 4


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--layers", "2", "--heads", "0", "--head-dim", "8"], "--heads must be a positive integer"),
        (["--model", "smollm2", "--layers", "3"], "give --model or explicit sizes, not both"),
    ],
)
def test_cost_kv_refusals(capsys, argv, words):
    assert main(["cost", "kv", *argv]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("num_hidden_layers", 2.5, "num_hidden_layers must be a positive integer"),
        ("num_attention_heads", "8", "num_attention_heads must be a positive integer"),
        ("num_attention_heads", 0, "num_attention_heads must be a positive integer"),
    ],
)
def test_cost_kv_config_fields_are_validated(tmp_path, capsys, field, value, words):
    cfg = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, field: value}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert main(["cost", "kv", "--model", str(path)]) == 2
    assert words in capsys.readouterr().err


def test_simulate_refuses_impossible_streams(tmp_path, capsys):
    assert main(["cost", "simulate", "--max-len", "50"]) == 2
    assert "max-len must be at least 130" in capsys.readouterr().err
    long = tmp_path / "long.csv"
    long.write_text("prompt_tokens,output_tokens\n100,100\n")
    assert main(["cost", "simulate", "--requests", str(long), "--max-len", "150"]) == 2
    assert "prompt + output ≤ max_len=150" in capsys.readouterr().err
    for argv in (["--budget-gb", "inf"], ["--budget-gb", "nan"], ["--n", "0"]):
        assert main(["cost", "simulate", *argv]) == 2
    short = tmp_path / "short.csv"
    short.write_text("prompt_tokens,output_tokens\n10\n")
    assert main(["cost", "simulate", "--requests", str(short)]) == 2
    assert "line 2" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ the CLI

BAD = [
    ["heads", "--model", "minilm", "--max-tokens", "0"],
    ["heads", "--model", "minilm", "--seed", "-1"],
    ["heads", "--model", "nosuchmodel"],
    ["heads", "--model", "minilm", "--json", "/nonexistent/dir/h.json"],
    ["heads", "--model", "minilm", "--text", "x", "--file", "y"],
    ["heads", "--model", "minilm", "--exact", "some"],
    ["heads", "--model", "minilm", "--modes", "zero,sideways"],
    ["heads", "--model", "org-that-is-not/cached-anywhere"],
    ["heads", "--corpus", "/nonexistent/corpus.jsonl"],
    ["heads", "--corpus", "data/python-docs-topics.jsonl", "--field", "body"],
    ["heads", "--corpus", "data/python-docs-topics.jsonl", "--checkpoint", "/nonexistent/dir/ck"],
    ["heads", "--corpus", "data/python-docs-topics.jsonl", "--limit", "0"],
    ["heads", "--corpus", "data/python-docs-topics.jsonl", "--text", "also a text"],
    ["heads", "--model", "minilm", "--limit", "3"],
    ["heads", "--model", "minilm", "--checkpoint", "ck"],
    ["heads", "--model", "minilm", "--skip-bad"],
    ["knockout", "a b c", "--from", "c", "--to", "zebra"],
    ["knockout", "a b c", "--from", "c", "--to", "a", "--plot", "k.jpeg"],
    ["swap", "one two", "one two three four five"],
    ["needle", "--lengths", "8"],
    ["needle", "--lengths", "256,lots"],
    ["report", "--model", "minilm", "--generate", "3"],
    ["report", "--add", "/nonexistent.json"],
    ["report", "--corpus", "/nonexistent/dir"],
    ["report", "--max-tokens", "-3"],
    ["report", "--out", "/nonexistent/dir/r.html"],
    ["report", "--learn", "/nonexistent.json"],
    ["check", "nosuchmodule:fn"],
    ["check", "torch.sdpa", "--only", "telepathy"],
    ["check", "torch.sdpa", "--scale", "-1"],
    ["check", "torch.sdpa", "--json", "/nonexistent/dir/c.json"],
    ["cost", "kv"],
    ["cost", "kv", "--layers", "2", "--heads", "3", "--kv-heads", "2", "--head-dim", "8"],
    ["cost", "kv", "--layers", "2", "--heads", "4", "--head-dim", "8", "--dtype", "fp4"],
    ["cost", "simulate", "--block-size", "0"],
    ["cost", "simulate", "--plot", "out.jpeg"],
    ["cost", "bill", "--lengths", "8"],
    ["learn", "scale", "--head-dims", "0"],
    ["learn", "pruning", "--head-counts", "0"],
    ["learn", "induction", "--layers", "1"],
    ["bench", "--sizes", "-5"],
    ["bench", "--quick", "--sizes", "64"],
    ["bench", "--suite", "read", "--sizes", "64"],
    ["bench", "--from-json", "/nonexistent.json"],
    ["patch", "--prompts", "ioi", "--metric", "logit-difference"],
    ["patch", "--prompts", "ioi", "--sites", "head,mlp"],
    ["patch", "--prompts", "ioi", "--direction", "sideways"],
    ["patch", "--prompts", "/nonexistent/prompts.jsonl"],
    ["patch", "--clean", "a b", "--metric", "prob", "--answer", " x"],
    ["patch", "--prompts", "ioi", "--clean", "a", "--corrupt", "b"],
    ["patch", "--prompts", "ioi", "--plot", "p.svg"],
    ["patch", "--prompts", "ioi", "--exact", "some"],
    ["routes", "a text", "--metric", "kl"],
    ["routes", "a text", "--answer", " x", "--wrong", " y", "--top", "5", "--verify", "9"],
    ["routes", "a text", "--prompts", "ioi"],
]


@pytest.mark.parametrize("argv", BAD, ids=lambda a: " ".join(a))
def test_every_command_refuses_in_one_line_with_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: ") and sum(line.startswith("error:") for line in err) == 1
    assert not any("Traceback" in line for line in err)


@pytest.mark.parametrize(
    "argv, paths",
    [
        (["report", "--model", "minilm", "--file", "{a}", "--out", "{a}"], ["a"]),
        (["report", "--model", "minilm", "--out", "{a}", "--json", "{a}"], ["a"]),
        (["heads", "--model", "minilm", "--file", "{a}", "--json", "{a}"], ["a"]),
        (["cost", "simulate", "--requests", "{a}", "--json", "{a}"], ["a"]),
    ],
)
def test_no_output_overwrites_an_input_or_another_output(tmp_path, capsys, argv, paths):
    files = {p: tmp_path / f"{p}.txt" for p in paths}
    for f in files.values():
        f.write_text("prompt_tokens,output_tokens\n10,5\n")
    before = {p: f.read_bytes() for p, f in files.items()}
    assert main([a.format(**{p: str(f) for p, f in files.items()}) for a in argv]) == 2
    assert {p: f.read_bytes() for p, f in files.items()} == before
    assert "nothing you gave is overwritten" in capsys.readouterr().err


def test_output_paths_are_checked_before_any_work(monkeypatch, capsys):
    import attnroute.read.heads as heads

    monkeypatch.setattr(heads, "read_heads", lambda *a, **k: pytest.fail("the model was read before the check"))
    assert main(["heads", "--json", "/nonexistent/dir/h.json"]) == 2
    assert main(["heads", "--csv", "/tmp"]) == 2


def test_learn_out_naming_a_file_and_report_learn_with_missing_fields(tmp_path, capsys):
    f = tmp_path / "out.txt"
    f.write_text("keep me")
    assert main(["learn", "induction", "--steps", "2", "--out", str(f)]) == 2 and f.read_text() == "keep me"
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"experiment": "induction"}))
    assert main(["report", "--model", "minilm", "--learn", str(partial)]) == 2
    assert "missing or malformed field" in capsys.readouterr().err


def test_json_never_holds_bare_nan():
    data = {"a": float("nan"), "b": [1.0, float("inf")], "c": torch.tensor(float("-inf"))}
    assert strict(data) == {"a": None, "b": [1.0, None], "c": None}
    json.dumps(strict(data), allow_nan=False)  # strict parsers accept it
    assert math.isnan(float("nan"))


def test_documented_zero_is_accepted_where_the_help_says_so(tmp_path, capsys):
    # `learn induction --ff 0` is the attention-only model its help documents
    assert main(["learn", "induction", "--ff", "0", "--steps", "2", "--every", "1"]) == 0


# ------------------------------------------------------------------------------------ outputs never land in inputs


def _digest(root: Path) -> dict:
    """Every file under ``root`` (or the file itself) -> its bytes' hash: inputs must stay byte-for-byte."""
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@pytest.fixture
def inputs(tmp_path):
    """A corpus folder, a model folder (config + weights: a refusal comes before any load), a notes file,
    a knockout result and a config.json."""
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "a.txt").write_text("one document\n")
    (corpus / "b.txt").write_text("another document\n")
    model = tmp_path / "mymodel"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64})
    )
    (model / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    (tmp_path / "notes.txt").write_text("a text\n")
    (tmp_path / "ko.json").write_text(json.dumps({"experiment": "knockout"}))
    (tmp_path / "config.json").write_text((model / "config.json").read_text())
    os.link(corpus / "a.txt", tmp_path / "hardlink.json")
    return tmp_path


OVERWRITES = [
    ["heads", "--corpus", "{t}/docs", "--json", "{t}/docs/a.txt"],
    ["heads", "--corpus", "{t}/docs", "--csv", "{t}/docs/new.csv"],
    ["heads", "--corpus", "{t}/docs/a.txt", "--json", "{t}/hardlink.json"],
    ["heads", "--model", "{t}/mymodel", "--json", "{t}/mymodel/config.json"],
    [
        "knockout",
        "a b",
        "--from",
        "b",
        "--to",
        "a",
        "--model",
        "{t}/mymodel",
        "--json",
        "{t}/mymodel/model.safetensors",
    ],
    ["swap", "a b", "a c", "--model", "{t}/mymodel", "--json", "{t}/mymodel/out.json"],
    ["report", "--add", "{t}/ko.json", "--json", "{t}/ko.json"],
    ["report", "--corpus", "{t}/notes.txt", "--out", "{t}/notes.txt"],
    ["report", "--model", "{t}/mymodel", "--png-dir", "{t}/mymodel/charts"],
    ["cost", "kv", "--model", "{t}/config.json", "--json", "{t}/config.json"],
    ["heads", "--corpus", "{t}/docs", "--checkpoint", "{t}/docs/ck"],
]


@pytest.mark.parametrize("argv", OVERWRITES, ids=lambda a: " ".join(a).replace("{t}/", ""))
def test_no_output_lands_inside_an_input(inputs, capsys, argv):
    before = _digest(inputs)
    assert main([a.format(t=inputs) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nothing you gave is overwritten" in err[0] and "Traceback" not in err[0]
    assert _digest(inputs) == before  # nothing changed, nothing added


UNWRITABLE = [
    ["heads", "--model", "minilm", "--json", "/dev/full"],
    ["heads", "--model", "minilm", "--csv", "/dev/full"],
    ["heads", "--model", "minilm", "--json", "/proc/h.json"],
    ["report", "--model", "minilm", "--out", "/proc/r.html"],
    ["report", "--model", "minilm", "--png-dir", "/proc/charts"],
    ["knockout", "a b", "--from", "b", "--to", "a", "--plot", "/proc/k.png"],
    ["heads", "--corpus", "data/python-docs-topics.jsonl", "--checkpoint", "/proc/ck"],
    ["learn", "induction", "--steps", "2", "--out", "/proc/learn"],
    ["bench", "--quick", "--json", "/sys/bench.json"],
]


@pytest.mark.parametrize("argv", UNWRITABLE, ids=" ".join)
def test_unwritable_outputs_are_refused_before_the_work(capsys, no_model_load, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and err[0].startswith("error: ") and ("cannot write" in err[0] or "not a regular file" in err[0])
    )


def test_a_write_that_fails_keeps_the_previous_file_and_the_result(tmp_path, monkeypatch, capsys):
    from attnroute import files
    from attnroute.cli.common import deliver

    target = tmp_path / "result.json"
    target.write_text('{"previous": true}')

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", disk_full)
    with pytest.raises(
        ar.InputError, match="could not be written .No space left on device.; the result is kept in"
    ) as e:
        deliver(target, "json", b'{"new": true}')
    assert target.read_text() == '{"previous": true}'  # whole, never half a file
    kept = Path(str(e.value).rsplit(" ", 1)[-1])
    assert kept.read_bytes() == b'{"new": true}'
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # no temporary file left behind
    kept.unlink()


# ------------------------------------------------------------------------------------ corpus input, checked


def _parquet(path, column):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": column}), path)


def _corpus_cases(t: Path) -> dict:
    """name -> (argv after `heads --corpus`, words in the refusal); files made under ``t``."""
    (t / "utf8.jsonl").write_bytes(b'{"text": "fine"}\n{"text": "also fine"}\n{"text": "bad \xff\xfe bytes"}\n')
    (t / "surrogate.jsonl").write_text('{"text": "ok"}\n{"text": "half a pair \\ud800 here"}\n')
    (t / "listfield.jsonl").write_text('{"text": ["a", "b"]}\n')
    folder = t / "folderdoc"
    (folder / "x.txt").mkdir(parents=True)
    (t / "broken").mkdir()
    (t / "broken" / "a.txt").write_text("fine\n")
    os.symlink(t / "nowhere.txt", t / "broken" / "b.txt")
    (t / "loop").mkdir()
    os.symlink("c.txt", t / "loop" / "c.txt")
    _parquet(t / "ints.parquet", [1, 2])
    (t / "garbage.parquet").write_bytes(b"PAR1 this is not parquet at all")
    _parquet(t / "whole.parquet", ["a" * 5000, "b" * 5000])
    (t / "truncated.parquet").write_bytes((t / "whole.parquet").read_bytes()[:300])
    (t / "mixed").mkdir()
    (t / "mixed" / "a.txt").write_text("text\n")
    _parquet(t / "mixed" / "b.parquet", ["row"])
    (t / "plain.txt").write_text("one\n\ntwo\n")
    (t / "lines.jsonl").write_text('{"text": "one"}\n')
    import datasets

    datasets.Dataset.from_dict({"text": [1, 2]}).save_to_disk(str(t / "intset"))
    split = datasets.Dataset.from_dict({"text": ["a"]})
    datasets.DatasetDict({"train": split, "test": split}).save_to_disk(str(t / "splits"))
    late = "".join(f'{{"text": "document {i}"}}\n' for i in range(5000)) + "not json\n"
    (t / "late.jsonl").write_text(late)
    return {
        "invalid UTF-8": (["{t}/utf8.jsonl"], "utf8.jsonl:3: not UTF-8 text"),
        "lone surrogate": (["{t}/surrogate.jsonl"], "surrogate.jsonl:2: the 'text' field holds a lone surrogate"),
        "list field": (["{t}/listfield.jsonl"], "the 'text' field is list, not text"),
        "folder named .txt": (["{t}/folderdoc"], "x.txt: a folder, not a document"),
        "broken symlink": (["{t}/broken"], "b.txt: a broken symlink"),
        "symlink loop": (["{t}/loop"], "c.txt: a symlink loop"),
        "int parquet column": (["{t}/ints.parquet"], "ints.parquet row 0: the document is int, not text"),
        "garbage parquet": (["{t}/garbage.parquet"], "not a readable parquet file"),
        "truncated parquet": (["{t}/truncated.parquet"], "not a readable parquet file"),
        ".txt beside .parquet": (["{t}/mixed"], "holds both .parquet and .txt files"),
        "--field on .txt": (["{t}/plain.txt", "--field", "body"], "--field 'body' names a column"),
        "--per-line on .jsonl": (["{t}/lines.jsonl", "--per-line"], "--per-line splits a .txt file"),
        "a bad line 5,001": (["{t}/late.jsonl"], "late.jsonl:5001: not JSON"),
        "int dataset column": (["{t}/intset"], "intset row 0: the document is int, not text"),
        "a saved DatasetDict": (["{t}/splits"], "holds several splits (train, test)"),
    }


@pytest.fixture(scope="module")
def corpus_cases(tmp_path_factory):
    t = tmp_path_factory.mktemp("corpora")
    return t, _corpus_cases(t)


@pytest.mark.parametrize(
    "case",
    [
        "invalid UTF-8",
        "lone surrogate",
        "list field",
        "folder named .txt",
        "broken symlink",
        "symlink loop",
        "int parquet column",
        "garbage parquet",
        "truncated parquet",
        ".txt beside .parquet",
        "--field on .txt",
        "--per-line on .jsonl",
        "a bad line 5,001",
        "int dataset column",
        "a saved DatasetDict",
    ],
)
def test_corpus_documents_are_checked_before_the_model_loads(corpus_cases, case, capsys, no_model_load):
    t, cases = corpus_cases
    argv, words = cases[case]
    before = _digest(t)
    assert main(["heads", "--corpus", *[a.format(t=t) for a in argv]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and "Traceback" not in err[0], err
    assert _digest(t) == before


def test_a_fifo_in_a_corpus_folder_is_never_opened(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("a document\n")
    os.mkfifo(tmp_path / "docs" / "b.txt")  # opening it would block forever
    code = f"from attnroute.cli import main; raise SystemExit(main(['heads', '--corpus', {str(tmp_path / 'docs')!r}]))"
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "b.txt: a special file (FIFO, socket or device)" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_skip_bad_skips_and_counts_what_is_not_text(tmp_path):
    from attnroute.read.corpus import Corpus

    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"text": "one"}\n{"text": 7}\n{"text": "b\xffd"}\n{"text": "two"}\n')
    docs = Corpus(path, skip_bad=True)
    assert list(docs) == ["one", "two"] and docs.scanned == (2, "one")
    assert [d["reason"] for d in docs.skipped] == [
        "the 'text' field is int, not text",
        "not UTF-8 text (invalid start byte at byte 11)",
    ]
    with pytest.raises(ar.InputError, match="c.jsonl:2: the 'text' field is int, not text"):
        list(Corpus(path))


def test_every_experiment_schema_accepts_what_its_command_writes_and_names_what_breaks():
    from attnroute.engine.jsonable import shape_problem

    schema = {"windows": [{"layers": [int], "p": float}], "target": {"token": str}}
    good = {"windows": [{"layers": [0, 4], "p": 1}], "target": {"token": " Paris"}, "extra": None}
    assert shape_problem(good, schema) is None  # ints pass as floats; extra fields are free
    assert shape_problem({**good, "target": {}}, schema) == "the field target.token is missing"
    assert shape_problem({**good, "windows": {}}, schema) == "the field windows is dict, expected a list"
    broken = {**good, "windows": [{"layers": [0, True], "p": 0.1}]}
    assert shape_problem(broken, schema) == "the field windows[0].layers[1] is bool, expected int"


def test_any_word_of_a_prompt_draws_in_a_figure():
    """mathtext is off: '$ { $' from a prompt is drawn as it is (it raised in matplotlib's parser, and the
    JSON written after the plot was lost)."""
    from attnroute.read.experiments import KnockoutResult
    from attnroute.show.sections import figure as png_bytes

    result = KnockoutResult(
        "m", "x $ { $ x", ["<s>", "$", "{", "$", "x"], [4], [1, 2, 3], [0], "$ { $", 7, 5, None, 0.5, 0.7,
        windows=[(0, 4)], p_route=[0.4], p_control=[0.5], loss_route=[0.8], loss_control=[0.7],
    )  # fmt: skip
    assert png_bytes(result)[:4] == b"\x89PNG"


@pytest.mark.parametrize("second", [0.0, 0.05, 0.2])
def test_ctrl_c_while_loading_is_one_line_and_130(tmp_path, second):
    """More Ctrl-Cs at any moment after the first — a burst, every 5 ms, from at once (0.0: while the first
    unwinds) until the process is gone — change nothing. One at 0.2 s on a busy machine once killed the
    process by SIGINT (exit −2) after "interrupted" was said; the first Ctrl-C now ignores the rest."""
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "attnroute", "heads", "--model", "minilm", "--json", str(tmp_path / "h.json")],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    for line in proc.stderr:  # wait for the read to start, then interrupt it
        if "loading" in line or "stage:" in line:
            break
    proc.send_signal(signal.SIGINT)
    time.sleep(second)
    end = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < end:  # impatient Ctrl-Cs while it winds down: same line, 130
        proc.send_signal(signal.SIGINT)
        time.sleep(0.005)
    rest = proc.communicate(timeout=60)[1]
    said = f"exit {proc.returncode}; stderr after the signal: {rest[-1500:]!r}"
    assert proc.returncode == 130 and "Traceback" not in rest and not (tmp_path / "h.json").exists(), said
    assert rest.strip().splitlines()[-1].startswith("interrupted"), said


def test_ctrl_cs_after_the_first_find_a_handler_that_does_nothing():
    """After the first Ctrl-C the rest run a handler that does nothing, never SIG_IGN: a SIGINT landing while
    CPython swaps in SIG_IGN stays pending and is later printed as a traceback, "OSError: Signal 2 ignored due
    to race condition" (CI, a burst at 0.0 s). Pending ones run the handler and the process goes on."""
    import subprocess
    import sys

    code = (
        "import signal\nfrom attnroute.errors import ignore_interrupts\nignore_interrupts()\n"
        "assert callable(signal.getsignal(signal.SIGINT)), signal.getsignal(signal.SIGINT)\n"
        "for _ in range(200):\n    signal.raise_signal(signal.SIGINT)\nignore_interrupts()\nprint('alive')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "alive\n", ""), done


# ------------------------------------------------------------------------------------ prompt pairs


def _prompt_cases(t: Path) -> dict:
    """argv -> words of the one-line refusal; each needs the tokenizer at most, never the model's weights."""
    rows = {
        "empty.jsonl": "",
        "blank.jsonl": "\n\n",
        "missing.jsonl": json.dumps({"clean": "When Mary and John went out, John said to", "answer": " Mary"}),
        "notjson.jsonl": '{"clean": "a", "corrupt": "b",\n',
        "list.jsonl": "[1, 2]",
        "number.jsonl": json.dumps({"clean": 3, "corrupt": "b", "answer": " a", "wrong": " b"}),
        "lengths.jsonl": json.dumps(
            {
                "clean": "When Mary and John went out, John said to",
                "corrupt": "When Mary and John went out, Elizabeth-Anne said to",
                "answer": " Mary",
                "wrong": " John",
            }
        ),
        "multi.jsonl": json.dumps(
            {
                "clean": "When Mary and John went out, John said to",
                "corrupt": "When Mary and John went out, Mary said to",
                "answer": " Maryanne-Louise",
                "wrong": " John",
            }
        ),
    }
    for name, text in rows.items():
        (t / name).write_text(text)
    ok = str(t / "ok.jsonl")
    (t / "ok.jsonl").write_text(
        json.dumps(
            {
                "clean": "When Mary and John went out, John said to",
                "corrupt": "When Mary and John went out, Mary said to",
                "answer": " Mary",
                "wrong": " John",
            }
        )
    )
    return {
        "empty file": (["patch", "--prompts", str(t / "empty.jsonl")], "holds no prompt pairs"),
        "blank lines only": (["patch", "--prompts", str(t / "blank.jsonl")], "holds no prompt pairs"),
        "row missing corrupt": (["patch", "--prompts", str(t / "missing.jsonl")], "row 1 has no 'corrupt'"),
        "row not JSON": (["patch", "--prompts", str(t / "notjson.jsonl")], "row 1 is not JSON"),
        "row a list": (["patch", "--prompts", str(t / "list.jsonl")], "row 1 is a list, not an object"),
        "field a number": (["patch", "--prompts", str(t / "number.jsonl")], "'clean' must be a string"),
        "lengths differ": (["patch", "--prompts", str(t / "lengths.jsonl")], "clean and corrupt differ in length"),
        "answer of many tokens": (["patch", "--prompts", str(t / "multi.jsonl")], "give a single-token answer"),
        "position out of range": (["patch", "--prompts", ok, "--positions", "99"], "position 99 is outside"),
        "word not in the prompt": (["patch", "--prompts", ok, "--positions", "Zebra"], "'Zebra' is not a word"),
        "logits on an encoder": (["patch", "--prompts", ok, "--model", "minilm"], "this model is an encoder"),
        "cosine on a causal LM": (["patch", "--prompts", ok, "--metric", "cosine"], "metric cosine compares"),
        "per-position over lengths": (["patch", "--prompts", "ioi", "--positions", "each"], "lengths"),
        "routes over lengths": (["routes", "--prompts", "ioi"], "must have the same length"),
        "routes text with many-token answer": (
            ["routes", "a b c", "--answer", " Maryanne-Louise", "--wrong", " x"],
            "single-token answer",
        ),
        "routes text without the wrong token": (
            ["routes", "a b c", "--answer", " x"],
            "no --wrong was given: the metric logit-diff reads answer and wrong",
        ),
    }


@pytest.fixture(scope="module")
def prompt_cases(tmp_path_factory):
    t = tmp_path_factory.mktemp("prompts")
    return t, _prompt_cases(t)


PROMPT_CASES = [
    "empty file",
    "blank lines only",
    "row missing corrupt",
    "row not JSON",
    "row a list",
    "field a number",
    "lengths differ",
    "answer of many tokens",
    "position out of range",
    "word not in the prompt",
    "logits on an encoder",
    "cosine on a causal LM",
    "per-position over lengths",
    "routes over lengths",
    "routes text with many-token answer",
    "routes text without the wrong token",
]


@pytest.mark.parametrize("case", PROMPT_CASES)
def test_prompt_pairs_are_checked_before_the_model_loads(prompt_cases, case, capsys, no_model_load):
    t, cases = prompt_cases
    argv, words = cases[case]
    before = _digest(t)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and "Traceback" not in err[0], err
    assert _digest(t) == before
