"""The knockout shortcut of `routes --verify` (read/patching/suffix.py): a route cut reruns only its layer on
and only the rows from its query on, reading the base run's earlier keys and values from a KV cache — and
must give the number a rerun of every row gives, on tiny models of several architectures and on SmolLM2."""

from __future__ import annotations

import importlib

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnroute.engine import KnockoutEdges
from attnroute.models import load
from attnroute.read.effects import layer_stack, run_from
from attnroute.read.ground.batches import batch_of, no_cache
from attnroute.read.patching.routes import stream_routes
from attnroute.read.patching.suffix import Suffix, windowed
from tests.read.zoo import build

RA = importlib.import_module("attnroute.read.patching.route_attribution")


def _loss(logits, batch):
    ce = torch.nn.functional.cross_entropy(logits[0, :-1].float(), batch["input_ids"][0, 1:], reduction="none")
    return ce.mean()[None]


def _setup(loaded, ids, recorded=True):
    """The shortcut built on what the streaming pass recorded (keys, values, logits), or by its own forward."""
    batch = batch_of(loaded, ids)
    _, stored, base = stream_routes(loaded, batch, {}, 1, no_cache(loaded), record_blocks=True)
    assert base is not None and len(base[0]) == loaded.n_layers
    blocks = layer_stack(loaded)
    value = lambda lg, copies=1: _loss(lg, batch)  # noqa: E731  (metric() runs one copy)
    suffix = Suffix(
        loaded,
        batch,
        stored,
        blocks,
        value=value,
        kwargs=no_cache(loaded),
        last_only=False,
        base=base if recorded else None,
    )
    return batch, stored, blocks, suffix


def _full(loaded, batch, stored, blocks, layer, cut):
    out = run_from(
        loaded, layer, stored, batch, interventions=cut, copies=1, blocks=blocks, impl="auto", **no_cache(loaded)
    )
    return _loss(out.logits, batch)


@pytest.fixture(scope="module", params=["llama", "gemma", "gpt2", "gpt_neox", "cohere"])
def tiny(request, tmp_path_factory):
    loaded = load(str(build(request.param, tmp_path_factory.mktemp("zoo"))))
    ids = torch.randint(1000, 5000, (1, 23), generator=torch.Generator().manual_seed(0))
    return loaded, ids, _setup(loaded, ids)


@given(layer=st.integers(0, 1), row=st.integers(0, 22), key=st.integers(0, 22), head=st.integers(0, 3))
def test_a_cut_rerun_on_its_rows_equals_a_rerun_of_every_row(tiny, layer, row, key, head):
    loaded, ids, (batch, stored, blocks, suffix) = tiny
    key = min(key, row)  # a causal route: the key at or before the query
    cut = [KnockoutEdges([row], [key], heads=[head], layer=layer)]
    got, want = suffix.metric(layer, row, cut), _full(loaded, batch, stored, blocks, layer, cut)
    assert float((got - want).abs().max()) <= 1e-5 * max(1.0, float(want.abs().max()))  # fp32


@given(
    cuts=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 22), st.integers(0, 22), st.integers(0, 3)), max_size=4)
)
def test_cuts_sharing_one_forward_as_copies_each_equal_their_own_rerun(tiny, cuts):
    """Suffix.metrics: several knockouts in one forward, each on its copy's batch items, rerun from the earliest
    layer and row any of them needs — each equals its own rerun of every row from its layer (fp32)."""
    loaded, ids, (batch, stored, blocks, _) = tiny
    losses = lambda lg, copies=1: torch.cat([_loss(lg[c : c + 1], batch) for c in range(copies)])  # noqa: E731
    suffix = Suffix(loaded, batch, stored, blocks, value=losses, kwargs=no_cache(loaded), last_only=False)
    cuts = [(layer, row, min(key, row), head) for layer, row, key, head in cuts] or [(1, 22, 0, 0)]

    def made(layer, row, key, head):
        return lambda items: [KnockoutEdges([row], [key], heads=[head], layer=layer, batch=items)]

    got = suffix.metrics(min(c[0] for c in cuts), min(c[1] for c in cuts), [made(*c) for c in cuts])
    for (layer, row, key, head), g in zip(cuts, got, strict=True):
        want = _full(loaded, batch, stored, blocks, layer, [KnockoutEdges([row], [key], heads=[head], layer=layer)])
        assert float((g - want).abs().max()) <= 1e-5 * max(1.0, float(want.abs().max()))


