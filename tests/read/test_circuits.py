"""Circuits: path patching against a hooks reference written here (transformers' own modules, no attnroute
code), the full and empty circuits against the clean and corrupt runs, EAP against central differences in
float64, EAP-IG's steps, the refusals, and the CLI's outputs."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch

import attnroute as ar
from attnroute.cli import main
from attnroute.errors import InputError
from attnroute.models import load
from attnroute.promptset import PromptPair
from attnroute.read.circuits.estimate import eap
from attnroute.read.circuits.graph import Graph
from attnroute.read.circuits.layout import CircuitUnsupported, discover
from attnroute.read.circuits.nodes import resolve_edges
from attnroute.read.circuits.runs import EdgeRun
from attnroute.read.ground.metrics import logit_diff
from attnroute.read.ground.prompts import tokenize_pairs
from attnroute.read.ground.settle import BAND_MIN

from .zoo import build

PAIRS = (
    PromptPair("the cat sat on the mat and", "the dog sat on the mat and", " the", " a"),
    PromptPair("a bird flew over the house and", "a bird ran over the house and", " the", " a", row=2),
)


def edge_run(loaded, pairs=PAIRS, direction="denoising", ablation="corrupt"):
    groups, _ = tokenize_pairs(loaded.tokenizer, loaded.kind, pairs, "logit-diff")
    layout = discover(loaded, groups[0].clean[:1])
    graph = Graph(layout)
    return EdgeRun(loaded, layout, graph, groups[0], logit_diff, direction=direction, ablation=ablation)


# ---------------------------------------------------------------- a reference by hooks on transformers' modules


def _parts(model, l: int) -> dict:
    layer = model.model.layers[l]
    gemma = hasattr(layer, "pre_feedforward_layernorm")
    a = layer.self_attn
    return {
        "layer": layer,
        "attn_norm": layer.input_layernorm,
        "mlp_norm": layer.pre_feedforward_layernorm if gemma else layer.post_attention_layernorm,
        "attn_post": layer.post_attention_layernorm if gemma else None,
        "mlp_post": layer.post_feedforward_layernorm if gemma else None,
        "mlp": layer.mlp,
        "o": a.o_proj,
        "q": a.q_proj,
        "k": a.k_proj,
        "v": a.v_proj,
    }


@torch.no_grad()
def _record(model, ids) -> dict:
    rec, hooks = {}, []
    for l in range(len(model.model.layers)):
        p = _parts(model, l)
        hooks.append(
            p["layer"].register_forward_pre_hook(
                lambda m, a, k, l=l: rec.__setitem__(("x", l), _x(a, k)), with_kwargs=True
            )
        )
        hooks.append(p["o"].register_forward_pre_hook(lambda m, a, l=l: rec.__setitem__(("z", l), a[0])))
        hooks.append(p["o"].register_forward_hook(lambda m, a, o, l=l: rec.__setitem__(("o", l), o)))
        last = p["mlp_post"] or p["mlp"]
        hooks.append(last.register_forward_hook(lambda m, a, o, l=l: rec.__setitem__(("mlp", l), _first(o))))
    try:
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    finally:
        for h in hooks:
            h.remove()
    return rec


def _first(out):
    return out[0] if isinstance(out, tuple) else out  # gpt-oss's MoE returns (output, router logits)


def _x(args, kwargs):
    return args[0] if args else kwargs["hidden_states"]


def _write(model, rec, kind, l, h) -> torch.Tensor:
    """A sender's write into the stream, as the definition says (own-run scale for Gemma's post-norm)."""
    if kind == "embed":
        return rec[("x", 0)]
    if kind == "mlp":
        return rec[("mlp", l)]
    p = _parts(model, l)
    W = p["o"].weight  # (d, H·Dv)
    H = model.config.num_attention_heads
    Dv = W.shape[1] // H
    c = rec[("z", l)][..., h * Dv : (h + 1) * Dv] @ W[:, h * Dv : (h + 1) * Dv].T
    if p["attn_post"] is not None:  # Gemma2RMSNorm: x · rsqrt(mean x² + eps) · (1 + w), at this run's scale
        o = rec[("o", l)]
        c = c * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + p["attn_post"].eps) * (1 + p["attn_post"].weight)
    return c


@torch.no_grad()
def reference(model, clean, corrupt, fields, sender, receiver) -> torch.Tensor:
    """Denoising path patching of one edge by hooks: the receiver's input is x + Δ_S on the corrupt run."""
    src, base = _record(model, clean), _record(model, corrupt)
    delta = _write(model, src, *sender) - _write(model, base, *sender)
    kind, l, unit, ch = receiver
    hooks, seen = [], {}
    if kind == "head":
        p = _parts(model, l)
        D = p[ch].weight.shape[0] // (
            model.config.num_attention_heads if ch == "q" else model.config.num_key_value_heads
        )
        hooks.append(
            p["layer"].register_forward_pre_hook(lambda m, a, k: seen.__setitem__("x", _x(a, k)), with_kwargs=True)
        )

        def swap(m, a, out):
            fresh = p[ch].forward(p["attn_norm"].forward(seen["x"] + delta))  # .forward: not this hook again
            out = out.clone()
            out[..., unit * D : (unit + 1) * D] = fresh[..., unit * D : (unit + 1) * D]
            return out

        hooks.append(p[ch].register_forward_hook(swap))
    elif kind == "mlp":
        p = _parts(model, l)
        hooks.append(p["mlp_norm"].register_forward_pre_hook(lambda m, a: seen.__setitem__("x", a[0])))
        hooks.append(p["mlp"].register_forward_pre_hook(lambda m, a: (p["mlp_norm"].forward(seen["x"] + delta),)))
    else:
        hooks.append(model.model.norm.register_forward_pre_hook(lambda m, a: (a[0] + delta,)))
    try:
        out = model(input_ids=corrupt, attention_mask=torch.ones_like(corrupt))
    finally:
        for h in hooks:
            h.remove()
    return logit_diff(out.logits, fields)


