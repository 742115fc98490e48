"""Direct effects (direct logit attribution): what each head writes straight onto the answer's logit.

Head h of layer l adds c = W_O^h · o_h to the residual stream at the last position. The final norm
is linear in its input once its scale is taken from the run (σ of the final residual x, frozen):

    LayerNorm   y = w ⊙ (x − mean x) / σ + b        N(c) = w ⊙ (c − mean c) / σ
    RMSNorm     y = w ⊙ x / σ                      N(c) = w ⊙ c / σ

and the logit difference is u · y + (b_U[answer] − b_U[wrong]) with u = W_U[answer] − W_U[wrong], so

    logit-diff = Σ_{l,h} u · N(c_lh) + rest

where rest is what everything else writes (embeddings, MLPs, output-projection biases, the norm's
bias, the output head's bias). A model that normalizes a sublayer's output before adding it (Gemma 2
and 3: ``post_attention_layernorm`` after o_proj) adds P_l(Σ_h c_lh), not Σ_h c_lh: that post-norm is
frozen at the run's scale too (found as the norm whose input is o_proj's output tensor), so head h
writes P_l(c_lh) — exact, as the frozen norm is linear. A post-norm that no frozen form reproduces is a
refusal, never a head write taken before it. The parts are measured, not assumed: the frozen norm must reproduce
the model's own normed residual, and u · y + Δb the model's own logit difference, or no direct
effects are given (with the reason) — a final soft-cap or logit scaling is not linear and is refused.
"""

from __future__ import annotations

import torch

from ...engine.tolerance import split_tolerance
from ...models.offload import param
from ..effects import layer_stack
from ..ground.norms import frozen_norm
from ..hooks import Hooks


def final_norm_candidates(loaded) -> list[torch.nn.Module]:
    """Norm modules outside the layer stack: the final norm is the one whose output the output head reads."""
    inside = {id(m) for b in (layer_stack(loaded) or []) for m in b.modules()}
    return [
        m
        for _, m in loaded.model.named_modules()
        if id(m) not in inside and ("norm" in type(m).__name__.lower() or isinstance(m, torch.nn.LayerNorm))
    ]


class FinalRecorder:
    """Hooks recording, at the last position, each candidate norm's input and output and the head's input."""

    def __init__(self, loaded):
        self.head = loaded.model.get_output_embeddings() if loaded.causal else None
        self.norms = final_norm_candidates(loaded) if self.head is not None else []
        inside = [m for b in (layer_stack(loaded) or []) for m in b.modules() if _is_norm(m)]
        self.inner = inside if self.head is not None else []  # where a sublayer's post-norm would be
        self.projections = [p for p in loaded.out_projections if p is not None] if self.head is not None else []
        self.inputs, self.outputs, self.y = {}, {}, None
        self._proj_ids = {id(p) for p in self.projections}
        self._last_proj = None  # (id, output) of the last projection run, held alive until the next one
        self._post_of: dict[int, torch.nn.Module] = {}  # a projection's id -> the norm that read its output tensor
        self._hooks = Hooks()

    def __enter__(self):
        for m in [*self.norms, *self.inner, *self.projections]:
            self._hooks.after(m, self._norm_hook)
        if self.head is not None:
            self._hooks.before(self.head, self._head_hook)
        return self

    def _norm_hook(self, module, args, out):
        if isinstance(out, torch.Tensor) and args and isinstance(args[0], torch.Tensor):
            # clone: a view of the last position would keep the whole [n, T, d] tensor alive (a recorded run
            # held 2.4x what the pool's budget counts, most of it here: 108 of 314 MiB per side on SmolLM2)
            self.inputs[id(module)] = args[0][:, -1].detach().clone()
            self.outputs[id(module)] = out[:, -1].detach().clone()
            last = self._last_proj
            if last is not None and id(module) not in self._proj_ids and args[0].data_ptr() == last[1].data_ptr():
                self._post_of.setdefault(last[0], module)
            if id(module) in self._proj_ids:
                # the same tensor, not one at a reused address: held alive while a norm may read it
                self._last_proj = (id(module), out)

    def post_norm(self, proj):
        """The norm that read ``proj``'s output tensor itself (Gemma's post_attention_layernorm), or None."""
        return self._post_of.get(id(proj))

    def _head_hook(self, module, args):
        self.y = args[0][:, -1].detach().clone()

    def __exit__(self, *exc):
        self._hooks.remove()
        self._last_proj = None


