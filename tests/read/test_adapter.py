"""Real models route through attnroute's engine and give transformers' eager logits."""

import pytest
import torch

import attnroute as ar
from attnroute.read.adapter import registered_names, routed


def padded_batch(lm, side):
    tok = lm.tokenizer
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = side
    return tok(
        ["The capital of France is Paris, and the capital of Italy is", "Hi there"], return_tensors="pt", padding=True
    )


@pytest.mark.parametrize("impl", ["eager", "blocked", "sdpa"])
def test_smollm2_left_padded_logits_equal_transformers_eager(smollm2, impl):
    batch = padded_batch(smollm2, "left")
    smollm2.model.set_attn_implementation("eager")
    with torch.no_grad():
        ref = smollm2.model(**batch).logits
        with routed(smollm2, impl=impl) as session:
            ours = smollm2.model(**batch).logits
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(ours[real], ref[real], atol=2e-4, rtol=0)
    assert len(session.calls) == smollm2.n_layers
    assert {c[3] for c in session.calls} == {"bool"}  # the padding mask arrived, as a keep-mask
    assert [c[0] for c in session.calls] == list(range(30))
    assert registered_names() == [] and smollm2.model.config._attn_implementation == "eager"


def test_minilm_right_padded_hidden_states_equal_transformers_eager(minilm):
    batch = padded_batch(minilm, "right")
    minilm.model.set_attn_implementation("eager")
    with torch.no_grad():
        ref = minilm.model(**batch).last_hidden_state
        with routed(minilm, impl="blocked") as session:
            ours = minilm.model(**batch).last_hidden_state
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(ours[real], ref[real], atol=2e-5, rtol=0)
    assert {c[3] for c in session.calls} == {"bool"} and len(session.calls) == 6


def test_causal_mask_arrives_without_padding_and_is_bottom_right(smollm2):
    ids = smollm2.tokenizer("one two three four five six", return_tensors="pt").input_ids
    with torch.no_grad(), routed(smollm2, impl="eager") as session:
        full = smollm2.model(ids).logits
    assert {c[3] for c in session.calls} == {"causal"}
    # perturbing the last token leaves every earlier position unchanged: the future is masked
    ids2 = ids.clone()
    ids2[0, -1] = 42
    with torch.no_grad(), routed(smollm2, impl="eager"):
        other = smollm2.model(ids2).logits
    torch.testing.assert_close(full[:, :-1], other[:, :-1], atol=0, rtol=0)
    assert (full[:, -1] - other[:, -1]).abs().max() > 1e-3


def test_left_padded_row_equals_the_unpadded_sequence(smollm2):
    batch = padded_batch(smollm2, "left")
    with torch.no_grad(), routed(smollm2, impl="blocked"):
        both = smollm2.model(**batch).logits
        n = int(batch["attention_mask"][1].sum())
        alone = smollm2.model(input_ids=batch["input_ids"][1:, -n:]).logits
    torch.testing.assert_close(both[1, -n:], alone[0], atol=2e-4, rtol=0)


def test_interventions_reach_the_model_and_nothing_stays_registered(smollm2):
    ids = smollm2.tokenizer("Hello world, hello", return_tensors="pt").input_ids
    with torch.no_grad():
        with routed(smollm2, impl="eager"):
            clean = smollm2.model(ids).logits
        with routed(smollm2, impl="eager", interventions=[ar.ZeroHead(list(range(9)), layer=3)]):
            ablated = smollm2.model(ids).logits
    assert (clean - ablated).abs().max() > 1e-2
    with pytest.raises(RuntimeError):
        with routed(smollm2):
            raise RuntimeError("boom")
    assert registered_names() == []
