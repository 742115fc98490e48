"""A norm at a run's own scale: the linear map it applies once σ (and the mean) are taken from the run.

LayerNorm  y = w ⊙ (x − mean x) / σ + b      N(c) = w ⊙ (c − mean c) / σ
RMSNorm    y = w ⊙ x / σ                    N(c) = w ⊙ c / σ        (Gemma: (1 + w) in place of w)

Which form a module computes is not taken from its name: each is tried against the module's own output on
the run, and the one that reproduces it is used (None when none does). Direct logit attribution freezes the
final norm this way; circuits freeze a sublayer's post-norm (Gemma) to split its write among heads.
"""

from __future__ import annotations

import torch

TOL = 1e-4


def frozen_norm(module, x: torch.Tensor, y: torch.Tensor):
    """(N, b, σ) with N(c) the norm's linear map at the run's scale, or None when no form reproduces y."""
    eps = float(getattr(module, "eps", None) or getattr(module, "variance_epsilon", None) or 1e-5)
    w = getattr(module, "weight", None)
    w = torch.ones(x.shape[-1]) if w is None else w.detach().float()
    b = getattr(module, "bias", None)
    b = torch.zeros(x.shape[-1]) if b is None else b.detach().float()
    x = x.float()
    layer = (x - x.mean(-1, keepdim=True), (x.var(-1, unbiased=False, keepdim=True) + eps).sqrt(), True)
    rms = (x, (x.pow(2).mean(-1, keepdim=True) + eps).sqrt(), False)
    for centred, sigma, subtract in (layer, rms):
        for scale in (w, 1 + w):  # Gemma's RMSNorm multiplies by (1 + weight)
            if torch.allclose(scale * centred / sigma + b, y.float(), atol=TOL * max(1.0, float(y.abs().max()))):

                def N(c, scale=scale, sigma=sigma, subtract=subtract):
                    c = c - c.mean(-1, keepdim=True) if subtract else c
                    return scale * c / sigma

                return N, b
    return None


__all__ = ["frozen_norm"]
