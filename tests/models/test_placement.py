"""Where and in what attnroute loads a model (models/placement.py): a device map with layers offloaded to disk
reads as the plain model; a device torch does not see, or one no GPU run has verified, is refused by name; a
model the user holds is never moved."""

from __future__ import annotations

import gc
import json

import numpy as np
import pytest
import torch

import attnroute as ar
from attnroute.cli import main
from attnroute.errors import InputError
from attnroute.models import placement
from tests.models.test_door import PAIRS, TEXT, _user_object
from tests.read.zoo import build


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build("llama", tmp_path_factory.mktemp("placement"))


def _map(tmp_path, disk: str = "model.layers.1") -> str:
    where = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "cpu", "model.norm": "cpu"}
    where |= {"model.rotary_emb": "cpu", "lm_head": "cpu", disk: "disk"}
    path = tmp_path / "map.json"
    path.write_text(json.dumps(where))
    return str(path)


def test_a_device_map_file_with_a_layer_on_disk_reads_as_the_plain_model(tiny_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    loaded = ar.load_model(str(tiny_dir), device_map=_map(tmp_path))
    assert any(p.device.type == "meta" for p in loaded.model.parameters())  # layer 1 is on disk
    folders = list((tmp_path / "cache" / "attnroute" / "offload").iterdir())
    assert len(folders) == 1
    got = ar.read_heads(loaded, TEXT, exact=2)
    want = ar.read_heads(str(tiny_dir), TEXT, exact=2)
    for c in ("entropy", "sink_mass", "prev_token"):
        np.testing.assert_allclose(got.columns[c], want.columns[c], rtol=1e-6, atol=1e-7)
    a = [r["estimate"] for r in ar.patch(loaded, PAIRS, exact=0).to_dict()["rows"]]
    b = [r["estimate"] for r in ar.patch(str(tiny_dir), PAIRS, exact=0).to_dict()["rows"]]
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    del loaded, got
    gc.collect()
    assert not folders[0].exists()  # the offload folder goes with the model


def test_a_named_strategy_loads_every_layer_where_accelerate_puts_it(tiny_dir):
    loaded = ar.load_model(str(tiny_dir), device_map="auto")  # this machine has no GPU: all on the CPU
    assert {p.device.type for p in loaded.model.parameters()} == {"cpu"}


@pytest.mark.parametrize(
    ("kwargs", "field", "said"),
    [
        ({"device": "tpu"}, "device", "cpu, cuda, cuda:N, mps or auto"),
        ({"device": "cuda:7"}, "device", "CUDA device"),
        ({"device_map": "everywhere"}, "device_map", "balanced"),
        ({"device_map": {"model": "gpu"}}, "device_map", "entry 'model'"),
        ({"device_map": "missing.json"}, "device_map", "cannot be read"),
    ],
)
def test_a_placement_that_cannot_be_honoured_is_refused_by_name_before_loading(tiny_dir, kwargs, field, said):
    with pytest.raises(InputError) as e:
        ar.load_model(str(tiny_dir), **kwargs)
    assert e.value.field == field and said in str(e.value) and "\n" not in str(e.value)


def test_auto_is_the_cpu_where_torch_sees_no_accelerator(tiny_dir):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: auto picks it")
    assert placement.resolve_device("auto") == "cpu"
    assert {p.device.type for p in ar.load_model(str(tiny_dir), device="auto").model.parameters()} == {"cpu"}


def test_cuda_runs_only_once_verified_or_when_told(monkeypatch):
    """A CUDA device torch sees is refused until a GPU run has verified the verbs there, unless the user sets
    ATTNROUTE_UNVERIFIED_DEVICES=1 (what make gpu-check sets)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.delenv(placement.UNVERIFIED, raising=False)
    with pytest.raises(InputError) as e:
        placement.resolve_device("cuda")
    assert "gpu-check" in str(e.value) and placement.UNVERIFIED in str(e.value)
    monkeypatch.setenv(placement.UNVERIFIED, "1")
    assert placement.resolve_device("cuda") == "cuda:0" and placement.resolve_device("cuda:1") == "cuda:1"
    assert placement.resolve_map({"model.layers.0": 1, "lm_head": "cpu"}) == {
        "model.layers.0": "cuda:1",
        "lm_head": "cpu",
    }


def test_no_verb_asks_for_a_device_unless_told():
    """A verb's device is unset by default: a model you hold on a GPU is read there, not refused as "asked cpu"."""
    for settings in (ar.HeadsSettings, ar.PatchSettings, ar.CircuitSettings, ar.WhySettings, ar.KnockoutSettings):
        assert settings.default("device") is None and settings.default("device_map") is None


def test_a_model_you_hold_is_never_moved(tiny_dir):
    obj = _user_object(tiny_dir)
    assert ar.load_model(obj, device="cpu").model is obj
    with pytest.raises(InputError) as e:
        ar.load_model(obj, device_map="auto")
    assert e.value.field == "device_map" and "where it is" in str(e.value)


def test_the_command_line_takes_a_device_map_file_and_refuses_a_device_it_cannot_use(tiny_dir, tmp_path, capsys):
    out = tmp_path / "heads.json"
    assert main(["heads", "--model", str(tiny_dir), "--device-map", _map(tmp_path), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["model"]
    capsys.readouterr()
    assert main(["heads", "--model", str(tiny_dir), "--device", "cuda:3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "device" in err[0] and "Traceback" not in err[0]


@pytest.fixture(scope="module")
def bf16_dir(tmp_path_factory):
    """A checkpoint stored in bfloat16, as most 7B models on the hub are."""
    from transformers import AutoModelForCausalLM

    src = build("llama", tmp_path_factory.mktemp("bf16src"))
    out = tmp_path_factory.mktemp("bf16")
    AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16).save_pretrained(out)
    for f in src.iterdir():
        if f.name.startswith(("tokenizer", "vocab", "special")):
            (out / f.name).write_bytes(f.read_bytes())
    return out


def test_auto_reads_a_checkpoint_in_the_dtype_it_stores_and_routes_computes_on_it_in_float32(bf16_dir):
    assert ar.load_model(str(bf16_dir)).dtype == torch.bfloat16
    assert ar.load_model(str(bf16_dir), dtype="float32").dtype == torch.float32
    heads = ar.read_heads(str(bf16_dir), TEXT, exact=0, ablation=False)
    assert heads.to_dict()["model"].endswith("(bfloat16)")
    why = ar.why(str(bf16_dir), TEXT, head="L1.H1", query="11", key="4")  # reads bf16 (its checks at bf16's rounding)
    assert why.to_dict()["model"].endswith("(bfloat16)")
    run = dict(metric="loss", layers=[0], no_checkpoint=True, progress=False)
    routes = ar.routes(str(bf16_dir), TEXT, **run)  # the stored bf16 weights, read in float32 arithmetic
    assert routes.to_dict()["model"].endswith("(bfloat16)")
    assert routes.meta.arithmetic == {"weights": "bfloat16", "computes_in": "float32"}
    loaded32 = ar.routes(str(bf16_dir), TEXT, dtype="float32", **run)  # the same weights, loaded into float32
    got, want = ([(r["estimate"], r["exact"]) for r in x.routes] for x in (routes, loaded32))
    np.testing.assert_allclose(np.array(got, float), np.array(want, float), rtol=1e-4, atol=1e-6)


def test_the_bundled_models_stay_float32_under_auto():
    assert ar.load_model("smollm2").dtype == torch.float32  # the GGUF's exact float32 cache
