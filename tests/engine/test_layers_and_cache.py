"""Layers and the contiguous KV cache: decoding equals recomputation (docs/pitfalls.md)."""

import pytest
import torch

import attnroute as ar


def tiny(positions="learned", n_kv_heads=None, d_ff=32, seed=0):
    torch.manual_seed(seed)
    return ar.TinyTransformer(
        ar.TinyConfig(
            vocab=37,
            d_model=32,
            n_layers=2,
            n_heads=4,
            n_kv_heads=n_kv_heads,
            d_ff=d_ff,
            max_len=64,
            positions=positions,
        )
    ).eval()


@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "rope"])
@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
def test_cached_decoding_equals_full_recomputation_token_by_token(positions, n_kv_heads):
    model = tiny(positions, n_kv_heads)
    prompt = torch.randint(0, 37, (2, 7), generator=torch.Generator().manual_seed(1))
    cached = model.generate(prompt, 12, use_cache=True)
    full = model.generate(prompt, 12, use_cache=False)
    assert torch.equal(cached, full)
    with torch.no_grad():  # logits too, position by position
        cache = model.new_cache(2)
        step_logits = [model(cached[:, :7], cache=cache)[:, -1]]
        for t in range(7, 18):
            step_logits.append(model(cached[:, t : t + 1], cache=cache)[:, -1])
        ref = model(cached[:, :18])[:, 6:]
        torch.testing.assert_close(torch.stack(step_logits, 1), ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("k", [1, 3, 6])
def test_chunked_prefill_equals_one_shot(k):
    model = tiny("rope", 2)
    tokens = torch.randint(0, 37, (1, 20), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        one_shot = model(tokens)[:, -1]
        cache = model.new_cache(1)
        model(tokens[:, : 20 - k], cache=cache)
        sizes, t = [], 20 - k
        while t < 20:  # chunks of 1 … k tokens
            n = min(len(sizes) % k + 1, 20 - t)
            last = model(tokens[:, t : t + n], cache=cache)[:, -1]
            sizes.append(n)
            t += n
    torch.testing.assert_close(last, one_shot, atol=1e-5, rtol=0)
    assert sum(sizes) == k


def test_cache_overflow_is_a_clear_error_and_keeps_contents():
    cache = ar.KVCache(1, 1, 2, 4, max_len=5)
    cache.append(0, torch.ones(1, 2, 4, 4), torch.ones(1, 2, 4, 4))
    with pytest.raises(ValueError, match="KVCache full: 4 cached \\+ 2 new > max_len=5"):
        cache.append(0, torch.ones(1, 2, 2, 4), torch.ones(1, 2, 2, 4))
    assert cache.length() == 4 and cache.k[0][:, :, :4].eq(1).all()


def test_multihead_attention_self_cross_gqa_mqa_and_no_out_proj():
    torch.manual_seed(0)
    x, ctx = torch.randn(2, 5, 16), torch.randn(2, 9, 16)
    for hkv in (4, 2, 1):
        mha = ar.MultiHeadAttention(16, 4, hkv)
        assert mha(x, mask=ar.causal()).shape == (2, 5, 16)
        assert mha(x, context=ctx).shape == (2, 5, 16)
    bare = ar.MultiHeadAttention(16, 4, 2, head_dim=6, out_proj=False)
    out = bare(x, context=ctx)
    assert out.shape == (2, 5, 24)
    # the layer is exactly project -> attend -> merge heads
    with torch.no_grad():  # the list reference carries no gradients (it refuses tensors that require them)
        q = ar.project(x, bare.q_proj.weight, None, 4)
        k = ar.project(ctx, bare.k_proj.weight, None, 2)
        v = ar.project(ctx, bare.v_proj.weight, None, 2)
    ref = ar.attend(q, k, v, impl="reference").transpose(1, 2).reshape(2, 5, 24)
    torch.testing.assert_close(out, ref.float(), atol=1e-5, rtol=0)


def test_module_runs_probes_per_layer_and_interventions_change_output():
    model = tiny()
    tokens = torch.randint(0, 37, (1, 12))
    stats = [ar.RowStats(layer=i) for i in range(2)]
    with torch.no_grad():
        base = model(tokens, impl="eager", probes=stats)
        zeroed = model(tokens, impl="blocked", interventions=[ar.ZeroHead([0, 1, 2, 3])])
        again = model(tokens, impl="blocked")
    assert stats[0].entropy.shape == (1, 4, 12) and stats[1].entropy.shape == (1, 4, 12)
    torch.testing.assert_close(base, again, atol=1e-5, rtol=0)
    assert (zeroed - base).abs().max() > 1e-3


def test_tiny_config_validation():
    with pytest.raises(ValueError, match="positions"):
        ar.TinyTransformer(ar.TinyConfig(positions="alibi"))
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        ar.MultiHeadAttention(16, 4, 3)
    with pytest.raises(ValueError, match="exceed max_len"):
        tiny().generate(torch.zeros(1, 60, dtype=torch.long), 10)