def direct_effects(loaded, recs, final: FinalRecorder, answer, wrong, logit_diff: torch.Tensor) -> dict:
    """Per prompt: each head's direct effect [n, L, H], the rest [n], and the checks; or a reason."""
    if final.head is None or final.y is None:
        return {"reason": "direct effects read a causal LM's output head; this model has none"}
    found = _final_norm(final)
    if found is None:
        return {"reason": "no norm module outside the layers feeds the output head: the final norm was not found"}
    frozen = frozen_norm(found, final.inputs[id(found)], final.y)
    if frozen is None:
        return {"reason": f"{type(found).__name__} is neither a LayerNorm nor an RMSNorm at the run's scale"}
    N, b = frozen
    if any(not isinstance(p, torch.nn.Linear) for p in loaded.out_projections):
        return {"reason": "an output projection is not a Linear (GPT-2's Conv1D): its per-head slices are not read"}
    W_U = param(final.head)  # (V, d), the model's dtype: only the rows read are cast (Gemma's table is 168M weights)
    u = W_U[answer].float() - W_U[wrong].float()  # (n, d)
    hb = param(final.head, "bias")
    db = torch.zeros(len(answer)) if hb is None else (hb[answer] - hb[wrong]).detach().float()
    through = (u * final.y.float()).sum(-1) + db
    gap, tol = float((through - logit_diff).abs().max()), split_tolerance(final.y.dtype)  # a bf16 model's rounding
    if gap > tol * max(1.0, float(logit_diff.abs().max())):
        return {
            "reason": f"the model changes its logits after the output head (soft-cap or scaling): u·y + Δb differs "
            f"from its logit difference by {gap:.3g}, so direct effects would not add up"
        }
    posts = _post_norms(loaded, final)
    if isinstance(posts, str):
        return {"reason": posts}
    per_head, written = _heads(loaded, recs, N, u, posts)  # (n, L, H), (n, d)
    gap_w = _writes_check(loaded, recs, final, posts)
    if gap_w > tol * 10:
        return {"reason": f"the heads' writes do not sum to what the layers added (max |Δ| {gap_w:.3g})"}
    x = final.inputs[id(found)].float()
    rest = (u * N(x - written)).sum(-1) + (u * b).sum(-1) + db  # everything the heads did not write
    return {
        "heads": per_head,
        "rest": rest,
        "adds_up_max_abs_diff": float((per_head.sum(dim=(1, 2)) + rest - logit_diff).abs().max()),
        "norm": type(found).__name__,
        "post_norms": sum(p is not None for p in posts),
        "writes_check_max_abs_diff": gap_w,
        "output_head_check_max_abs_diff": gap,
    }


def _final_norm(final: FinalRecorder):
    """The norm outside the layers whose output is the output head's input (the last one that matches), or None."""
    found = None
    for m in final.norms:
        if id(m) in final.outputs and torch.allclose(final.outputs[id(m)], final.y, atol=1e-6):
            found = m
    return found


def _is_norm(m) -> bool:
    return "norm" in type(m).__name__.lower() or isinstance(m, torch.nn.LayerNorm)


def _post_norms(loaded, final: FinalRecorder):
    """Per layer: the frozen post-norm's linear map (None: the write is added as it is), or a refusal."""
    out = []
    for l, proj in enumerate(loaded.out_projections):
        post = final.post_norm(proj)
        if post is None:
            out.append(None)
            continue
        frozen = frozen_norm(post, final.inputs[id(post)], final.outputs[id(post)])
        if frozen is None:
            return f"layer {l}'s {type(post).__name__} after the output projection is not linear at the run's scale"
        out.append(frozen[0])  # its bias (if any) is part of the rest
    return out


def _writes_check(loaded, recs, final: FinalRecorder, posts) -> float:
    """Σ_h of the heads' writes must equal what each layer added at the last position: its post-norm's
    output (less its bias), or its output projection's (less the projection's bias). Relative to scale."""
    worst = 0.0
    for l, proj in enumerate(loaded.out_projections):
        o = recs[l].out[:, :, -1].float()
        H = o.shape[1]
        W = param(proj).float()
        c = torch.einsum("nhv,dhv->nd", o, W.view(W.shape[0], H, -1))
        post = final.post_norm(proj)
        if post is not None:
            c = posts[l](c)
            added = final.outputs[id(post)].float() - _bias(post)
        else:
            added = final.outputs[id(proj)].float() - _bias(proj)
        worst = max(worst, float((c - added).abs().max()) / max(1.0, float(added.abs().max())))
    return worst


def _bias(m) -> torch.Tensor:
    b = param(m, "bias")
    return torch.zeros(()) if b is None else b.float()


def _heads(loaded, recs, N, u, posts) -> tuple[torch.Tensor, torch.Tensor]:
    """Each head's direct effect [n, L, H] and the sum of what all heads wrote at the last position [n, d]."""
    n, L, H = u.shape[0], loaded.n_layers, loaded.n_heads
    out = torch.zeros(n, L, H)
    written = torch.zeros_like(u)
    for l, proj in enumerate(loaded.out_projections):
        o = recs[l].out[:, :, -1].float()  # (n, H, Dv)
        W = param(proj).float()  # (d, H·Dv)
        Wh = W.view(W.shape[0], H, -1)  # (d, H, Dv)
        c = torch.einsum("nhv,dhv->nhd", o, Wh)  # (n, H, d): what each head writes
        if posts[l] is not None:  # normalized before the add, at the run's scale (per prompt)
            c = posts[l](c.transpose(0, 1)).transpose(0, 1)
        out[:, l] = (N(c.transpose(0, 1)).transpose(0, 1) * u[:, None]).sum(-1)
        written = written + c.sum(1)
    return out, written


__all__ = ["FinalRecorder", "direct_effects", "final_norm_candidates"]