EDGES = {  # label -> (sender (kind, layer, head), receiver (kind, layer, unit, channel))
    "embed>L0.H1.q": (("embed", None, None), ("head", 0, 1, "q")),
    "L0.H3>L1.KV0.k": (("head", 0, 3), ("head", 1, 0, "k")),
    "L0.H2>L1.KV1.v": (("head", 0, 2), ("head", 1, 1, "v")),
    "L0.MLP>L1.H3.q": (("mlp", 0, None), ("head", 1, 3, "q")),
    "L0.H0>L0.MLP": (("head", 0, 0), ("mlp", 0, None, None)),
    "L1.H1>logits": (("head", 1, 1), ("logits", None, None, None)),
    "embed>L1.MLP": (("embed", None, None), ("mlp", 1, None, None)),
}


@pytest.mark.parametrize("arch", ["llama", "gemma2", "gpt_oss", "mistral"])
def test_path_patching_matches_the_hooks_reference(arch, tmp_path):
    """Grouped kv heads (llama, 4 heads on 2), Gemma 2's soft-cap and post-norms, gpt-oss's sinks, a window."""
    loaded = load(str(build(arch, tmp_path)))
    run = edge_run(loaded)
    g = run.group
    fields = {"answer": g.answer, "wrong": g.wrong}
    ids = resolve_edges(run.graph, list(EDGES))
    got = run.measure(ids) - run.m_base
    for i, (label, (sender, receiver)) in enumerate(EDGES.items()):
        want = reference(loaded.model, g.clean, g.corrupt, fields, sender, receiver) - run.m_base
        torch.testing.assert_close(got[i], want.float(), atol=1e-4, rtol=1e-4, msg=label)


@pytest.mark.slow
def test_path_patching_of_smollm2_matches_the_hooks_reference(smollm2):
    pairs = (
        PromptPair(
            "When Mary and John went to the store, John gave a drink to",
            "When Mary and John went to the store, Mary gave a drink to",
            " Mary",
            " John",
        ),
    )
    run = edge_run(smollm2, pairs)
    g = run.group
    fields = {"answer": g.answer, "wrong": g.wrong}
    edges = {
        "L3.H2>L18.H6.q": (("head", 3, 2), ("head", 18, 6, "q")),
        "L8.H1>L17.KV1.k": (("head", 8, 1), ("head", 17, 1, "k")),
        "L21.MLP>L23.KV1.v": (("mlp", 21, None), ("head", 23, 1, "v")),
        "L23.H3>logits": (("head", 23, 3), ("logits", None, None, None)),
        "embed>L0.MLP": (("embed", None, None), ("mlp", 0, None, None)),
    }
    got = run.measure(resolve_edges(run.graph, list(edges))) - run.m_base
    for i, (label, (sender, receiver)) in enumerate(edges.items()):
        want = reference(smollm2.model, g.clean, g.corrupt, fields, sender, receiver) - run.m_base
        torch.testing.assert_close(got[i], want.float(), atol=2e-4, rtol=1e-3, msg=label)


@pytest.mark.parametrize("arch", ["llama", "gemma2", "gpt_oss", "mistral", "gpt_neox", "granite", "qwen3", "opt", "t5"])
def test_the_full_circuit_is_the_clean_run_and_the_empty_one_the_corrupt_run(arch, tmp_path):
    """Parallel blocks (GPT-NeoX), a residual multiplier (Granite), q/k norms (Qwen3), flattened MLP rows (OPT),
    an encoder–decoder's cross-stream edges (T5)."""
    run = edge_run(load(str(build(arch, tmp_path))))
    E = len(run.graph)
    M = run.circuits([np.ones(E, bool), np.zeros(E, bool)])
    torch.testing.assert_close(M[0], run.m_clean, atol=1e-5, rtol=0)
    torch.testing.assert_close(M[1], run.m_corrupt, atol=1e-5, rtol=0)
    if arch == "t5":  # encoder senders reach the decoder's cross-attention keys and values
        cross = [e for e in range(E) if run.graph.edge(e)[1].attention == "cross"]
        assert cross and any(run.graph.edge(e)[0].stream == "encoder" for e in cross)


def test_a_decoder_receivers_patch_reads_the_base_encoding_as_a_whole_forward_computes_it(tmp_path, monkeypatch):
    """An encoder–decoder's edges into the decoder (cross q, k, v, self heads, MLPs, logits) are path-patched on
    the base run's recorded encoding, the encoder not run again; the same edges with the whole model rerun give
    the same M, and every edge into the encoder still reruns it."""
    from attnroute.read.circuits import runs
    from attnroute.read.circuits.graph import where_read

    run = edge_run(load(str(build("t5", tmp_path))))
    encoder = run.loaded.model.get_encoder()
    calls = []
    handle = encoder.register_forward_hook(lambda m, a, o: calls.append(1))
    into = {e: where_read(run.graph.edge(e)[1])[0] for e in range(len(run.graph))}
    decoder = [e for e, stream in into.items() if stream == "decoder"]
    rng = np.random.default_rng(0)
    picked = sorted(rng.choice(decoder, 60, replace=False).tolist())
    kinds = {(run.graph.edge(e)[1].kind, run.graph.edge(e)[1].attention, run.graph.edge(e)[1].channel) for e in picked}
    assert {("head", "cross", "k"), ("head", "cross", "q"), ("head", "self", "v"), ("logits", None, None)} <= kinds
    on = run.measure(picked)
    assert calls == []
    run.measure([next(e for e, stream in into.items() if stream == "encoder")])
    assert len(calls) == 1
    handle.remove()
    forward = runs.EdgeRun._forward
    monkeypatch.setattr(runs.EdgeRun, "_forward", lambda self, *a, encoded=False, **k: forward(self, *a, **k))
    torch.testing.assert_close(on, run.measure(picked), atol=1e-6, rtol=0)


