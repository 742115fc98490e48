"""Edge attribution: every edge's estimated effect from forward and backward passes (EAP, EAP-IG).

    est(S → R)[prompt] = Σ_t Δ_S[t] · g_R[t],   g_R = ∂M/∂x_R on the base run (EAP, Syed et al. 2310.10348)

averaged over m runs whose stream starts are interpolated from the base run toward the source at
α = 0, 1/m, …, (m − 1)/m (EAP-IG, Hanna et al. 2403.17806; m = 1 is EAP). One backward gives the metric's
gradient at every head's q, k and v and every MLP's input; each receiver's gradient at its *residual*
input x_R is that gradient taken back through the receiver's own norm and projections alone (a replay of
its attention module from the recorded input: the vector–Jacobian product of one head's q, or one kv
head's k or v). Grouped kv heads stay grouped: a k or v receiver is the kv head, and its gradient sums over
the query heads that read it. The scores are contractions over (position, feature) of the senders' deltas
[senders of a block, n, T, d] with the receivers' gradients [receivers of a block, n, T, d], block pair by
block pair — nothing the size of an edge × positions × features is ever held.
"""

from __future__ import annotations

import numpy as np
import torch

from ..adapter import replay, routed
from ..ground.taps import Tap
from .stream import Forward, _first, _replace_first, _tensor


def eap(run, ig_steps: int = 1, say=None) -> np.ndarray:
    """Every edge's estimate per prompt, [E, n] (metric units: M_patched − M_base)."""
    scores = torch.zeros(len(run.graph), run.n, dtype=torch.float64)
    starts = {s: _start_delta(run, s) for s in run.layout.streams}
    for k in range(ig_steps):
        interp = {s: _toward(d, k / ig_steps) for s, d in starts.items()} if k else {}
        for rs, grads in receiver_grads(run, interp):
            _accumulate(run, rs, grads, scores)
        if say:
            say("estimate", f"edge attribution: pass {k + 1} of {ig_steps}", done=k + 1, total=ig_steps)
    return (scores / ig_steps).numpy()


def _toward(delta: torch.Tensor, alpha: float):
    return lambda x: x + alpha * delta.to(x.dtype)


def _start_delta(run, stream: str) -> torch.Tensor:
    """The stream's start (its embeddings) on the source run less the base run's, [n, T, d]."""
    return run.source[(stream, 0)]["x_in"] - run.base[(stream, 0)]["x_in"]


def receiver_grads(run, interpolate: dict):
    """Yields (receivers, their ∂ΣM/∂x_R [r, n, T, d]) one read point at a time, on the base run (its stream
    starts interpolated as asked): one block's gradients are held at a time, never every receiver's."""
    loaded, layout, graph = run.loaded, run.layout, run.graph
    taps = [Tap(a.layer) for b in layout.blocks for a in (b.attn, b.cross) if a]
    leaves: dict[int, torch.Tensor] = {}
    with torch.enable_grad(), Forward(layout, graph, interpolate=interpolate) as fw:
        hooks = _leaf_hooks(run, leaves)
        try:
            out = run._forward(run.base_ids, fw, interventions=taps)
            total = run._metric_value(out, run.base_ids).sum()
            inputs = [t.leaves[n] for t in taps for n in ("q", "k", "v")] + list(leaves.values())
            grads = torch.autograd.grad(total, inputs, allow_unused=True)
        finally:
            for h in hooks:
                h.remove()
    g = {id(x): (torch.zeros_like(x) if d is None else d) for x, d in zip(inputs, grads, strict=True)}
    del out, total, grads
    tap_of = {t.layer: t for t in taps}
    with routed(loaded, impl="eager"):
        for b in layout.blocks:
            for a in (b.attn, b.cross):
                if a is not None:
                    yield from _attention_grads(run, fw.rec, b, a, tap_of[a.layer], g).items()
    for j, leaf in leaves.items():
        yield [j], _through_norm(run, fw.rec, j, g[id(leaf)])[None]


def _leaf_hooks(run, leaves: dict) -> list:
    """Zero leaves at every MLP's input and at the final residual: their gradients are ∂M/∂(those inputs)."""
    graph, layout, hooks = run.graph, run.layout, []
    for j, r in enumerate(graph.receivers):
        if r.kind == "mlp":
            b = layout.stack(r.stream)[r.layer]
            hooks.append(b.mlp_in.register_forward_pre_hook(_add_leaf_pre(leaves, j), with_kwargs=True))
        elif r.kind == "logits":
            last = layout.stack(r.stream)[-1].module
            hooks.append(last.register_forward_hook(_add_leaf_post(leaves, j)))
    return hooks


def _add_leaf_pre(leaves: dict, j: int):
    def hook(m, args, kwargs):
        x = _first(args, kwargs)
        leaves[j] = torch.zeros_like(x, requires_grad=True)
        return _replace_first(args, kwargs, x + leaves[j])

    return hook


