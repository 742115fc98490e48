"""Activation patching against an independent implementation written here with plain PyTorch hooks.

The reference never routes through attnroute: it runs the model's own attention (its eager path), records
the input of the output projection (each head's slice of it is the head's output) or the outputs of
q_proj / k_proj / v_proj, and replays one slice at a time with forward (pre-)hooks — one full forward per
component, what a user would write with TransformerLens-style hooks. attnroute's patch() batches copies
and restarts from the patched layer; the two must agree to 1e-5 in fp32.
"""

import contextlib

import numpy as np
import pytest
import torch

from attnroute.models import load
from attnroute.promptset import PromptPair
from attnroute.read.ground.metrics import cosine, logit_diff
from attnroute.read.patching import patch

from .zoo import build

PAIRS = [
    PromptPair(
        "When Mary and John went to the store, John gave a drink to",
        "When Mary and John went to the store, Mary gave a drink to",
        " Mary",
        " John",
    ),
    PromptPair(
        "When Tom and Anna went to the store, Anna gave a drink to",
        "When Tom and Anna went to the store, Tom gave a drink to",
        " Tom",
        " Anna",
        row=2,
    ),
]


@contextlib.contextmanager
def eager(loaded):
    previous = loaded.model.config._attn_implementation
    loaded.model.set_attn_implementation("eager")
    try:
        yield
    finally:
        loaded.model.set_attn_implementation(previous)


def _ids(loaded, texts):
    from attnroute.read.ground.prompts import encode

    return torch.stack([encode(loaded.tokenizer, loaded.kind, t) for t in texts])


def _forward(loaded, ids, last_only=False):
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if loaded.seq2seq:
        start = int(loaded.model.config.decoder_start_token_id or 0)
        batch["decoder_input_ids"] = torch.full((ids.shape[0], 1), start, dtype=torch.long)
    if last_only and loaded.causal:  # the output head on the last position: what the metric reads
        batch["logits_to_keep"] = 1
    return loaded.model(**batch)


def _read(loaded, res):
    """What the metric reads: logits, or an encoder's mean-pooled embedding (every row is real: no padding)."""
    return res.logits if loaded.kind != "encoder" else res.last_hidden_state.mean(1)


@torch.no_grad()
def reference_head_patching(loaded, clean, corrupt, metric, batch_fields, layers=None):
    """M(corrupt run with head h of layer l's output taken from the clean run), [L, H, B], by hooks; only the
    rows of ``layers`` when given (the others stay NaN)."""
    L, H = loaded.n_layers, loaded.n_heads
    recorded = {}
    projs = loaded.out_projections
    hooks = [
        p.register_forward_pre_hook(lambda m, a, l=l: recorded.__setitem__(l, a[0].detach()))
        for l, p in enumerate(projs)
    ]
    with eager(loaded):
        _forward(loaded, clean)
    for h in hooks:
        h.remove()
    B = clean.shape[0]
    out = np.full((L, H, B), np.nan)
    below = _corrupt_layer_outputs(loaded, corrupt)  # a decoder-only LM: layers below l are not rerun
    # one forward per layer: its H patched copies of the corrupt batch side by side
    for l in range(L) if layers is None else layers:
        d = recorded[l].shape[-1] // H

        def swap(m, args, l=l, d=d):
            x = args[0].clone()  # (H·B, T, H·d): copy h (rows h·B … h·B + B − 1) gets head h from the clean run
            for h in range(H):
                x[h * B : (h + 1) * B, :, h * d : (h + 1) * d] = recorded[l][..., h * d : (h + 1) * d]
            return (x,)

        hook = projs[l].register_forward_pre_hook(swap)
        with eager(loaded), _answered_below(loaded, l, below, H):
            res = _forward(loaded, corrupt.repeat(H, 1), last_only=True)
        hook.remove()
        tiled = {k: v.repeat(H, *[1] * (v.dim() - 1)) for k, v in batch_fields.items()}
        out[l] = metric(_read(loaded, res), tiled).numpy().reshape(H, B)
    return out


