"""A PEFT (LoRA) model is read through its base model with the adapters applied, exactly as the merged model
would be, and left as it was; compiled and quantized models are refused by name (models/adapters.py)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import attnroute as ar
from attnroute.errors import InputError
from attnroute.models import ModelLoadError
from tests.models.test_door import PAIRS, TEXT, _state, _user_object, broken_metric
from tests.read.zoo import build

peft = pytest.importorskip("peft")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build("llama", tmp_path_factory.mktemp("peft"))


def _lora(path, **extra):
    """A LoRA on q, v and o with random B (PEFT's default B = 0 would make the adapter a no-op)."""
    torch.manual_seed(0)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"], **extra)
    config.init_lora_weights = False
    return peft.get_peft_model(_user_object(path), config).eval()


def _weights(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _merged(model):
    return copy.deepcopy(model).merge_and_unload()


VERBS = {
    "heads": lambda m: ar.read_heads(m, TEXT, exact=0, ablation=False).columns["entropy"],
    "patch": lambda m: [(r["estimate"], r["delta"] or 0.0) for r in ar.patch(m, PAIRS, exact=3).to_dict()["rows"]],
    "why": lambda m: ar.why(m, TEXT, head="L1.H1", query="11", key="4").to_dict()["score"],
    "knockout": lambda m: ar.knockout(m, TEXT, source="cat", target="mat", window=1).to_dict()["verdict"]["lines"],
}


@pytest.mark.parametrize("verb", VERBS)
def test_a_lora_model_reads_as_its_merged_model_and_is_left_as_it_was(tiny_dir, verb):
    model = _lora(tiny_dir)
    ids = torch.tensor([[5, 6, 7, 8, 5, 6, 7]])
    before, weights, logits = _state(model), _weights(model), model(input_ids=ids).logits
    got = VERBS[verb](model)
    assert _state(model) == before
    after = _weights(model)
    assert all(torch.equal(after[n], w) for n, w in weights.items())  # every weight bit for bit
    assert all(not m.merged for m in model.modules() if hasattr(m, "merged_adapters"))
    assert torch.equal(model(input_ids=ids).logits, logits)
    want = VERBS[verb](_merged(model))
    if verb == "knockout":
        assert got == want
    else:
        np.testing.assert_allclose(np.asarray(got, float), np.asarray(want, float), rtol=1e-5, atol=1e-6)


def test_the_adapters_are_read_not_the_base_weights_alone(tiny_dir):
    """Without the view the tuner layers' .weight is the base W: the reading would be the base model's."""
    model = _lora(tiny_dir)
    got = ar.read_heads(model, TEXT, exact=0, ablation=False).columns["entropy"]
    base = ar.read_heads(_user_object(tiny_dir), TEXT, exact=0, ablation=False).columns["entropy"]
    assert np.abs(np.asarray(got) - np.asarray(base)).max() > 1e-3


def test_adapters_switched_off_read_the_base_model(tiny_dir):
    model = _lora(tiny_dir)
    with model.disable_adapter():
        got = ar.read_heads(model, TEXT, exact=0, ablation=False).columns["entropy"]
    base = ar.read_heads(_user_object(tiny_dir), TEXT, exact=0, ablation=False).columns["entropy"]
    np.testing.assert_allclose(got, base, rtol=1e-6, atol=1e-7)


def test_an_interrupted_reading_puts_the_weights_back(tiny_dir):
    model = _lora(tiny_dir)
    weights = _weights(model)
    with pytest.raises((ZeroDivisionError, InputError)):
        ar.patch(model, PAIRS, metric=broken_metric, exact=0)
    assert all(torch.equal(_weights(model)[n], w) for n, w in weights.items())
    assert all(not m.merged for m in model.modules() if hasattr(m, "merged_adapters"))


def test_a_prompt_learning_adapter_is_refused_by_name(tiny_dir):
    config = peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4)
    model = peft.get_peft_model(_user_object(tiny_dir), config)
    with pytest.raises(ModelLoadError) as e:
        ar.read_heads(model, TEXT, ablation=False)
    assert "prompt-learning" in str(e.value) and "\n" not in str(e.value) and e.value.field == "model"


def test_a_compiled_model_is_refused_naming_what_to_pass(tiny_dir):
    compiled = torch.compile(_user_object(tiny_dir))
    with pytest.raises(InputError) as e:
        ar.read_heads(compiled, TEXT, ablation=False)
    assert "_orig_mod" in str(e.value) and e.value.field == "model"


def test_a_model_holding_integer_weights_is_refused_as_quantized(tiny_dir):
    model = _user_object(tiny_dir)
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().to(torch.int8), requires_grad=False)
    with pytest.raises(ModelLoadError) as e:
        ar.load_model(model)
    assert "quantized" in str(e.value) and "\n" not in str(e.value)


def _numbers(d) -> list[float]:
    """Every number in a result's rows, in order (what two readings of the same weights must agree on)."""
    if "rows" not in d:  # composition: its q, k and v tables
        return [float(v) for c in "qkv" for v in np.ravel(np.array(d[c], dtype=float)) if not np.isnan(v)]
    out = []
    for row in d["rows"]:
        out += [float(v) for v in row.values() if isinstance(v, int | float) and not isinstance(v, bool)]
    return out


@pytest.mark.parametrize("verb", ["composition", "circuit"])
def test_the_weight_reading_verbs_read_the_merged_weights(tiny_dir, verb):
    """composition reads q/k/v/o weights only; circuit slices them: both failed or misread without the view."""
    call = {
        "composition": lambda m: ar.composition(m),
        "circuit": lambda m: ar.circuit(m, PAIRS, exact=0, ig_steps=1),
    }[verb]
    model = _lora(tiny_dir)
    weights = _weights(model)
    got = _numbers(call(model).to_dict())
    assert all(torch.equal(_weights(model)[n], w) for n, w in weights.items())
    np.testing.assert_allclose(got, _numbers(call(_merged(model)).to_dict()), rtol=1e-5, atol=1e-6)
    assert not np.allclose(got, _numbers(call(_user_object(tiny_dir)).to_dict()), rtol=1e-3, atol=1e-4)