def _add_leaf_post(leaves: dict, j: int):
    def hook(m, args, out):
        x = _tensor(out)
        leaves[j] = torch.zeros_like(x, requires_grad=True)
        y = x + leaves[j]
        return (y, *out[1:]) if isinstance(out, tuple) else y

    return hook


def _through_norm(run, rec: dict, j: int, g: torch.Tensor) -> torch.Tensor:
    """An MLP receiver's gradient taken back through its norm; the final residual's as it is."""
    r = run.graph.receivers[j]
    if r.kind == "logits":
        return g.detach()
    b = run.layout.stack(r.stream)[r.layer]
    x = rec[(r.stream, r.layer)]["x_mlp"].detach().requires_grad_()
    with torch.enable_grad():
        y = b.mlp_norm.forward(x)
        (gx,) = torch.autograd.grad(y, x, grad_outputs=g.reshape(y.shape))
    return gx


def _attention_grads(run, rec: dict, b, a, tap, g: dict) -> dict[tuple, torch.Tensor]:
    """The q, k, v receivers of one attention sublayer by the point they read: {(receivers): [r, n, T, d]}."""
    graph = run.graph
    mine = [
        j
        for j in graph.receivers_of("decoder" if a.cross else b.stream, b.index)
        if graph.receivers[j].kind == "head" and graph.receivers[j].attention == ("cross" if a.cross else "self")
    ]
    sides = {"x": [j for j in mine if not a.cross or graph.receivers[j].channel == "q"]}
    if a.cross:
        sides["kv"] = [j for j in mine if graph.receivers[j].channel != "q"]
    args, kwargs = rec[(b.stream, b.index)]["ccall" if a.cross else "call"]
    out = {}
    for side, ids in sides.items():
        x0, norm, key = _read_point(run, rec, b, a, side)
        x = x0.detach().requires_grad_()
        with torch.enable_grad():
            q, k, v = replay(a.module, args, kwargs, **{key: norm.forward(x) if norm is not None else x})
            fresh = {"q": q, "k": k, "v": v}
            got = []
            for ch in ("q", "k", "v"):  # one batched vector-Jacobian product per channel: a row per receiver
                mine = [j for j in ids if graph.receivers[j].channel == ch]
                if not mine:
                    continue
                grad_out = torch.zeros((len(mine), *fresh[ch].shape), dtype=fresh[ch].dtype)
                for i, j in enumerate(mine):
                    unit = graph.receivers[j].head
                    grad_out[i, :, unit] = g[id(tap.leaves[ch])][:, unit].to(grad_out.dtype)
                got += list(_vjp(fresh[ch], x, grad_out))
        out[tuple(j for ch in ("q", "k", "v") for j in ids if graph.receivers[j].channel == ch)] = torch.stack(got)
    return out


def _vjp(y: torch.Tensor, x: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    """[k, *x.shape]: the vector-Jacobian products of y at x for each of k cotangents (batched through
    autograd's vmap; one backward at a time where an operation of the model does not batch)."""
    try:
        return torch.autograd.grad(y, x, grad_outputs=grad_out, retain_graph=True, is_grads_batched=True)[0]
    except RuntimeError:
        return torch.stack([torch.autograd.grad(y, x, grad_outputs=go, retain_graph=True)[0] for go in grad_out])


def _read_point(run, rec: dict, b, a, side: str):
    """(the residual a side of an attention reads, the norm it goes through, the call's argument for it)."""
    if side == "kv":  # a cross-attention's keys and values: the encoder's final residual and final norm
        enc = run.layout.stack("encoder")[-1]
        return rec[("encoder", enc.index)]["x_out"], run.layout.final_norms.get("encoder"), "key_value_states"
    r = rec[(b.stream, b.index)]
    return (r["x_cross"] if a.cross else r["x_in"]), a.norm, "hidden_states"


def _accumulate(run, rs, G: torch.Tensor, scores: torch.Tensor) -> None:
    """scores[e] += Σ_{t,d} Δ_S · g_R per prompt for receivers ``rs`` (their gradients G [r, n, T, d]): one
    batched matrix product per part of senders (a block's heads, its MLP) that reaches them."""
    rs = np.asarray(list(rs))
    G = G.flatten(2).transpose(0, 1)  # (n, r, T·d)
    for part, ss in run.sender_parts().items():
        idx = run.graph.matrix[np.ix_(ss, rs)]  # (s, r) edge indices, −1 where the sender writes too late
        if (idx < 0).all():
            continue
        ids, D = run.part_deltas(part)  # (s, n, T, d), in the order of ids (= ss)
        S = torch.bmm(D.flatten(2).transpose(0, 1), G.transpose(1, 2))  # (n, s, r)
        ok = torch.from_numpy(idx >= 0)
        scores.index_add_(0, torch.from_numpy(idx[idx >= 0]), S.permute(1, 2, 0)[ok].double())


__all__ = ["eap", "receiver_grads"]