def _corrupt_layer_outputs(loaded, corrupt) -> dict | None:
    """Each decoder layer's output on the corrupt run, for a decoder-only LM (None otherwise): patching layer l
    leaves every layer below it as the corrupt run had it, so those need not run again (half the forwards)."""
    layers = getattr(getattr(loaded.model, "model", None), "layers", None)
    if not loaded.causal or loaded.seq2seq or layers is None:
        return None
    seen = {}
    hooks = [
        layer.register_forward_hook(
            lambda m, a, o, j=j: seen.__setitem__(j, (o[0] if isinstance(o, tuple) else o).detach())
        )
        for j, layer in enumerate(layers)
    ]
    with eager(loaded):
        _forward(loaded, corrupt)
    for h in hooks:
        h.remove()
    return seen


@contextlib.contextmanager
def _answered_below(loaded, l: int, below: dict | None, copies: int):
    """Layers 0 … l − 1 answer at once with layer l − 1's corrupt output, tiled over the patched copies."""
    if below is None or l == 0:
        yield
        return
    layers = loaded.model.model.layers
    tiled = below[l - 1].repeat(copies, 1, 1)
    for j in range(l):
        layers[j].forward = lambda *a, **k: tiled
    try:
        yield
    finally:
        for j in range(l):
            del layers[j].forward


def _grid(result, site="head"):
    rows = [r for r in result.rows if r["site"] == site]
    L = max(r["layer"] for r in rows) + 1
    U = max(r["head"] for r in rows) + 1
    g = np.zeros((L, U, len(rows[0]["values"])))
    for r in rows:
        g[r["layer"], r["head"]] = r["values"]
    return g


def test_every_head_of_smollm2_matches_the_hook_reference(smollm2):
    r = patch(smollm2, PAIRS, metric="logit-diff", exact="all")
    clean, corrupt = _ids(smollm2, [p.clean for p in PAIRS]), _ids(smollm2, [p.corrupt for p in PAIRS])
    tok = smollm2.tokenizer
    fields = {
        "answer": torch.tensor([tok.convert_tokens_to_ids(tok.tokenize(p.answer))[0] for p in PAIRS]),
        "wrong": torch.tensor([tok.convert_tokens_to_ids(tok.tokenize(p.wrong))[0] for p in PAIRS]),
    }
    # every head measured exactly, and the hooks' reference on every head of four layers: the first, the last
    # and two between (the restart starts at each layer alike; every third layer, 11 of them, cost CI 16 s more)
    layers = [0, 10, 20, 29]
    ref = reference_head_patching(smollm2, clean, corrupt, logit_diff, fields, layers=layers)
    ours = _grid(r)
    assert ours.shape == ref.shape == (30, 9, 2) and np.isfinite(ours).all()
    # fp32, logit differences of ~6: the model's eager attention and the engine's accumulate differently over
    # 30 layers (measured max 1.3e-5 here, ~27 ulp of 6; 2e-6 relative)
    assert np.abs(ours[layers] - ref[layers]).max() <= 2e-5
    assert r.meta["shortcut"][0]["used"]  # the restart ran and still matched
    # the clean and corrupt metric equal the unpatched model's own
    with eager(smollm2), torch.no_grad():
        m_clean = logit_diff(_forward(smollm2, clean).logits, fields).numpy()
    np.testing.assert_allclose(r.meta["m_clean_values"], m_clean, atol=1e-4)
    assert r.meta["m_clean"] > 0 > r.meta["m_corrupt"]
    check_direct_effects(smollm2, r, clean, fields)


