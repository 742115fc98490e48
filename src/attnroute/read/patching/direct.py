"""Direct effects (direct logit attribution): what each head writes straight onto the answer's logit.

Head h of layer l adds c = W_O^h · o_h to the residual stream at the last position. The final norm
is linear in its input once its scale is taken from the run (σ of the final residual x, frozen):

    LayerNorm   y = w ⊙ (x − mean x) / σ + b        N(c) = w ⊙ (c − mean c) / σ
    RMSNorm     y = w ⊙ x / σ                      N(c) = w ⊙ c / σ

and the logit difference is u · y + (b_U[answer] − b_U[wrong]) with u = W_U[answer] − W_U[wrong], so

    logit-diff = Σ_{l,h} u · N(c_lh) + rest

where rest is what everything else writes (embeddings, MLPs, output-projection biases, the norm's
bias, the output head's bias). The parts are measured, not assumed: the frozen norm must reproduce
the model's own normed residual, and u · y + Δb the model's own logit difference, or no direct
effects are given (with the reason) — a final soft-cap or logit scaling is not linear and is refused.
"""

from __future__ import annotations

import torch

from ..effects import layer_stack
from ..ground.norms import frozen_norm

TOL = 1e-4


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
        self.inputs, self.outputs, self.y = {}, {}, None
        self._hooks = []

    def __enter__(self):
        for m in self.norms:
            self._hooks.append(m.register_forward_hook(self._norm_hook))
        if self.head is not None:
            self._hooks.append(self.head.register_forward_pre_hook(self._head_hook))
        return self

    def _norm_hook(self, module, args, out):
        if isinstance(out, torch.Tensor) and args and isinstance(args[0], torch.Tensor):
            self.inputs[id(module)] = args[0][:, -1].detach()
            self.outputs[id(module)] = out[:, -1].detach()

    def _head_hook(self, module, args):
        self.y = args[0][:, -1].detach()

    def __exit__(self, *exc):
        for h in self._hooks:
            h.remove()


def direct_effects(loaded, recs, final: FinalRecorder, answer, wrong, logit_diff: torch.Tensor) -> dict:
    """Per prompt: each head's direct effect [n, L, H], the rest [n], and the checks; or a reason."""
    if final.head is None or final.y is None:
        return {"reason": "direct effects read a causal LM's output head; this model has none"}
    found = None
    for m in final.norms:
        if id(m) in final.outputs and torch.allclose(final.outputs[id(m)], final.y, atol=1e-6):
            found = m
    if found is None:
        return {"reason": "no norm module outside the layers feeds the output head: the final norm was not found"}
    frozen = frozen_norm(found, final.inputs[id(found)], final.y)
    if frozen is None:
        return {"reason": f"{type(found).__name__} is neither a LayerNorm nor an RMSNorm at the run's scale"}
    N, b = frozen
    if any(not isinstance(p, torch.nn.Linear) for p in loaded.out_projections):
        return {"reason": "an output projection is not a Linear (GPT-2's Conv1D): its per-head slices are not read"}
    W_U = final.head.weight.detach().float()
    u = W_U[answer] - W_U[wrong]  # (n, d)
    hb = getattr(final.head, "bias", None)
    db = torch.zeros(len(answer)) if hb is None else (hb[answer] - hb[wrong]).detach().float()
    through = (u * final.y.float()).sum(-1) + db
    gap = float((through - logit_diff).abs().max())
    if gap > TOL * max(1.0, float(logit_diff.abs().max())):
        return {
            "reason": f"the model changes its logits after the output head (soft-cap or scaling): u·y + Δb differs "
            f"from its logit difference by {gap:.3g}, so direct effects would not add up"
        }
    per_head, written = _heads(loaded, recs, N, u)  # (n, L, H), (n, d)
    x = final.inputs[id(found)].float()
    rest = (u * N(x - written)).sum(-1) + (u * b).sum(-1) + db  # everything the heads did not write
    return {
        "heads": per_head,
        "rest": rest,
        "adds_up_max_abs_diff": float((per_head.sum(dim=(1, 2)) + rest - logit_diff).abs().max()),
        "norm": type(found).__name__,
        "output_head_check_max_abs_diff": gap,
    }


def _heads(loaded, recs, N, u) -> tuple[torch.Tensor, torch.Tensor]:
    """Each head's direct effect [n, L, H] and the sum of what all heads wrote at the last position [n, d]."""
    n, L, H = u.shape[0], loaded.n_layers, loaded.n_heads
    out = torch.zeros(n, L, H)
    written = torch.zeros_like(u)
    for l, proj in enumerate(loaded.out_projections):
        o = recs[l].out[:, :, -1].float()  # (n, H, Dv)
        W = proj.weight.detach().float()  # (d, H·Dv)
        Wh = W.view(W.shape[0], H, -1)  # (d, H, Dv)
        c = torch.einsum("nhv,dhv->nhd", o, Wh)  # (n, H, d): what each head writes
        out[:, l] = (N(c.transpose(0, 1)).transpose(0, 1) * u[:, None]).sum(-1)
        written = written + c.sum(1)
    return out, written


__all__ = ["FinalRecorder", "direct_effects", "final_norm_candidates"]