@pytest.mark.parametrize("arch", ["llama", "t5"])
def test_receivers_sharing_a_correction_replayed_once_give_what_each_replayed_alone_gives(arch, tmp_path, monkeypatch):
    """Circuits of random edge sets, several per forward: receivers of one read point whose circuits hold
    the same edges get one correction object and one replay (runs.CircuitEdits.memo); handing each a copy of
    its own instead (no sharing) must give the same M."""
    from attnroute.read.circuits import runs

    run = edge_run(load(str(build(arch, tmp_path))))
    E = len(run.graph)
    rng = np.random.default_rng(0)
    masks = [rng.random(E) < p for p in (0.002, 0.01, 0.05, 0.3)]  # small circuits share most corrections
    shared = run.circuits(masks)
    corr = runs.CircuitEdits.corr
    monkeypatch.setattr(
        runs.CircuitEdits, "corr", lambda self, r, x, fw: [(a.clone(), b.clone()) for a, b in corr(self, r, x, fw)]
    )
    torch.testing.assert_close(shared, run.circuits(masks), atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "arch, plain",
    [
        ("llama", {"q", "k", "v"}),
        ("gemma", {"q", "k", "v"}),
        ("qwen3", {"v"}),
        ("cohere", {"v"}),
        ("t5", {"q", "k", "v"}),
    ],
)
def test_receivers_on_a_plain_projection_read_their_heads_slice_as_a_replay_would(arch, plain, tmp_path, monkeypatch):
    """sliced.py: a channel that is its projection alone, or rotated by the call's half-split rotary embedding
    (checked against the module's own q, k, v of the forward), gives each receiver its head's columns; QK-normed
    q and k (Qwen3) and interleaved rotary ones (Cohere) fail the check and are replayed. Circuits computed
    either way agree."""
    from attnroute.read.circuits import sliced, stream

    run = edge_run(load(str(build(arch, tmp_path))))
    E = len(run.graph)
    rng = np.random.default_rng(1)
    masks = [rng.random(E) < p for p in (0.01, 0.1, 0.5)]
    found = []
    monkeypatch.setattr(stream, "fit", lambda m, c, *a: found.append((c, f := sliced.fit(m, c, *a))) or f)
    fast = run.circuits(masks)
    assert {c for c, f in found if f is not None} == plain
    assert {c for c, f in found if f is None} == {"q", "k", "v"} - plain
    monkeypatch.setattr(stream, "fit", lambda *a: None)
    torch.testing.assert_close(fast, run.circuits(masks), atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ["llama", "t5"])