@torch.no_grad()
def check_direct_effects(loaded, r, clean, fields):
    """Direct effects add up to the metric; each layer's sum over heads equals what its o_proj writes, read
    here by a forward hook and put through the final RMSNorm at the run's scale."""
    d = r.direct
    assert d["adds_up_max_abs_diff"] <= 1e-4 and d["norm"] == "LlamaRMSNorm"
    per = np.zeros((loaded.n_layers, loaded.n_heads, clean.shape[0]))
    for row in d["rows"]:
        per[row["layer"], row["head"]] = row["clean_values"]
    written, final = {}, {}
    hooks = [
        p.register_forward_hook(lambda m, a, o, l=l: written.__setitem__(l, o[:, -1]))
        for l, p in enumerate(loaded.out_projections)
    ]
    norm = loaded.model.model.norm
    hooks.append(norm.register_forward_hook(lambda m, a, o: final.__setitem__("x", a[0][:, -1])))
    with eager(loaded):
        _forward(loaded, clean)
    for h in hooks:
        h.remove()
    W = loaded.model.lm_head.weight
    u = W[fields["answer"]] - W[fields["wrong"]]  # (B, d)
    sigma = (final["x"].pow(2).mean(-1, keepdim=True) + norm.variance_epsilon).sqrt()
    for l in range(loaded.n_layers):
        direct = (u * norm.weight * written[l] / sigma).sum(-1).numpy()
        np.testing.assert_allclose(per[l].sum(0), direct, atol=1e-4)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return load(str(build("llama", tmp_path_factory.mktemp("zoo"))))


TINY = [
    PromptPair("the cat sat on the mat and", "the dog sat on the mat and", " the", " a"),
    PromptPair("a bird flew over the house and", "a bird ran over the house and", " the", " a", row=2),
]


@torch.no_grad()
def reference_qkv(loaded, clean, corrupt, metric, fields, site):
    """Patching q (per query head) or k / v (per kv head) at the projections' outputs, by hooks.

    The projections' outputs are before rotary embedding; rotary is the same position-wise map on both
    runs, so patching before it equals patching after it (where attnroute patches)."""
    name = {"q": "q_proj", "k": "k_proj", "v": "v_proj"}[site]
    mods = [getattr(a, name) for a in loaded.attention_modules]
    rec = {}
    hooks = [m.register_forward_hook(lambda mod, a, o, l=l: rec.__setitem__(l, o.detach())) for l, m in enumerate(mods)]
    with eager(loaded):
        _forward(loaded, clean)
    for h in hooks:
        h.remove()
    units = loaded.n_heads if site == "q" else loaded.n_kv_heads
    out = np.zeros((loaded.n_layers, units, clean.shape[0]))
    for l, m in enumerate(mods):
        d = rec[l].shape[-1] // units
        for u in range(units):

            def swap(mod, a, o, l=l, u=u, d=d):
                o = o.clone()
                o[..., u * d : (u + 1) * d] = rec[l][..., u * d : (u + 1) * d]
                return o

            hook = m.register_forward_hook(swap)
            with eager(loaded):
                out[l, u] = metric(_forward(loaded, corrupt).logits, fields).numpy()
            hook.remove()
    return out


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo-qkv")
    return {arch: load(str(build(arch, root / arch))) for arch in ("mistral", "gemma2", "gpt_oss")}


@pytest.mark.parametrize("arch", ["mistral", "gemma2", "gpt_oss"])
@pytest.mark.parametrize("site", ["q", "k", "v"])
def test_q_k_v_under_windows_soft_caps_and_sinks_match_the_hook_reference(zoo, arch, site):
    """Sliding windows (mistral, gemma2: 6 tokens, crossed by these prompts), soft-capped logits (gemma2),
    sink logits (gpt-oss): what the engine patches is what the model's own attention would have read."""
    loaded = zoo[arch]
    r = patch(loaded, TINY, metric="logit-diff", sites=(site,), exact="all")
    tok = loaded.tokenizer
    fields = {
        k: torch.tensor([tok(getattr(p, k), add_special_tokens=False)["input_ids"][0] for p in TINY])
        for k in ("answer", "wrong")
    }
    clean, corrupt = _ids(loaded, [p.clean for p in TINY]), _ids(loaded, [p.corrupt for p in TINY])
    ref = reference_qkv(loaded, clean, corrupt, logit_diff, fields, site)
    np.testing.assert_allclose(_grid(r, site), ref, atol=1e-5, rtol=0)