def test_the_streaming_pass_records_what_a_kv_cache_of_the_base_run_holds(tiny):
    """The knockouts read keys, values and logits recorded by route attribution's streaming pass instead of
    one more forward: they must be the cache transformers fills (the blocked engine against SDPA: fp32)."""
    loaded, ids, (batch, stored, blocks, recorded) = tiny
    own = _setup(loaded, ids, recorded=False)[3]
    for (k, v), (k2, v2) in zip(recorded.kv, own.kv, strict=True):
        torch.testing.assert_close(k, k2, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(v, v2, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(recorded.logits, own.logits, atol=1e-4, rtol=1e-4)


def test_on_smollm2_the_shortcut_checks_itself_and_agrees(smollm2):
    ids = smollm2.tokenizer(
        "The cat sat on the mat because the mat was warm and the cat was cold.", return_tensors="pt"
    ).input_ids
    batch, stored, blocks, suffix = _setup(smollm2, ids)
    with torch.no_grad():
        base = _loss(smollm2.model(**batch).logits, batch)
    assert suffix.check(base)["used"]
    for layer, row, key in ((20, 15, 0), (5, 9, 0), (29, 14, 1)):  # routes to the first tokens hold weight
        cut = [KnockoutEdges([row], [key], heads=[2], layer=layer)]
        got, want = suffix.metric(layer, row, cut), _full(smollm2, batch, stored, blocks, layer, cut)
        assert float((got - want).abs().max()) < 1e-5
        assert float((got - base).abs().max()) > 0  # the cut changed something: not two copies of the base


def test_short_prompt_knockouts_share_forwards_and_equal_one_at_a_time(smollm2):
    """routes --verify on a short pair: the knockouts of a round share one forward as copies (their rows fit
    SHARED_TOKENS) and equal the same knockouts run one per forward (fp32: 2.3e-5 measured on a 1.9 logit
    difference), and meta says how many forwards they took."""
    pair = dict(clean=IOI[0], corrupt=IOI[1], answer=" Mary", wrong=" John")
    pair["no_checkpoint"] = True  # the second run must measure, not resume the first's (the same settings)
    shared = RA.route_attribution(smollm2, top=12, verify=4, **pair)
    try:
        RA.SHARED_TOKENS, alone = 0, None
        alone = RA.route_attribution(smollm2, top=12, verify=4, **pair)
    finally:
        RA.SHARED_TOKENS = 256
    a, b = shared.to_dict(), alone.to_dict()
    measured = [i for i, r in enumerate(b["routes"]) if r.get("exact") is not None]
    assert measured and [i for i, r in enumerate(a["routes"]) if r.get("exact") is not None] == measured
    for i in measured:
        x, y = a["routes"][i]["exact"], b["routes"][i]["exact"]
        assert abs(x - y) <= 5e-5 * max(1.0, abs(y))
    assert b["meta"]["restart"]["knockout_forwards"] == len(measured)
    assert a["meta"]["restart"]["knockout_forwards"] < len(measured)


IOI = (
    "When Mary and John went to the store, John gave a drink to",
    "When Mary and John went to the store, Mary gave a drink to",
)


def test_a_window_model_is_never_shortcut_and_says_why(tmp_path):
    """A sliding-window layer's cache keeps only its window: such a model reruns every row, said in meta."""
    from types import SimpleNamespace

    mistral, llama = (load(str(build(a, tmp_path))) for a in ("mistral", "llama"))
    assert windowed(mistral) and not windowed(llama)
    meta = SimpleNamespace(restart={"used": True})
    run = RA.RouteRun(mistral, {}, None, {}, {}, None)
    assert RA._suffix(run, {}, [], ([], None), meta) is None
    assert meta.restart["suffix"]["used"] is False and "sliding windows" in meta.restart["suffix"]["reason"]


def test_a_model_whose_cache_holds_other_tensors_reruns_every_row_and_its_knockouts_stay_exact(tmp_path):
    """DeepSeek's latent attention caches its compressed kv and rotary key part, not the keys and values it
    attends with: filled with those, the shortcut's cache crashed the first knockout. Now it is not taken (said
    in meta) and each verified route equals a plain knockout of every row (no attnroute restart)."""
    import attnroute as ar
    from attnroute.engine import KnockoutEdges
    from attnroute.read.adapter import routed

    loaded = load(str(build("deepseek_v3", tmp_path)))
    text = "the cat sat on the mat and the"
    r = ar.route_attribution(loaded, text, metric="loss", top=6, verify=3).to_dict()
    said = r["meta"]["restart"]["suffix"]
    assert said["used"] is False and "caches keys of shape" in said["reason"]
    ids = loaded.tokenizer(text, return_tensors="pt").input_ids

    def loss(interventions=()):
        with torch.no_grad(), routed(loaded, interventions=interventions, impl="eager"):
            logits = loaded.model(input_ids=ids).logits[0]
        return float(torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:]))

    for route in [x for x in r["routes"] if x["exact"] is not None]:
        cut = KnockoutEdges([route["query"]], [route["key"]], [route["head"]], layer=route["layer"])
        assert route["exact"] == pytest.approx(loss([cut]) - loss(), abs=1e-5)


def test_a_mask_transformers_builds_after_a_cache_is_read_as_causal_only_when_it_is():
    """After a KV cache transformers hands a bool mask [B, 1, Tq, Tk]; the adapter calls it causal() (so SDPA
    may skip the future) only when every cell is bottom-right causal — one cell off and it stays a bool mask."""
    from attnroute.read.adapter import _draws_causal

    grid = torch.ones(5, 9, dtype=torch.bool).tril(4)[None, None].expand(2, 1, 5, 9).clone()
    assert _draws_causal(grid, 5, 9)
    assert not _draws_causal(grid, 9, 5) and not _draws_causal(grid[..., :-1], 5, 8)
    off = grid.clone()
    off[1, 0, 2, 0] = False  # a padded key in the second prompt
    assert not _draws_causal(off, 5, 9)
    assert not _draws_causal(torch.ones(2, 1, 5, 9, dtype=torch.bool), 5, 9)  # bidirectional


def test_the_cached_mask_is_checked_once_per_forward_not_once_per_layer(tiny, monkeypatch):
    """transformers hands every layer of a forward the same mask tensor: the cell-by-cell check runs once."""
    import attnroute.read.adapter as adapter

    loaded, ids, (batch, stored, blocks, suffix) = tiny
    calls = []
    real = adapter._draws_causal
    monkeypatch.setattr(adapter, "_draws_causal", lambda *a: calls.append(a[1:]) or real(*a))
    suffix.metric(0, 5, [])
    assert len(calls) == 1 and loaded.n_layers > 1
