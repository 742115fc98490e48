"""Paged KV cache: equals the contiguous cache exactly; prefix sharing with copy-on-write (docs/pitfalls.md)."""

import random

import pytest
import torch

import attnroute as ar
from attnroute.engine.paged import OutOfBlocks, PagedKVCache, PagedView


def shuffled_pool(n_blocks, block_size, seed=0, **kw):
    """A pool whose free list is in random order, so tables point all over the pool."""
    cache = PagedKVCache(n_blocks, block_size, **kw)
    random.Random(seed).shuffle(cache.free)
    return cache


@pytest.mark.parametrize("block_size", [1, 3, 16, 256])
@pytest.mark.parametrize("T", [1, 47, 48, 256])  # ends mid-block and on a block boundary
def test_paged_attention_equals_contiguous(block_size, T):
    g = torch.Generator().manual_seed(T)
    k, v = torch.randn(1, 2, T, 8, generator=g), torch.randn(1, 2, T, 8, generator=g)
    q = torch.randn(1, 4, 3, 8, generator=g)
    cache = shuffled_pool(-(-T // block_size) + 3, block_size, n_layers=1, kv_heads=2, head_dim=8)
    cache.add_sequence(0)
    half = T // 2
    for lo, hi in ((0, half), (half, T)):  # two appends, the second starting mid-block
        cache.append(0, 0, k[0, :, lo:hi], v[0, :, lo:hi])
        cache.advance(0, hi - lo)
    pk, pv = cache.gather(0, 0)
    assert torch.equal(pk, k) and torch.equal(pv, v)
    assert torch.equal(ar.attend(q, pk, pv, ar.causal()), ar.attend(q, k, v, ar.causal()))


def test_shared_prefix_copy_on_write():
    cache = shuffled_pool(8, 4, n_layers=1, kv_heads=1, head_dim=2)
    cache.add_sequence(0)
    prefix = torch.arange(6, dtype=torch.float32).view(1, 6, 1).expand(1, 6, 2)
    cache.append(0, 0, prefix, prefix)
    cache.advance(0, 6)
    cache.fork(0, 1)  # parallel sampling: both continue from the same 6 tokens
    assert cache.used_blocks() == 2 and cache.tables[0] == cache.tables[1]
    a, b = torch.full((1, 1, 2), 100.0), torch.full((1, 1, 2), 200.0)
    cache.append(0, 0, a, a)
    cache.advance(0, 1)
    cache.append(1, 0, b, b)
    cache.advance(1, 1)
    assert cache.tables[0][0] == cache.tables[1][0]  # the full first block stays shared
    assert cache.tables[0][1] != cache.tables[1][1]  # the partly filled one was copied on write
    k0, _ = cache.gather(0, 0)
    k1, _ = cache.gather(1, 0)
    assert k0[0, 0, :6].equal(prefix[0]) and k1[0, 0, :6].equal(prefix[0])
    assert k0[0, 0, 6, 0] == 100 and k1[0, 0, 6, 0] == 200
    cache.free_sequence(0)
    assert cache.refcount[cache.tables[1][0]] == 1


def test_out_of_blocks_is_clear_and_frees_nothing():
    cache = PagedKVCache(3, 2, n_layers=1, kv_heads=1, head_dim=2)
    cache.add_sequence(0)
    cache.append(0, 0, torch.ones(1, 4, 2), torch.ones(1, 4, 2))
    cache.advance(0, 4)
    before = (list(cache.tables[0]), list(cache.free), list(cache.refcount))
    cache.add_sequence(1)
    with pytest.raises(OutOfBlocks, match="needs 2 more blocks of 2 tokens, 1 are free; nothing was allocated"):
        cache.append(1, 0, torch.ones(1, 3, 2), torch.ones(1, 3, 2))
    assert (cache.tables[0], cache.free, cache.refcount) == before and cache.tables[1] == []


@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_tiny_transformer_generates_from_the_paged_cache(block_size):
    torch.manual_seed(0)
    model = ar.TinyTransformer(
        ar.TinyConfig(vocab=37, d_model=32, n_heads=4, n_kv_heads=2, d_ff=32, max_len=64, positions="rope")
    ).eval()
    prompt = torch.randint(0, 37, (2, 9))
    pool = shuffled_pool(40, block_size, n_layers=2, kv_heads=2, head_dim=8)
    paged = model.generate(prompt, 12, cache=PagedView(pool, [0, 1]))
    assert torch.equal(paged, model.generate(prompt, 12))
    assert pool.lengths[0] == 9 + 11  # the last generated token is never fed back


def test_attention_over_forked_sequences_equals_their_contiguous_copies():
    """Fork, diverge, then attend: each branch reads the shared prefix and only its own tokens."""
    g = torch.Generator().manual_seed(0)
    pool = shuffled_pool(12, 3, n_layers=1, kv_heads=2, head_dim=4)
    pool.add_sequence(0)
    prefix = torch.randn(2, 7, 4, generator=g)
    pool.append(0, 0, prefix, prefix * 2)
    pool.advance(0, 7)
    pool.fork(0, 1)
    tails = {s: torch.randn(2, 4, 4, generator=g) for s in (0, 1)}
    for s, t in tails.items():
        pool.append(s, 0, t, t * 2)
        pool.advance(s, 4)
    q = torch.randn(1, 4, 2, 4, generator=g)  # 4 query heads over 2 kv heads, 2 new queries
    for s, t in tails.items():
        k, v = pool.gather(s, 0)
        whole = torch.cat([prefix, t], dim=1)[None]  # (1, Hkv, 11, D): the contiguous copy
        assert torch.equal(k, whole) and torch.equal(v, whole * 2)
        torch.testing.assert_close(ar.attend(q, k, v, ar.causal()), ar.attend(q, whole, whole * 2, ar.causal()))