def test_one_position_patched_matches_the_hook_reference_at_that_position(tiny_llama):
    r = patch(tiny_llama, TINY[:1], metric="logit-diff", positions="cat", exact="all")
    pos = r.meta["positions"]["resolved"]
    assert pos == [2]
    tok = tiny_llama.tokenizer
    p = TINY[0]
    f = {k: torch.tensor([tok(getattr(p, k), add_special_tokens=False)["input_ids"][0]]) for k in ("answer", "wrong")}
    clean, corrupt = _ids(tiny_llama, [p.clean]), _ids(tiny_llama, [p.corrupt])
    rec = {}
    projs = tiny_llama.out_projections
    hooks = [
        q.register_forward_pre_hook(lambda m, a, l=l: rec.__setitem__(l, a[0].detach())) for l, q in enumerate(projs)
    ]
    with eager(tiny_llama), torch.no_grad():
        _forward(tiny_llama, clean)
    for h in hooks:
        h.remove()
    d = rec[0].shape[-1] // tiny_llama.n_heads
    for row in r.rows:
        l, h = row["layer"], row["head"]

        def put(m, a, l=l, h=h):
            x = a[0].clone()
            x[:, 2, h * d : (h + 1) * d] = rec[l][:, 2, h * d : (h + 1) * d]
            return (x,)

        hook = projs[l].register_forward_pre_hook(put)
        with eager(tiny_llama), torch.no_grad():
            want = float(logit_diff(_forward(tiny_llama, corrupt).logits, f)[0])
        hook.remove()
        assert row["position"] == 2 and row["values"][0] == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("site", ["head", "q", "k", "v"])
def test_grouped_query_heads_q_k_v_match_the_hook_reference(tiny_llama, site):
    r = patch(tiny_llama, TINY, metric="logit-diff", sites=(site,), exact="all")
    tok = tiny_llama.tokenizer
    fields = {
        k: torch.tensor([tok(getattr(p, k), add_special_tokens=False)["input_ids"][0] for p in TINY])
        for k in ("answer", "wrong")
    }
    clean, corrupt = _ids(tiny_llama, [p.clean for p in TINY]), _ids(tiny_llama, [p.corrupt for p in TINY])
    if site == "head":
        ref = reference_head_patching(tiny_llama, clean, corrupt, logit_diff, fields)
    else:
        ref = reference_qkv(tiny_llama, clean, corrupt, logit_diff, fields, site)
    np.testing.assert_allclose(_grid(r, site), ref, atol=1e-5, rtol=0)
    if site in ("k", "v"):  # a kv head says which query heads read it
        assert {tuple(x["query_heads"]) for x in r.rows} == {(0, 1), (2, 3)}


def test_the_estimate_equals_a_finite_difference(tiny_llama):
    """d/dε M(base + ε·(source − base)) at ε = 0, by central differences on each layer's attention output,
    in float64 on both sides. Llama's RMSNorm and rotary compute in fp32 even in a float64 model, so the
    step is 3e-3 (fp32 rounding over a smaller step, curvature over a larger one, each pass 1e-4)."""
    tok = tiny_llama.tokenizer
    fields = {
        k: torch.tensor([tok(getattr(p, k), add_special_tokens=False)["input_ids"][0] for p in TINY])
        for k in ("answer", "wrong")
    }
    clean, corrupt = _ids(tiny_llama, [p.clean for p in TINY]), _ids(tiny_llama, [p.corrupt for p in TINY])
    projs = tiny_llama.out_projections
    tiny_llama.model.double()
    try:
        r = patch(tiny_llama, TINY, metric="logit-diff", sites=("layer",), exact=0)
        est = np.array([next(x["estimate_values"] for x in r.rows if x["layer"] == l) for l in range(2)])  # (L, B)
        rec = {}
        hooks = [
            p.register_forward_pre_hook(lambda m, a, l=l: rec.__setitem__(l, a[0].detach()))
            for l, p in enumerate(projs)
        ]
        with eager(tiny_llama), torch.no_grad():
            _forward(tiny_llama, clean)
            clean_rec = dict(rec)
            _forward(tiny_llama, corrupt)
            base_rec = dict(rec)
        for h in hooks:
            h.remove()
        eps = 3e-3
        for l in range(2):
            vals = []
            for sign in (1, -1):
                hook = projs[l].register_forward_pre_hook(
                    lambda m, a, l=l, s=sign: (base_rec[l] + s * eps * (clean_rec[l] - base_rec[l]),)
                )
                with eager(tiny_llama), torch.no_grad():
                    vals.append(logit_diff(_forward(tiny_llama, corrupt).logits, fields).numpy())
                hook.remove()
            fd = (vals[0] - vals[1]) / (2 * eps)
            np.testing.assert_allclose(est[l], fd, rtol=1e-3, atol=1e-4)
    finally:
        tiny_llama.model.float()


