"""A receiver's q, k or v from its own head's columns, where the channel is a plain projection.

Replaying the attention module for an edited receiver (adapter.replay) computes every head's q, k and v to
keep one head's one channel: on Whisper's 1,500 frames, 1 column block of 18 is kept. Where a channel is the
normed input times its projection's weight, plus its bias, times one scalar (Whisper's q carries the
1/√d scale) — no rotary embedding, no per-head norm — a receiver's value is its head's slice of that
projection alone, [n, T, d] @ [d, D] instead of a replay.

Whether a channel is one is checked on every forward, against the module's own q, k, v of that forward
(first batch row: the module's code is the same for every row): the scalar fitted by least squares, then
every entry compared at the dtype's tolerance. A channel that fails — rotary q and k, QK-norm, a fused or
transposed projection — is replayed as before; nothing is assumed from a module's name alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ...engine.tolerance import TOLERANCE

NAMES = {"q": ("q_proj", "query", "q"), "k": ("k_proj", "key", "k"), "v": ("v_proj", "value", "v")}  # HF's spellings


@dataclass
class Sliced:
    """One channel of one attention module as a projection: W [H·D, d], b [H·D] or None, × scalar."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    scalar: float
    head_dim: int

    def head(self, normed: torch.Tensor, h: int) -> torch.Tensor:
        """Head h's channel for inputs ``normed`` [n, T, d]: [n, T, D]."""
        cols = slice(h * self.head_dim, (h + 1) * self.head_dim)
        b = None if self.bias is None else self.bias[cols]
        out = F.linear(normed.to(self.weight.dtype), self.weight[cols], b)
        return out * self.scalar if self.scalar != 1.0 else out


def projection(module: torch.nn.Module, channel: str) -> torch.nn.Linear | None:
    for name in NAMES[channel]:
        lin = getattr(module, name, None)
        if type(lin) is torch.nn.Linear:  # a subclass (a quantized or LoRA layer) may compute otherwise
            return lin
    return None


def fit(module: torch.nn.Module, channel: str, normed: torch.Tensor, ref: torch.Tensor) -> Sliced | None:
    """The channel as a checked projection, or None. normed: the module's input in this forward's first row
    [1, T, d]; ref: what the module attended with, [B, H, T, D]."""
    lin = projection(module, channel)
    B, H, T, D = ref.shape
    if lin is None or lin.weight.shape != (H * D, normed.shape[-1]) or normed.shape[1] != T:
        return None
    with torch.no_grad():
        want = ref[:1].double()
        got = F.linear(normed[:1].to(lin.weight.dtype), lin.weight, lin.bias).view(1, T, H, D).transpose(1, 2)
        got = got.double()
        norm2 = float((got * got).sum())
        if norm2 == 0.0:
            return None
        scalar = float((want * got).sum()) / norm2
        err = float((want - scalar * got).abs().max())
    if err > TOLERANCE.get(ref.dtype, 2e-5) * max(1.0, float(want.abs().max())):
        return None
    bias = None if lin.bias is None else lin.bias.detach()
    scalar = float(torch.tensor(scalar, dtype=lin.weight.dtype))  # the module's own constant (0.125, not 0.125 + 3e-17)
    return Sliced(lin.weight.detach(), bias, scalar, D)


__all__ = ["Sliced", "fit", "projection"]
