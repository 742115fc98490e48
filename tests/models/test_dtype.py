"""The dtype a model is read in: loaded straight into it by name or path (--dtype, dtype=), never cast when it
is the model you hold, said in every result's model name, and counted by the size check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnroute as ar
from attnroute.cli import main
from attnroute.engine.tolerance import READ_TOLERANCE
from attnroute.errors import InputError
from tests.read.zoo import build

TEXT = "The cat sat on the mat. The cat sat on the"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build("llama", tmp_path_factory.mktemp("dtype"))


def _dtypes(loaded) -> set:
    return {p.dtype for p in loaded.model.parameters()}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", torch.bfloat16])
def test_a_path_loads_straight_into_the_dtype_asked_and_says_it(tiny_dir, dtype):
    loaded = ar.load_model(str(tiny_dir), dtype=dtype)
    name = str(dtype).removeprefix("torch.")
    assert _dtypes(loaded) == {getattr(torch, name)} and loaded.name.endswith(f"({name})")


def test_auto_reads_a_path_in_float32_under_its_own_name(tiny_dir):
    loaded = ar.load_model(str(tiny_dir))
    assert _dtypes(loaded) == {torch.float32} and loaded.name == "llama"


@pytest.mark.parametrize("bad", ["banana", "float64", torch.int8, 16])
def test_a_dtype_attnroute_cannot_read_in_is_refused_naming_dtype(tiny_dir, bad):
    with pytest.raises(InputError) as e:
        ar.load_model(str(tiny_dir), dtype=bad)
    assert e.value.field == "dtype" and "\n" not in str(e.value)


def test_the_model_you_hold_is_never_cast(tiny_dir):
    from transformers import AutoModelForCausalLM

    held = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.bfloat16).eval()
    with pytest.raises(InputError) as e:
        ar.load_model(held, dtype="float32")
    assert e.value.field == "dtype" and "never casts" in str(e.value)
    assert {p.dtype for p in held.parameters()} == {torch.bfloat16}
    assert ar.load_model(held, dtype="bfloat16").model is held and ar.load_model(held).model is held


def test_the_size_check_counts_the_dtype_the_weights_are_loaded_into(tiny_dir, monkeypatch):
    from attnroute.models import safety

    n = sum(p.numel() for p in ar.load_model(str(tiny_dir)).model.parameters())
    monkeypatch.setattr(safety, "available_memory", lambda: 3 * n)  # between 2 and 4 bytes a parameter
    assert _dtypes(ar.load_model(str(tiny_dir), dtype="bfloat16")) == {torch.bfloat16}
    with pytest.raises(InputError) as e:
        ar.load_model(str(tiny_dir), dtype="float32")
    assert "in float32" in str(e.value)


def test_the_cli_takes_dtype_and_refuses_a_bad_one_in_one_line(tiny_dir, tmp_path, capsys):
    out = tmp_path / "h.json"
    argv = ["heads", "--model", str(tiny_dir), "--text", TEXT, "--no-ablation", "--no-verify"]
    assert main([*argv, "--dtype", "bfloat16", "--json", str(out)]) == 0
    assert '"model": "llama (bfloat16)"' in out.read_text()
    capsys.readouterr()
    assert main([*argv, "--dtype", "int4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --dtype")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_smollm2_read_in_low_precision_agrees_with_float32_within_the_stated_tolerance(smollm2, dtype):
    """The real-model case per dtype: the bundled GGUF dequantized once (float32, cached), loaded into the dtype."""
    light = dict(ablation=False, verify=False, seeds=(0,), stimulus_batch=1)
    want = ar.read_heads(smollm2, TEXT, **light)
    got = ar.read_heads(ar.load_model("smollm2", dtype=dtype), TEXT, **light)
    tol = READ_TOLERANCE[getattr(torch, dtype)]["weights"]
    for c in ("entropy", "sink_mass", "prev_token", "induction"):
        assert np.nanmax(np.abs(np.asarray(got.columns[c]) - np.asarray(want.columns[c]))) <= tol, c
    assert got.model == f"smollm2 ({dtype})"


def test_a_bundled_gguf_read_in_bf16_comes_from_its_own_cache_entry_with_the_float32_values_rounded(smollm2):
    """Loading the float32 cache into bf16 read every float32 weight on the way (SmolLM2's load peaked at
    1.15 GiB, 0.46 GiB from a bf16 entry): a half-precision read has its own entry, written once from the
    float32 one, holding exactly the float32 values rounded to the dtype."""
    from attnroute.bundled import cache_dir, model_path
    from attnroute.models.caches import content_key

    half = ar.load_model("smollm2", dtype="bfloat16")
    gguf = model_path("smollm2")
    entry = cache_dir() / f"{gguf.stem}-{content_key(gguf)}-bfloat16"
    assert (entry / "attnroute-complete").exists() and (entry / "model.safetensors").exists()
    want = dict(smollm2.model.named_parameters())
    for name, p in half.model.named_parameters():
        assert p.dtype == torch.bfloat16 and torch.equal(p, want[name].to(torch.bfloat16)), name


def test_a_bf16_cache_entry_shares_the_tokenizer_the_checks_before_the_load_read():
    """The checks before the weights load read the float32 entry's tokenizer; the bf16 entry read its own copy,
    a second 0.3 GiB for Gemma 3 (its bf16 patch peaked 0.27 GiB above the float32 entry cast to bf16)."""
    from attnroute.models import facts_of
    from attnroute.models.directory import _directory_tokenizer
    from attnroute.models.facts import _facts

    _directory_tokenizer.cache_clear()  # as in a fresh command: other tests' loads may have pushed it out
    _facts.cache_clear()
    before = facts_of("smollm2").tokenizer
    assert ar.load_model("smollm2", dtype="bfloat16").tokenizer is before


@pytest.mark.parametrize("cls", ["LlamaTokenizer", "GPT2Tokenizer"])
def test_a_tokenizer_attnroute_reads_keeps_no_python_copy_of_its_vocabulary(tmp_path, cls):
    """transformers' BPE classes keep the vocabulary and merges they built their Rust backend from (Gemma 3's:
    0.13 GiB): a tokenizer attnroute reads from a directory drops them, and encodes and decodes as before."""
    import transformers

    from attnroute.models.directory import directory_tokenizer

    chars = "abcdehlmnorst▁Ġ "
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("a", "t"), ("Ġ", "c")]
    for m in merges:
        vocab.setdefault("".join(m), len(vocab))
    getattr(transformers, cls)(vocab=vocab, merges=merges, unk_token="<unk>").save_pretrained(tmp_path)
    fresh = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert type(fresh).__name__ == cls and len(fresh._vocab) == len(vocab)  # what is shed exists to begin with
    ours = directory_tokenizer(tmp_path)
    assert not hasattr(ours, "_vocab") and not hasattr(ours, "_merges")
    for text in ["the cat sat", " at the  hat", "héllo wörld", ""]:
        ids = fresh(text)["input_ids"]
        assert ours(text)["input_ids"] == ids and ours.decode(ids) == fresh.decode(ids)
    assert ours.get_vocab() == fresh.get_vocab()