def test_an_encoder_with_the_cosine_metric_matches_the_hook_reference(minilm):
    pairs = [
        PromptPair("the cat sat on the mat", "the dog sat on the mat"),
        PromptPair("a red car drove by here", "a blue car drove by here", row=2),
    ]
    r = patch(minilm, pairs, metric="cosine", exact="all")
    clean, corrupt = _ids(minilm, [p.clean for p in pairs]), _ids(minilm, [p.corrupt for p in pairs])
    with eager(minilm), torch.no_grad():
        fields = {"clean_embedding": _forward(minilm, clean).last_hidden_state.mean(1)}
    ref = reference_head_patching(minilm, clean, corrupt, cosine, fields)
    np.testing.assert_allclose(_grid(r), ref, atol=1e-5, rtol=0)
    assert r.meta["m_clean"] == pytest.approx(1.0, abs=1e-6) and r.meta["m_corrupt"] < 1


def test_an_encoder_decoder_is_patched_per_stream(tmp_path):
    bart = load(str(build("bart", tmp_path)))
    runs = []
    handle = bart.model.get_encoder().register_forward_hook(lambda m, a, o: runs.append(1))
    r = patch(bart, TINY, metric="logit-diff", exact="all")
    handle.remove()
    # the two recorded runs, the gradient pass and one forward per encoder layer: the four decoder layers'
    # patches read the base run's encoding (9 encoder runs when each reran it)
    assert len(runs) == 5
    tok = bart.tokenizer
    fields = {
        k: torch.tensor([tok(getattr(p, k), add_special_tokens=False)["input_ids"][0] for p in TINY])
        for k in ("answer", "wrong")
    }
    clean, corrupt = _ids(bart, [p.clean for p in TINY]), _ids(bart, [p.corrupt for p in TINY])
    ref = reference_head_patching(bart, clean, corrupt, logit_diff, fields)
    np.testing.assert_allclose(_grid(r), ref, atol=1e-5, rtol=0)
    assert r.meta["attention_kinds"] == ["self", "self", "decoder-self", "decoder-self", "cross", "cross"]
    assert not r.meta["shortcut"][0]["used"]  # two stacks: no layer restart, said
    assert "encoder is not rerun" in r.meta["shortcut"][0]["decoder"]


@pytest.mark.parametrize("arch,reason", [("gemma2", "soft-cap"), ("gpt2", "Conv1D")])
def test_direct_effects_that_would_not_add_up_are_refused_with_the_reason(arch, reason, tmp_path):
    loaded = load(str(build(arch, tmp_path)))
    r = patch(loaded, TINY, metric="logit-diff", exact=0)
    assert reason in r.to_dict()["direct"]["reason"]


def test_no_forward_of_patch_or_knockout_builds_a_kv_cache(tiny_llama):
    """Nothing here decodes: every forward of patch (recording, gradients, exact runs) and of knockout passes
    use_cache=False, so none builds a cache (a 7B model's at 4,096 tokens is 0.5 GiB)."""
    import attnroute as ar

    seen = []
    spy = tiny_llama.model.register_forward_pre_hook(
        lambda m, args, kwargs: seen.append(kwargs.get("use_cache")), with_kwargs=True
    )
    try:
        patch(tiny_llama, TINY, metric="logit-diff", exact="all")
        n_patch = len(seen)
        ar.knockout(tiny_llama, text="the cat sat on the mat and the cat", source="cat", target="mat", window=1)
    finally:
        spy.remove()
    assert n_patch >= 4 and len(seen) > n_patch  # recordings, gradients and exact runs; then knockout's
    assert set(seen) == {False}
