"""A norm at a run's own scale: the linear map it applies once σ (and the mean) are taken from the run.

LayerNorm  y = w ⊙ (x − mean x) / σ + b      N(c) = w ⊙ (c − mean c) / σ
RMSNorm    y = w ⊙ x / σ                    N(c) = w ⊙ c / σ        (Gemma: (1 + w) in place of w)

Which form a module computes is not taken from its name: each is tried against the module's own output on
the run, and the one that reproduces it is used (None when none does). Direct logit attribution freezes the
final norm this way; circuits freeze a sublayer's post-norm (Gemma) to split its write among heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...engine.tolerance import rounding
from ...models.offload import param


@dataclass
class NormForm:
    """What a LayerNorm or RMSNorm computed on one run: y = scale ⊙ c / σ + b, c = x − mean x (centred) or x."""

    scale: torch.Tensor  # [d]: w, or 1 + w (Gemma)
    bias: torch.Tensor  # [d]
    c: torch.Tensor  # [..., d] (float32 at least): the input, centred for a LayerNorm
    sigma: torch.Tensor  # [..., 1]
    centred: bool

    def linear(self):
        """N(u) = scale ⊙ (u − mean u if centred) / σ: the norm's map at this run's σ (direct attribution)."""

        def N(u):
            u = u - u.mean(-1, keepdim=True) if self.centred else u
            return self.scale * u / self.sigma

        return N

    def vjp(self, g: torch.Tensor) -> torch.Tensor:
        """Jᵀg for cotangents g [..., *c.shape] (any leading axes), the exact derivative at x:
        Jᵀg = P(h − c (c·h) / (d σ²)) / σ with h = scale ⊙ g and P the centring (LayerNorm) or nothing."""
        h = g.to(self.c.dtype) * self.scale  # a fresh tensor: the rest is done in place on it
        if self.centred:
            h -= h.mean(-1, keepdim=True)
        d = self.c.shape[-1]
        dot = torch.einsum("...td,td->...t", h.reshape(-1, *self.c.reshape(-1, d).shape), self.c.reshape(-1, d))
        coef = (dot.reshape(*h.shape[:-1], 1) / (d * self.sigma.pow(2))).expand_as(h)
        h.addcmul_(self.c.expand_as(h), coef, value=-1.0)
        return h.div_(self.sigma).to(g.dtype)


def norm_form(module, x: torch.Tensor, y: torch.Tensor) -> NormForm | None:
    """The form (LayerNorm or RMSNorm, w or 1 + w) that reproduces the module's output y on x, or None. The
    form that fitted a module of this class last is tried first, and taken when it fits to float32 rounding;
    otherwise every form is tried and the closest one within the dtype's rounding taken — in bfloat16 a wrong
    form (RMSNorm read as a LayerNorm) can come within the dtype's rounding, the right one comes closer."""
    eps = float(getattr(module, "eps", None) or getattr(module, "variance_epsilon", None) or 1e-5)
    dt = torch.promote_types(x.dtype, torch.float32)  # float32 at least; a float64 model keeps float64
    w = param(module, "weight")  # loaded where accelerate offloaded it (models/offload.py)
    w = torch.ones(x.shape[-1], dtype=dt) if w is None else w.to(dt)
    b = param(module, "bias")
    b = torch.zeros(x.shape[-1], dtype=dt) if b is None else b.to(dt)
    size = max(1.0, float(y.detach().abs().max()))
    tol, exact = rounding(y.dtype) * size, rounding(torch.float32) * size
    x, y = x.to(dt), y.to(dt)
    kinds = [(True, False), (True, True), (False, False), (False, True)]  # (centred, Gemma's 1 + w)
    last = _LAST.get(type(module))
    best = (float("inf"), None, None)
    for centred, plus_one in ([last] if last else []) + [k for k in kinds if k != last]:
        c = x - x.mean(-1, keepdim=True) if centred else x
        sigma = (c.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        scale = 1 + w if plus_one else w
        err = float((scale * c / sigma + b - y).abs().max())
        if err < best[0]:
            best = (err, (centred, plus_one), NormForm(scale, b, c, sigma, centred))
        if err <= exact:
            break
    if best[0] > tol:
        return None
    _LAST[type(module)] = best[1]
    return best[2]


_LAST: dict[type, tuple[bool, bool]] = {}  # norm class -> the form that fitted it last


def frozen_norm(module, x: torch.Tensor, y: torch.Tensor):
    """(N, b) with N(c) the norm's linear map at the run's scale, or None when no form reproduces y."""
    form = norm_form(module, x, y)
    return None if form is None else (form.linear(), form.bias)


__all__ = ["NormForm", "frozen_norm", "norm_form"]