def test_patching_a_sender_with_its_own_value_changes_nothing(arch, tmp_path):
    same = tuple(PromptPair(p.clean, p.clean, p.answer, p.wrong, row=p.row) for p in PAIRS)
    run = edge_run(load(str(build(arch, tmp_path))), same)
    edges = list(range(0, len(run.graph), max(1, len(run.graph) // 25)))
    torch.testing.assert_close(run.measure(edges), run.m_base.expand(len(edges), -1), atol=1e-6, rtol=0)


def test_eap_is_the_derivative_of_the_edges_interpolation_in_float64(tmp_path, monkeypatch):
    """est(S → R) = d/dε M(x_R + ε Δ_S) at ε = 0: central differences of path patching, in float64 (Llama's
    RMSNorm computes in float32 whatever its input; here it keeps float64, so the differences are exact to ε²)."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    def rms_in_its_own_dtype(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    monkeypatch.setattr(LlamaRMSNorm, "forward", rms_in_its_own_dtype)
    loaded = load(str(build("llama", tmp_path)))
    loaded.model.double()
    run = edge_run(loaded)
    est = eap(run, 1, qk_fix=False)  # the plain estimate: the derivative (the QK fix is tested below)
    edges = resolve_edges(run.graph, list(EDGES))
    eps = 1e-4
    up, down = run.measure(edges, eps), run.measure(edges, -eps)
    fd = ((up - down) / (2 * eps)).numpy()
    # the differences' error is ε²/6 times M's third derivative, absolute, not relative: 4.8e-9 on an edge of
    # 0.0029 where the tiny model's random weights came out otherwise (torch's normal_ draws differ by CPU kernel)
    np.testing.assert_allclose(est[edges], fd, rtol=1e-6, atol=1e-7 * np.abs(fd).max())


def _by_hand(run, receiver_grads_of_step: list) -> torch.Tensor:
    """Σ over steps of Σ_{t,d} Δ_S · g_R for every edge, one edge at a time in float64 (no chunked products)."""
    out = torch.zeros(len(run.graph), run.n, dtype=torch.float64)
    for step in receiver_grads_of_step:
        for rs, g in step:
            for j, r in enumerate(rs):
                for s in np.flatnonzero(run.graph.matrix[:, r] >= 0):
                    e = run.graph.matrix[s, r]
                    out[e] += (run.delta(int(s)).double() * g[j].double()).sum((1, 2))
    return out


def test_eap_ig_with_one_step_is_eap_and_more_steps_average_the_interpolated_gradients(tmp_path, monkeypatch):
    from attnroute.read.circuits import estimate, products
    from attnroute.read.circuits.estimate import _start_delta, _toward, receiver_grads

    run = edge_run(load(str(build("llama", tmp_path))))  # float32 products against float64 by hand: atol 1e-6
    one = eap(run, 1, qk_fix=False)
    np.testing.assert_array_equal(eap(run, 1, qk_fix=False), one)
    np.testing.assert_allclose(one, _by_hand(run, [receiver_grads(run, {})]).numpy(), rtol=1e-5, atol=1e-6)
    two = eap(run, 2, qk_fix=False)
    half = {s: _toward(_start_delta(run, s), [0.5]) for s in run.layout.streams}
    by_hand = _by_hand(run, [list(receiver_grads(run, interp)) for interp in ({}, half)])
    # the steps' gradients are summed before the one product with the deltas: float32 sums in another order
    np.testing.assert_allclose(two, (by_hand / 2).numpy(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(two, one)  # the second step does move the estimate
    monkeypatch.setattr(estimate, "STEP_TOKENS", 1)  # one step per gradient pass, not both stacked: the same
    np.testing.assert_allclose(eap(run, 2, qk_fix=False), two, rtol=1e-5, atol=1e-6)
    monkeypatch.setattr(estimate, "SUM_BYTES", 0)  # too big to sum: a product per step
    np.testing.assert_allclose(eap(run, 2, qk_fix=False), (by_hand / 2).numpy(), rtol=1e-5, atol=1e-6)
    monkeypatch.setattr(products, "RECEIVER_BYTES", 1)  # a chunk per read point and per part: the same sums
    monkeypatch.setattr(products, "SENDER_BYTES", 1)
    np.testing.assert_allclose(eap(run, 2, qk_fix=False), two, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("arch", ["llama", "gemma2", "gpt_oss"])
def test_the_qk_fix_is_the_receiving_heads_exact_change_read_by_its_gradient(arch, tmp_path):
    """For a q or k edge: Σ ∂M/∂z · (z' − z), with z' the receiving heads' outputs when the edge is path
    patched — read here from the patched forward itself, the gradient from a plain backward. Value edges keep
    the plain estimate."""
    from attnroute.read.circuits.estimate import GradPass
    from attnroute.read.circuits.stream import Forward
    from attnroute.read.patching.sites import Recorder

    run = edge_run(load(str(build(arch, tmp_path))))
    est = eap(run, 1, qk_fix=True)
    grad = GradPass(run, {})
    plain = eap(run, 1, qk_fix=False)
    values = [e for e in range(len(run.graph)) if run.graph.edge(e)[1].channel == "v"]
    np.testing.assert_allclose(est[values], plain[values], rtol=1e-5, atol=1e-7)  # batched VJPs: same sums
    labels = ["embed>L0.H1.q", "L0.H3>L1.KV0.k", "L0.MLP>L1.H3.q", "embed>L1.KV1.k"]
    for e, label in zip(resolve_edges(run.graph, labels), labels, strict=True):
        r = run.graph.edge(e)[1]
        layer = run.layout.stack(r.stream)[r.layer].attn.layer
        from attnroute.read.circuits.runs import PathEdits

        rec = Recorder(layer)
        with torch.no_grad(), Forward(run.layout, run.graph, PathEdits(run, [e])) as fw:
            run._forward(run.base_ids, fw, interventions=[rec])
        z, gz = grad.values[(layer, "out")], grad.grads[(layer, "out")]
        want = ((rec.out - z) * gz).sum((1, 2, 3)).numpy()
        np.testing.assert_allclose(est[e], want, rtol=1e-4, atol=1e-6, err_msg=label)


def test_the_qk_fix_stacks_senders_by_all_they_hold_and_the_stack_changes_no_number(tmp_path, monkeypatch):
    """The QK fix sized its stacks of senders by their score matrices alone; on 15-token runs that stacked every
    sender of a layer at once, and its [senders, n, H, T, D] temporaries were most of the estimate's 7 MB a
    token (IOI: 1.88 GiB over the recorded run, 1.00 after). One sender or the whole layer at a time: the same
    estimates."""
    import importlib

    qkfix = importlib.import_module("attnroute.read.circuits.qkfix")
    run = edge_run(load(str(build("llama", tmp_path))))
    whole = eap(run, 1, qk_fix=True)
    b = run.layout.blocks[1]
    per = qkfix.sender_bytes(run, b)
    H, T = run.layout.heads, int(run.base[(b.stream, b.index)]["x_in"].shape[1])
    assert per > run.n * H * T * T * 2 * 4  # the [n, T, ·] temporaries are counted, not only the scores
    stacks = []
    effects = qkfix._effects
    spy = lambda r, g, bb, chunk: stacks.append(len(chunk)) or effects(r, g, bb, chunk)  # noqa: E731
    monkeypatch.setattr(qkfix, "_effects", spy)
    monkeypatch.setattr(qkfix, "STACK_BYTES", per)  # one sender a stack
    one = eap(run, 1, qk_fix=True)
    assert stacks and set(stacks) == {1}
    np.testing.assert_allclose(one, whole, rtol=1e-6, atol=1e-9)


def test_the_qk_fix_goes_to_the_layers_whose_whole_input_matters_most(tmp_path, monkeypatch):
    """With room for one layer: the fix lands on the layer whose q, k recomputed from the whole source input
    move the metric most; its q/k edges equal the all-layers fix, the other layer's the plain estimate."""
    from attnroute.read.circuits import estimate, qkfix
    from attnroute.read.circuits.estimate import GradPass

    run = edge_run(load(str(build("llama", tmp_path))))
    every, plain = eap(run, 1, qk_fix=True), eap(run, 1, qk_fix=False)
    monkeypatch.setattr(estimate, "QK_LAYERS", 1)
    one = eap(run, 1, qk_fix=None)
    (layer,) = run.qk_fixed
    grad = GradPass(run, {})
    size = {}
    with qkfix.routed(run.loaded, impl="eager"), torch.no_grad():
        for b in run.layout.blocks:
            size[b.attn.layer] = max(float(e.mean(1).abs().max()) for e in qkfix._effects(run, grad, b, None).values())
    assert layer == max(size, key=size.get)
    for e in range(len(run.graph)):
        r = run.graph.edge(e)[1]
        if r.channel in ("q", "k"):
            want = every[e] if r.layer == layer else plain[e]
            np.testing.assert_allclose(one[e], want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("arch", ["bert", "bart"])
def test_post_ln_models_are_refused_with_the_reason(arch, tmp_path):
    loaded = load(str(build(arch, tmp_path)))
    with pytest.raises(CircuitUnsupported, match="post-LN") as e:
        ar.circuit(loaded, PAIRS, metric="cosine" if arch == "bert" else "logit-diff")
    assert e.value.field == "model" and "\n" not in str(e.value)


# ---------------------------------------------------------------- the verb, its refusals and its outputs


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build("llama", tmp_path_factory.mktemp("zoo"))


def test_circuit_reports_every_edge_the_settled_top_and_the_curve(tiny_dir):
    r = ar.circuit(load(str(tiny_dir)), PAIRS, ig_steps=2, faithfulness=0.5).to_dict()
    assert ar.CircuitResult.validate(r) is None
    assert len(r["edges"]) == r["meta"]["edges"] and {e["edge"] for e in r["edges"]} == set(range(r["meta"]["edges"]))
    c = r["circuit"]
    assert c["checks"]["full"]["max_abs_diff"] < 1e-5 and c["checks"]["empty"]["max_abs_diff"] < 1e-5
    curve = {p["k"]: p["faithfulness"] for p in c["curve"]}
    assert curve[0] == 0.0 and curve[r["meta"]["edges"]] == pytest.approx(1.0)
    chosen = c["chosen"]
    assert chosen["faithfulness"] >= 0.5 and len(chosen["edges"]) == chosen["k"] == len(chosen["labels"])
    measured = [e for e in r["edges"] if e["exact"] is not None]
    settle = r["meta"]["exact"]
    assert settle["measured"] == len(measured) and (settle["settled"] or settle["could_enter"] > 0)
    # a band per receiver channel (issue 53.3): the first round measured each channel's top BAND_MIN
    channel = lambda e: e["receiver"]["channel"] or e["receiver"]["kind"]  # noqa: E731
    sizes = Counter(channel(e) for e in r["edges"])
    seen = Counter(channel(e) for e in measured)
    assert set(settle["bands"]) == set(sizes) and sum(settle["could_enter_by"].values()) == settle["could_enter"]
    for ch, n in sizes.items():
        assert seen[ch] >= min(n, BAND_MIN)
        errors = [abs(e["exact"] - e["estimate"]) for e in measured if channel(e) == ch]
        # with two estimates: the error of one of its measured edges (those of the unmeasured ones' size), at
        # most the channel's largest (tests/read/test_settle.py says which)
        assert min(abs(settle["bands"][ch] - x) for x in errors) < 1e-9 and settle["bands"][ch] <= max(errors)
        assert r["agreement"][ch]["band"] == settle["bands"][ch]
    # EAP beside EAP-IG (ig_steps=2): each channel on the closer of the two, said, with both agreements
    assert set(settle["estimates"]) == set(sizes) and set(settle["estimates"].values()) <= {"EAP", "EAP-IG"}
    assert "per channel" in r["meta"]["estimate"]
    for ch, a in r["agreement"].items():
        assert a["estimate"] == settle["estimates"][ch] and set(a["by_estimate"]) == {"EAP", "EAP-IG"}
    for e in measured:
        assert e["exact"] == pytest.approx(float(np.mean(e["values"])), abs=1e-9)
    zeros = [p["k"] for p in c["curve"] if p["k"] > 0 and p["faithfulness"] == 0.0]
    said = [line for line in r["verdict"]["lines"] if "faithfulness is exactly 0" in line]
    assert len(said) == (1 if zeros else 0)  # a zero on the curve is explained, once; no zero, no word


def test_each_channel_settles_on_the_estimate_closer_to_exact_on_its_first_measured_edges():
    """Issue 53.3: where an estimate disagrees with exact on a channel, that channel switches. On IOI EAP-IG
    narrows q's band (0.75 → 0.42) and widens v's (0.71 → 1.03): one estimate for every channel loses either
    way. Each channel's first 10 by either estimate are measured; it takes the one whose largest error on them
    is smaller."""
    from attnroute.read.circuits.settling import per_channel

    rng = np.random.default_rng(0)
    channels = np.array(["q"] * 40 + ["v"] * 40)
    exact = rng.normal(size=(80, 3))
    ig = exact + np.where(channels == "q", 0.01, 1.0)[:, None] * rng.normal(size=(80, 3))  # close on q only
    ap = exact + np.where(channels == "v", 0.01, 1.0)[:, None] * rng.normal(size=(80, 3))  # close on v only
    measured: list[int] = []
    est, other, chosen, seeds = per_channel(
        {"est": ig, "est_eap": ap}, channels, measured.extend, lambda idx: exact[idx].mean(1)
    )
    assert chosen == {"q": "EAP-IG", "v": "EAP"}
    assert np.array_equal(est[:40], ig[:40]) and np.array_equal(est[40:], ap[40:])
    assert np.array_equal(other[:40], ap[:40]) and np.array_equal(other[40:], ig[40:])  # the bracket: the one not taken
    for ch in ("q", "v"):  # each channel's first 10 by each estimate were measured, once
        mine = np.flatnonzero(channels == ch)
        for e in (ig, ap):
            assert set(mine[np.argsort(-np.abs(e[mine].mean(1)), kind="stable")[:10]].tolist()) <= set(measured)
    assert len(measured) == len(set(measured)) and seeds == measured
    # one estimate only (EAP): nothing measured, nothing chosen
    measured.clear()
    assert per_channel({"est": ap}, channels, measured.extend, None)[1:] == (None, {}, []) and not measured


def test_a_zero_on_the_curve_is_said_to_be_edges_not_yet_connected_to_the_input():
    from attnroute.read.circuits.evaluate import zero_points_said

    curve = [{"k": 0, "faithfulness": 0.0}, {"k": 3, "faithfulness": 0.0}, {"k": 9, "faithfulness": 0.4}]
    said = zero_points_said(curve)
    assert "k = 3" in said and "no path from the embeddings to the logits" in said
    assert zero_points_said([{"k": 0, "faithfulness": 0.0}, {"k": 2, "faithfulness": 1e-9}]) is None


def test_the_edges_asked_for_are_measured_whatever_their_estimate(tiny_dir):
    r = ar.circuit(load(str(tiny_dir)), PAIRS, exact=0, edges=("L0.H3>L1.KV0.k", "embed>logits")).to_dict()
    by = {e["label"]: e for e in r["edges"]}
    assert by["L0.H3>L1.KV0.k"]["exact"] is not None and by["embed>logits"]["exact"] is not None
    assert sum(e["exact"] is not None for e in r["edges"]) == 2
    comp = ar.composition(load(str(tiny_dir))).to_dict()  # the weight-only prior beside each head → head edge
    assert by["L0.H3>L1.KV0.k"]["composition"] == pytest.approx(max(comp["k"][0][3][1][h] for h in (0, 1)))
    assert by["L0.H1>L1.H2.q"]["composition"] == pytest.approx(comp["q"][0][1][1][2])
    assert by["embed>logits"]["composition"] is None and by["L0.MLP>L1.H0.q"]["composition"] is None


def test_path_patch_is_one_edge_of_the_circuit(tiny_dir):
    loaded = load(str(tiny_dir))
    one = ar.path_patch(loaded, PAIRS, sender="L0.H3", receiver="L1.H1", channel="k").to_dict()
    assert one["edge"]["label"] == "L0.H3>L1.KV0.k" and one["edge"]["receiver"]["query_heads"] == [0, 1]
    run = edge_run(loaded)
    (e,) = resolve_edges(run.graph, ["L0.H3>L1.KV0.k"])
    want = (run.measure([e])[0] - run.m_base).numpy()
    np.testing.assert_allclose(one["edge"]["values"], want, atol=1e-6)


def test_a_text_encoder_decoder_runs_whole_and_only_self_attention_heads_get_composition(tmp_path):
    """T5 through ar.circuit: its decoder reads the start token alone, where the weight-only composition once
    replayed position 1 of a one-position stream and crashed. A decoder self-attention head → head edge carries
    ar.composition's score; an edge out of a cross-attention head none (its W_O is not the one scored: it once
    borrowed the self-attention head's)."""
    loaded = load(str(build("t5", tmp_path)))
    r = ar.circuit(loaded, PAIRS, exact=0).to_dict()
    checks = r["circuit"]["checks"]
    assert checks["full"]["max_abs_diff"] < 1e-5 and checks["empty"]["max_abs_diff"] < 1e-5
    comp = ar.composition(loaded).to_dict()
    scored = [e for e in r["edges"] if e["composition"] is not None]
    assert scored and all(e["sender"]["attention"] == e["receiver"]["attention"] == "self" for e in scored)
    e = next(e for e in scored if e["receiver"]["channel"] == "q")
    s, rc = e["sender"], e["receiver"]
    assert e["composition"] == pytest.approx(comp["q"][s["layer"]][s["head"]][rc["layer"]][rc["head"]])
    cross = [e for e in r["edges"] if e["sender"].get("attention") == "cross" and e["receiver"]["kind"] == "head"]
    assert cross and all(e["composition"] is None for e in cross)


MEAN_PAIRS = (
    PromptPair("the cat sat on the mat and", "the dog sat on the mat and", " the", " a"),
    PromptPair("a bird flew over the house and", "a fish flew over the house and", " the", " a", row=2),
    PromptPair("the man ran to the shop and", "the boy ran to the shop and", " the", " a", row=3),
)


def test_mean_ablation_is_the_mean_over_every_prompt_of_a_length_however_the_runs_are_cut(tiny_dir, monkeypatch):
    """The empty circuit under mean ablation reads, at the metric, the clean final residual averaged over all three
    prompts (hooks on transformers' modules below); cut into runs of one prompt each it is the same circuit. Once
    the mean was taken run by run: a run of one prompt ablated nothing, and the verdict crashed on the empty gap."""
    import importlib

    from attnroute.read.ground.pool import chunk_groups

    study = importlib.import_module("attnroute.read.study")
    loaded = load(str(tiny_dir))
    whole = ar.circuit(loaded, MEAN_PAIRS, ablation="mean", exact=0).to_dict()
    # 9 tokens a prompt: one prompt per run (a patch of a constant the pool never read once made this pass
    # without cutting anything: the runs are counted)
    runs = []
    monkeypatch.setattr(study, "RUN_TOKENS", 9)
    monkeypatch.setattr(study, "chunk_groups", lambda g, n: runs.extend(chunk_groups(g, n)) or runs)
    cut = ar.circuit(loaded, MEAN_PAIRS, ablation="mean", exact=0).to_dict()
    assert len(runs) == len(MEAN_PAIRS) == 3
    assert [c["m"] for c in cut["circuit"]["curve"]] == pytest.approx(
        [c["m"] for c in whole["circuit"]["curve"]], abs=1e-5
    )
    model, tok = loaded.model, loaded.tokenizer
    ids = torch.cat([tok(p.clean, return_tensors="pt").input_ids for p in MEAN_PAIRS])
    assert ids.shape[1] == 9
    final = {}
    hook = model.model.norm.register_forward_hook(lambda m, a, o: final.__setitem__("x", a[0]))
    with torch.no_grad():
        model(input_ids=ids)
        hook.remove()
        logits = model.lm_head(model.model.norm(final["x"].mean(0, keepdim=True)))[0, -1]
    the, a = (tok(w, add_special_tokens=False).input_ids[0] for w in (" the", " a"))
    empty = whole["circuit"]["curve"][0]
    assert empty["k"] == 0 and empty["m"] == pytest.approx(float(logits[the] - logits[a]), abs=1e-4)
    assert whole["circuit"]["checks"]["full"]["max_abs_diff"] < 1e-5


class _Pool(list):
    """RunPool's interface over runs already made."""

    def get(self, i):
        return self[i]

    def done(self, i):
        pass


class _Ranks:
    """Shard.gather as rank 0 of ``world`` sees it: its own items, then those the other ranks sent."""

    def __init__(self, world=1, others=()):
        self.world, self.others, self.sent = world, list(others), None

    def gather(self, values):
        self.sent = list(values)
        return [*values, *self.others]


def test_group_means_add_the_prompts_of_every_rank(tiny_dir):
    """Prompts 0 and 2 on rank 0, prompt 1 on rank 1: the means rank 0 keeps are those of one process holding
    all three — for every sender's write and every read point — and each is the plain mean of the clean runs."""
    from attnroute.read.circuits.means import GroupMeans
    from attnroute.read.circuits.stream import read_value, sender_writes

    loaded = load(str(tiny_dir))
    runs = [edge_run(loaded, (p,)) for p in MEAN_PAIRS]  # one run a prompt, one layout and graph between them
    layout, graph = runs[0].layout, runs[0].graph
    say = lambda *a, **k: None  # noqa: E731
    one = GroupMeans(layout, graph)
    one.fill(_Pool(runs), _Ranks(), say)
    rank1 = _Ranks()
    GroupMeans(layout, graph).fill(_Pool(runs[1:2]), rank1, say)
    split = GroupMeans(layout, graph)
    split.fill(_Pool([runs[0], runs[2]]), _Ranks(2, rank1.sent), say)
    for a, b in zip(one.means[9], split.means[9], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    embed = next(i for i, x in enumerate(graph.senders) if x.kind == "embed")
    plain = torch.stack([sender_writes(layout, graph, r.clean, "decoder", None, "embed")[embed][0] for r in runs])
    torch.testing.assert_close(split.write(9, embed)[0], plain.mean(0), rtol=0, atol=1e-6)
    logits = next(j for j, x in enumerate(graph.receivers) if x.kind == "logits")
    final = torch.stack([read_value(layout, r.clean, graph.receivers[logits])[0] for r in runs])
    torch.testing.assert_close(split.read(9, logits)[0], final.mean(0), rtol=0, atol=1e-6)


def test_mean_ablation_of_a_prompt_alone_at_its_length_is_refused_before_the_model_loads(capsys, no_model_load):
    argv = ["circuit", "--clean", "The cat sat on the", "--corrupt", "The dog sat on the", "--ablation", "mean"]
    assert main([*argv, "--answer", " mat", "--wrong", " rug"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "alone at its length" in err[0] and "--ablation corrupt" in err[0], err


REFUSED = [
    (["--ig-steps", "0"], "--ig-steps"),
    (["--faithfulness", "1.5"], "--faithfulness"),
    (["--ablation", "zero"], "--ablation"),
    (["--limit", "0"], "--limit"),
    (["--edges", ","], "--edges"),
    (["--edges", "L1.H0"], "--edges"),
    (["--edges", "L99.H0>logits"], "--edges"),
    (["--direction", "sideways"], "--direction"),
    (["--exact", "some"], "--exact must be settle, all or a number of edges"),
    (["--edges", "L5.H1>L18.H6.k"], "--edges: edge 'L5.H1>L18.H6.k': keys and values are read by kv heads"),
]


@pytest.mark.parametrize("extra, flag", REFUSED)
def test_every_circuit_flag_is_refused_in_one_line_before_the_model_loads(extra, flag, capsys, no_model_load):
    assert main(["circuit", "--prompts", "ioi", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {flag}"), err


def test_the_cli_writes_json_csv_and_the_graph_and_report_draws_it(tiny_dir, tmp_path, capsys):
    prompts = tmp_path / "pairs.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"clean": p.clean, "corrupt": p.corrupt, "answer": " the", "wrong": " a"}) + "\n" for p in PAIRS
        )
    )
    js, cs, png = tmp_path / "c.json", tmp_path / "c.csv", tmp_path / "c.png"
    argv = [
        "circuit",
        "--model",
        str(tiny_dir),
        "--prompts",
        str(prompts),
        "--json",
        str(js),
        "--csv",
        str(cs),
        "--plot",
        str(png),
    ]
    assert main(argv) == 0, capsys.readouterr().err
    d = json.loads(js.read_text())
    assert ar.CircuitResult.validate(d) is None
    assert cs.read_text().count("\n") == len(d["edges"]) + 1 and png.read_bytes()[:4] == b"\x89PNG"
    out = capsys.readouterr().out
    assert "faithfulness of the top k edges" in out and "top edges by |exact|" in out
    from attnroute.show import sections
    from attnroute.show.circuit import Places, node_labels

    rows = sorted(d["edges"], key=lambda e: -abs(e["exact"] if e["exact"] is not None else e["estimate"]))
    named = set(node_labels(rows, Places(d["meta"])).values())  # the figure names the strongest edges' ends
    top_sender, top_receiver = rows[0]["label"].split(">")
    assert top_sender in named and (top_receiver in named or top_receiver.rsplit(".", 1)[0] in named)
    assert "Circuit" in sections.load(js, "add")
    d["rows"][0]["sender"]["layer"] = 10**6  # the table (its alias "edges" is not read)
    js.write_text(json.dumps(d))
    with pytest.raises(InputError, match="rows\\[\\].sender.layer"):
        sections.load(js, "add")


def test_a_checkpoint_resumes_under_another_number_of_ranks_and_equals_one_run(tiny_dir, tmp_path, monkeypatch):
    """One process writes the checkpoint and is stopped mid-settling (the prompts' three lengths are three runs:
    Ctrl-C in the second round); two gloo ranks resume it: every number equals an uninterrupted run."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import attnroute.read.circuits.runs as runs

    prompts = tmp_path / "pairs.jsonl"
    rows = [("the cat sat on the mat and", "the dog sat on the mat and"), ("we saw a film and", "we saw a play and")]
    rows += [("she read the old book and", "she read the new book and")]
    prompts.write_text(
        "".join(json.dumps({"clean": c, "corrupt": x, "answer": " the", "wrong": " a"}) + "\n" for c, x in rows)
    )
    ck, one, two = tmp_path / "c.ck", tmp_path / "one.json", tmp_path / "two.json"
    base = ["circuit", "--model", str(tiny_dir), "--prompts", str(prompts), "--limit", "100"]
    assert main([*base, "--json", str(one)]) == 0
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    measure, calls = runs.EdgeRun.measure, []

    def stopped(self, edges, scale=1.0):  # a round measures each of the three runs: Ctrl-C in the second
        if len(calls) >= 3:
            raise KeyboardInterrupt
        calls.append(len(edges))
        return measure(self, edges, scale)

    monkeypatch.setattr(runs.EdgeRun, "measure", stopped)
    assert main([*base, "--checkpoint", str(ck)]) == 130 and ck.exists()  # in this process: no second start-up
    monkeypatch.undo()
    torchrun = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc-per-node", "2"]
    done = subprocess.run(
        [*torchrun, "-m", "attnroute", *base, "--checkpoint", str(ck), "--json", str(two)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert b["meta"]["ranks"] == 2 and b["meta"]["resumed"]["components_measured"] > 0
    by = {e["edge"]: e for e in b["edges"]}
    for e in a["edges"]:
        f = by[e["edge"]]
        assert (e["exact"] is None) == (f["exact"] is None)
        if e["exact"] is not None:
            assert f["values"] == pytest.approx(e["values"], abs=1e-5)
        assert f["estimate_values"] == pytest.approx(e["estimate_values"], abs=1e-5) if e["estimate_values"] else True
    assert [p["m"] for p in b["circuit"]["curve"]] == pytest.approx([p["m"] for p in a["circuit"]["curve"]], abs=1e-5)


# ---------------------------------------------------------------- a circuit run whole, by the documented formula


@torch.no_grad()
def _whole_by_hooks(model, clean, corrupt, edges, writes_of: str) -> torch.Tensor:
    """docs/circuits.md's formula by hooks: on the clean prompt, every receiver reads x_R(ablated) + Σ over the
    circuit's edges into it of (w_S − w_S(ablated)), w_S the sender's write in this very forward
    (``writes_of`` "now"; "clean": its write in the clean run — what the docs once said, for contrast)."""
    L = len(model.model.layers)
    ab, cl = _record(model, corrupt), _record(model, clean)
    final_ab = {}
    h = model.model.norm.register_forward_pre_hook(lambda m, a: final_ab.__setitem__("x", a[0]))
    model(input_ids=corrupt, attention_mask=torch.ones_like(corrupt))
    h.remove()
    now: dict = {}
    into: dict = {}
    for sender, receiver in edges:
        into.setdefault(receiver, []).append(sender)

    def corr(receiver):
        src = now if writes_of == "now" else cl
        return sum(
            (_write(model, src, *s) - _write(model, ab, *s) for s in into.get(receiver, [])),
            torch.zeros_like(ab[("x", 0)]),
        )

    hooks = []
    for l in range(L):
        p = _parts(model, l)
        hooks.append(
            p["layer"].register_forward_pre_hook(
                lambda m, a, k, l=l: now.__setitem__(("x", l), _x(a, k)), with_kwargs=True
            )
        )
        for ch, units in (
            ("q", model.config.num_attention_heads),
            ("k", model.config.num_key_value_heads),
            ("v", model.config.num_key_value_heads),
        ):
            D = p[ch].weight.shape[0] // units

            def swap(m, a, out, l=l, ch=ch, units=units, D=D, p=p):
                out = out.clone()
                for u in range(units):
                    fresh = p[ch].forward(p["attn_norm"].forward(ab[("x", l)] + corr(("head", l, u, ch))))
                    out[..., u * D : (u + 1) * D] = fresh[..., u * D : (u + 1) * D]
                return out

            hooks.append(p[ch].register_forward_hook(swap))
        hooks.append(p["o"].register_forward_pre_hook(lambda m, a, l=l: now.__setitem__(("z", l), a[0])))
        mid_ab = ab[("x", l)] + ab[("o", l)]  # the residual an MLP reads: the block's input plus its attention
        hooks.append(
            p["mlp"].register_forward_pre_hook(
                lambda m, a, l=l, p=p, mid_ab=mid_ab: (p["mlp_norm"].forward(mid_ab + corr(("mlp", l, None, None))),)
            )
        )
        hooks.append(p["mlp"].register_forward_hook(lambda m, a, o, l=l: now.__setitem__(("mlp", l), _first(o))))
    hooks.append(
        model.model.norm.register_forward_pre_hook(lambda m, a: (final_ab["x"] + corr(("logits", None, None, None)),))
    )
    try:
        out = model(input_ids=clean, attention_mask=torch.ones_like(clean))
    finally:
        for hk in hooks:
            hk.remove()
    return out.logits


def test_a_circuit_run_whole_is_the_documented_formula_with_this_runs_writes(tmp_path):
    """docs/circuits.md wrote a circuit's input with the clean run's writes; the code uses the writes of the
    circuit's own forward. The formula as now written reproduces the code's circuit metric; the old one does not."""
    loaded = load(str(build("llama", tmp_path)))
    run = edge_run(loaded, pairs=PAIRS[:1])
    rng = np.random.default_rng(0)
    mask = rng.random(len(run.graph)) < 0.5  # half the edges: paths from the embeddings reach the logits
    circuit = [_as_tuples(*run.graph.edge(e)) for e in np.flatnonzero(mask)]
    code = float(run.circuits([mask])[0, 0])
    g = run.group
    fields = {"answer": g.answer, "wrong": g.wrong}
    as_written = float(logit_diff(_whole_by_hooks(loaded.model, g.clean, g.corrupt, circuit, "now"), fields)[0])
    old = float(logit_diff(_whole_by_hooks(loaded.model, g.clean, g.corrupt, circuit, "clean"), fields)[0])
    assert abs(code - float(run.m_corrupt[0])) > 1e-2  # the circuit moves the metric: the test can tell formulas apart
    assert abs(code - as_written) < 1e-4, (code, as_written)
    assert abs(code - old) > 1e-3, (code, old)  # the clean run's writes would give another number


def _as_tuples(sender, receiver) -> tuple:
    """A graph edge as the hooks reference names its ends: (kind, layer, head), (kind, layer, unit, channel)."""
    return (sender.kind, sender.layer, sender.head), (receiver.kind, receiver.layer, receiver.head, receiver.channel)


@pytest.mark.parametrize("used", [0, 1, 3, 5, 12, 40])
def test_a_circuits_sum_over_a_few_senders_equals_the_whole_product(used):
    """runs._add_sum gathers the rows of D some coefficient uses (at most 1 in SPARSE of them) and multiplies
    the whole block otherwise: either way out += c @ D, on a strided view of the stream's rows as a circuit
    forward holds them [S, copies, size]."""
    from attnroute.read.circuits.runs import _add_sum

    g = torch.Generator().manual_seed(used)
    S, copies, U, size = 40, 3, 5, 33
    rows = torch.randn(S, copies, size, generator=g)
    c = torch.zeros(U, S)
    cols = torch.randperm(S, generator=g)[:used]
    c[:, cols] = torch.randn(U, used, generator=g)
    start = torch.randn(U, size, generator=g)
    out = start.clone()
    _add_sum(out, c, rows[:, 1])
    torch.testing.assert_close(out, start + c @ rows[:, 1], atol=1e-5, rtol=1e-6)
