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
from ..ground.budget import scaled
from ..ground.norms import norm_form
from ..ground.recompute import checkpointed
from ..hooks import Hooks
from . import qkfix
from .headvjp import check_fused, fused_through_norm, head_vjp, linear_taps, norm_vjp
from .products import Products
from .qkfix import QK_LAYERS, affordable, chosen_blocks, qk_block
from .stream import Forward, _first, _replace_first, _tensor


def eap(run, ig_steps: int = 1, say=None, qk_fix: bool | None = None, blocks: list | None = None) -> np.ndarray:
    """Every edge's estimate per prompt, [E, n] (metric units: M_patched − M_base). ``qk_fix``: the q, k and v
    edges of self-attention through the head's softmax exactly (qkfix.py): True for every layer within the
    budget, None for the layers that matter most (QK_LAYERS) of those, False for none; ``blocks``: those
    layers chosen already (over the group this run was cut from: circuit.py).
    Value edges stay linear either way: the head's output is linear in its values given the pattern."""
    scores = torch.zeros(len(run.graph), run.n, dtype=torch.float64)
    starts = {s: _start_delta(run, s) for s in run.layout.streams}
    fix = bool(blocks) if blocks is not None else affordable(run) if qk_fix is None else qk_fix
    fixed: list = []
    # the estimate is linear in the receivers' gradients, so over IG steps they are summed first and the
    # product with the senders' deltas — the costliest part of a pass — is taken once (where they fit)
    summed: dict | None = {} if ig_steps > 1 and _gradient_bytes(run) <= scaled(SUM_BYTES) else None
    products = Products(run, scores)
    per = 1 if fix else _steps_per_pass(run, ig_steps)  # the QK fix reads one pass's own q, k: a step a pass
    for k in range(0, ig_steps, per):
        alphas = [i / ig_steps for i in range(k, min(ig_steps, k + per))]
        interp = {s: _toward(d, alphas) for s, d in starts.items()} if alphas != [0.0] else {}
        grad = GradPass(run, interp, copies=len(alphas))
        if fix and not k:  # the layers are chosen once, at the base run (qkfix.py)
            fixed = blocks or chosen_blocks(run, grad, len(run.layout.blocks) if qk_fix else QK_LAYERS)
        for rs, grads in grad.receivers(skip={(b.stream, b.index) for b in fixed}):
            if summed is None:
                products.add(rs, grads)
            else:
                key = tuple(rs)
                summed[key] = summed[key] + grads if key in summed else grads
        products.flush()  # before the QK fix adds its own, and before this pass's gradients are let go
        for b in fixed:
            qk_block(run, grad, b, scores)
        del grad  # let this pass go before the next is made: else both are held while the next runs its backward
        if say:
            done = k + len(alphas)
            say("estimate", f"edge attribution: step {done} of {ig_steps}", done=done, total=ig_steps)
    for rs, grads in (summed or {}).items():
        products.add(rs, grads)
    products.flush()
    run.qk_fixed = sorted(b.attn.layer for b in fixed)
    return (scores / ig_steps).numpy()


def chosen_over(runs, n: int, count: int | None = None) -> list:
    """The QK fix's layers for a group of ``n`` prompts cut into ``runs`` (an iterable): each block's effect
    summed over every run's prompts, then chosen as chosen_blocks chooses on one run of them all — so a group
    gets the same layers however finely a memory cap cuts it (within QK_BUDGET counted on the group's n)."""
    count = QK_LAYERS if count is None else count
    sums: dict = {}
    blocks: list = []
    for run in runs:
        blocks = blocks or qkfix.candidates(run, n)
        if len(blocks) <= count:
            return blocks
        grad = GradPass(run, {}, copies=1)
        for key, per in qkfix.effect_sums(run, grad, blocks).items():
            sums[key] = per if key not in sums else {ch: sums[key][ch] + e for ch, e in per.items()}
        del grad  # before the next run's pass is made: these runs are a memory cap's cut
    return qkfix.choose(blocks, sums, n, count) if sums else []


# the receivers' gradients summed over IG steps when they fit in this: at 1 GiB the default circuit of IOI (EAP-IG
# beside EAP) peaked at 3.69 GiB, at 256 MiB at 3.44 (EAP alone: 3.49) for 11 s more CPU (docs/benchmarks.md)
SUM_BYTES = 1 << 28
STEP_TOKENS = 2048  # IG steps stacked along the batch of one pass up to this many tokens (steps × prompts × length)
RECOMPUTE_FROM = 2048  # tokens (prompts × length): past this the gradient pass recomputes each block's activations


def _gradient_bytes(run) -> int:
    """Every receiver's gradient [n, T, d] at once, in float32."""
    x = run.base[(run.layout.streams[-1], 0)]["x_in"]
    return len(run.graph.receivers) * x.numel() * 4


def _steps_per_pass(run, ig_steps: int) -> int:
    """IG steps one gradient pass takes at once, as copies of the prompts (fewer, larger products)."""
    return max(1, min(ig_steps, scaled(STEP_TOKENS) // max(1, run.n * run.group.length)))


def _toward(delta: torch.Tensor, alphas: list[float]):
    """The stream start of c stacked copies of the prompts [c·n, T, d], copy i moved by alphas[i] toward the
    source (delta [n, T, d])."""
    a = torch.tensor(alphas, dtype=torch.float64)

    def move(x):
        return x + (a.to(x.dtype).view(-1, 1, 1, 1) * delta.to(x.dtype)[None]).reshape(x.shape)

    return move


def _start_delta(run, stream: str) -> torch.Tensor:
    """The stream's start (its embeddings) on the source run less the base run's, [n, T, d]."""
    return run.source[(stream, 0)]["x_in"] - run.base[(stream, 0)]["x_in"]


class GradPass:
    """One forward and one backward on the base run (its stream starts interpolated as asked; ``copies`` of
    the prompts, one per IG step, whose receivers' gradients are summed).

    The forward runs the model's own attention kernel where it can (fused, O(T) memory): the metric's
    gradients at each layer's q, k, v and head outputs are caught by hooks on those tensors, and a zero leaf
    at each stream's start puts every one of them on a path to a requested input. Kept: the recorded stream
    (``rec``), per attention layer its q, k, v, head outputs and their gradients, and what attend received."""

    def __init__(self, run, interpolate: dict, copies: int = 1):
        self.run, self.copies = run, copies
        layout, graph = run.layout, run.graph
        starts = {s: torch.zeros((), dtype=torch.float32, requires_grad=True) for s in layout.streams}
        interp = {s: _with_leaf(interpolate.get(s), leaf) for s, leaf in starts.items()}
        self.leaves: dict[int, torch.Tensor] = {}
        self.grads: dict[tuple[int, str], torch.Tensor] = {}  # (layer, q|k|v|out) -> ∂ΣM/∂ that tensor
        self.values: dict[tuple[int, str], torch.Tensor] = {}
        self.ctx: dict[int, tuple] = {}  # layer -> (mask, engine arguments)
        hooks_in = [_catch(self.grads, self.values)]
        long = copies * run.n * run.group.length >= RECOMPUTE_FROM
        with (
            torch.enable_grad(),
            checkpointed(run.loaded, long),
            Forward(layout, graph, interpolate=interp, writes=False) as fw,
            Hooks() as hooks,
        ):
            _leaf_hooks(hooks, run, self.leaves)
            inputs = [*starts.values()]

            def backward(out):
                total = run._metric_value(out, run.base_ids, copies).sum()
                inputs.extend(self.leaves.values())  # the leaves exist once the forward has run
                return torch.autograd.grad(total, inputs, allow_unused=True)

            grads = run._forward(
                run.base_ids,
                fw,
                copies,
                before_attend=hooks_in,
                after_attend=[_catch_out(self.grads, self.values)],
                on_attend=[lambda layer, mask, args: self.ctx.setdefault(layer, (mask, args))],
                then=backward,
            )
        self.rec = fw.rec
        self.leaf_grads = {
            j: (torch.zeros_like(x) if d is None else d)
            for (j, x), d in zip(self.leaves.items(), grads[len(starts) :], strict=True)
        }

    def receivers(self, skip: set | frozenset = frozenset()):
        """Yields (receivers, their ∂ΣM/∂x_R [r, n, T, d]) one read point at a time: one block's gradients
        held at a time, never every receiver's. ``skip``: blocks (stream, index) whose self-attention q and k
        receivers are left out (the QK fix estimates those)."""
        run, checked = self.run, {}
        with routed(run.loaded, impl="eager"):
            for b in run.layout.blocks:
                for a in (b.attn, b.cross):
                    if a is not None:
                        left = ("q", "k") if (b.stream, b.index) in skip and not a.cross else ()
                        grads = _attention_grads(
                            run, self.rec, b, a, self.grads, checked=checked, copies=self.copies, skip=left
                        )
                        yield from grads.items()
        for j, g in self.leaf_grads.items():
            yield [j], _fold(_through_norm(run, self.rec, j, g)[None], self.copies)


def _fold(g: torch.Tensor, copies: int) -> torch.Tensor:
    """[r, c·n, T, d] -> [r, n, T, d]: the stacked steps' gradients summed (the estimate is linear in them)."""
    return g if copies == 1 else g.unflatten(1, (copies, -1)).sum(1)


def receiver_grads(run, interpolate: dict):
    """Every receiver's ∂ΣM/∂x_R, one read point at a time (GradPass.receivers)."""
    yield from GradPass(run, interpolate).receivers()


def _with_leaf(interp, leaf):
    return lambda x: (interp(x) if interp is not None else x) + leaf.to(x.dtype)


def _catch(grads: dict, values: dict):
    """A before_attend hook: the q, k, v an attention call receives, and the metric's gradients at them."""

    def hook(layer, module, q, k, v):
        if (layer, "q") in values:  # a checkpointed block's recomputation: the forward's tensors carry the gradient
            return
        for name, t in (("q", q), ("k", k), ("v", v)):
            values[(layer, name)] = t.detach()
            grads[(layer, name)] = torch.zeros_like(t)
            if t.requires_grad:
                t.register_hook(lambda grad, key=(layer, name): grads.__setitem__(key, grad.detach()))

    return hook


def _catch_out(grads: dict, values: dict):
    """An after_attend hook: the head outputs [B, H, T, Dv], and the metric's gradient at them."""

    def hook(layer, out):
        if (layer, "out") in values:  # a recomputation (as above)
            return out
        values[(layer, "out")] = out.detach()
        grads[(layer, "out")] = torch.zeros_like(out)
        if out.requires_grad:
            out.register_hook(lambda grad: grads.__setitem__((layer, "out"), grad.detach()))
        return out

    return hook


def _leaf_hooks(hooks: Hooks, run, leaves: dict) -> None:
    """Zero leaves at every MLP's input and at the final residual: their gradients are ∂M/∂(those inputs)."""
    graph, layout = run.graph, run.layout
    for j, r in enumerate(graph.receivers):
        if r.kind == "mlp":
            hooks.before(layout.stack(r.stream)[r.layer].mlp_in, _add_leaf_pre(leaves, j), kwargs=True)
        elif r.kind == "logits":
            hooks.after(layout.stack(r.stream)[-1].module, _add_leaf_post(leaves, j))


def _add_leaf_pre(leaves: dict, j: int):
    def hook(m, args, kwargs):
        x = _first(args, kwargs)
        if j not in leaves:  # a recomputation adds the same leaf again
            leaves[j] = torch.zeros_like(x, requires_grad=True)
        return _replace_first(args, kwargs, x + leaves[j])

    return hook


def _add_leaf_post(leaves: dict, j: int):
    def hook(m, args, out):
        x = _tensor(out)
        if j not in leaves:
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


def _attention_grads(
    run, rec, b, a, qkv: dict, *, checked: dict, copies: int, skip: tuple = ()
) -> dict[tuple, torch.Tensor]:
    """The q, k, v receivers of one attention sublayer by the point they read: {(receivers): [r, n, T, d]}
    (not those of the channels in ``skip``). ``checked``: headvjp's structure checks, per attention class."""
    graph = run.graph
    mine = [
        j
        for j in graph.receivers_of("decoder" if a.cross else b.stream, b.index)
        if graph.receivers[j].kind == "head"
        and graph.receivers[j].attention == ("cross" if a.cross else "self")
        and graph.receivers[j].channel not in skip
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
            normed = norm.forward(x) if norm is not None else x
            n = normed.detach().requires_grad_()  # the projections' input: their backward is taken by head
            form = norm_form(norm, x.detach(), normed.detach()) if norm is not None else None
            with linear_taps(a.module) as taps:
                q, k, v = replay(a.module, args, kwargs, **{key: n})
            fresh = {"q": q, "k": k, "v": v}
            got = []
            for ch in ("q", "k", "v"):  # one batched vector-Jacobian product per channel: a row per receiver
                mine = [j for j in ids if graph.receivers[j].channel == ch]
                if not mine:
                    continue
                units = [graph.receivers[j].head for j in mine]
                cot = qkv[(a.layer, ch)].to(fresh[ch].dtype)  # [B, H, T, D]: every head's; each receiver's own
                key = (type(a.module), a.cross, side, ch)
                y = fresh[ch]
                g = fused_through_norm(y, n, cot, units, taps, form, copies=copies, memo=checked, key=key)
                if g is None or not check_fused(g, normed, x, y, n, cot, units, copies=copies, memo=checked, key=key):
                    gn = head_vjp(y, n, cot, units, taps, checked, key)
                    # then through the norm (none: the read point is the projections' input)
                    g = _fold(gn if norm is None else norm_vjp(normed, x, gn, form, checked, type(norm)), copies)
                got += list(g)
        out[tuple(j for ch in ("q", "k", "v") for j in ids if graph.receivers[j].channel == ch)] = torch.stack(got)
    return out


def _read_point(run, rec: dict, b, a, side: str):
    """(the residual a side of an attention reads, the norm it goes through, the call's argument for it)."""
    if side == "kv":  # a cross-attention's keys and values: the encoder's final residual and final norm
        enc = run.layout.stack("encoder")[-1]
        return rec[("encoder", enc.index)]["x_out"], run.layout.final_norms.get("encoder"), "key_value_states"
    r = rec[(b.stream, b.index)]
    return (r["x_cross"] if a.cross else r["x_in"]), a.norm, "hidden_states"


__all__ = ["GradPass", "eap", "receiver_grads"]
