"""A receiver's q, k or v from its own head's columns, where the channel is a plain projection.

Replaying the attention module for an edited receiver (adapter.replay) computes every head's q, k and v to
keep one head's one channel: on Whisper's 1,500 frames, 1 column block of 18 is kept; on SmolLM2 each q or k
receiver of a circuit replayed all 15 heads' q, k and v — most of a circuit's curve. Where a channel is the
normed input times its projection's weight, plus its bias, times one scalar (Whisper's q carries the
1/√d scale), then possibly rotated by the rotary embedding the call was given (transformers' Llama, Qwen2,
Mistral, … pass ``position_embeddings=(cos, sin)``; half-split pairing: engine/positions.apply_rope) — no per-head
norm — a receiver's value is its head's slice of that projection alone, [n, T, d] @ [d, D], rotated with
the same cos and sin, instead of a replay.

Whether a channel is one is checked on every forward, against the module's own q, k, v of that forward
(first batch row: the module's code is the same for every row): the scalar fitted by least squares, then
every entry compared at the dtype's tolerance, without the rotation and then with it. A channel that fails
— QK-norm, an interleaved or partial rotary, a fused or transposed projection — is replayed as before;
nothing is assumed from a module's name alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ...engine.positions import apply_rope
from ...engine.tolerance import TOLERANCE
from ...models.offload import param

NAMES = {"q": ("q_proj", "query", "q"), "k": ("k_proj", "key", "k"), "v": ("v_proj", "value", "v")}  # HF's spellings


@dataclass
class Sliced:
    """One channel of one attention module as a projection: W [H·D, d], b [H·D] or None, × scalar."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    scalar: float
    head_dim: int
    rotary: tuple | None = None  # (cos, sin) [1 or B, T, D/2] of this forward's call: the channel is rotated

    def head(self, normed: torch.Tensor, h: int, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Head h's channel for inputs ``normed`` [n, T, d] (the batch rows ``rows`` of the call): [n, T, D]."""
        cols = slice(h * self.head_dim, (h + 1) * self.head_dim)
        b = None if self.bias is None else self.bias[cols]
        out = F.linear(normed.to(self.weight.dtype), self.weight[cols], b)
        if self.rotary is not None:
            cos, sin = (t if t.shape[0] == 1 or rows is None else t[rows] for t in self.rotary)
            out = apply_rope(out, cos, sin)
        return out * self.scalar if self.scalar != 1.0 else out


def projection(module: torch.nn.Module, channel: str) -> torch.nn.Linear | None:
    for name in NAMES[channel]:
        lin = getattr(module, name, None)
        if type(lin) is torch.nn.Linear:  # a subclass (a quantized or LoRA layer) may compute otherwise
            return lin
    return None


def fit(
    module: torch.nn.Module, channel: str, normed: torch.Tensor, ref: torch.Tensor, rotary: tuple | None = None
) -> Sliced | None:
    """The channel as a checked projection, or None. normed: the module's input in this forward's first row
    [1, T, d]; ref: what the module attended with, [B, H, T, D]; rotary: the (cos, sin) the call was given,
    tried when the plain projection fails."""
    lin = projection(module, channel)
    B, H, T, D = ref.shape
    if lin is None or lin.weight.shape != (H * D, normed.shape[-1]) or normed.shape[1] != T:
        return None
    weight, bias = param(lin), param(lin, "bias")  # loaded where accelerate offloaded them (models/offload.py)
    with torch.no_grad():
        got = F.linear(normed[:1].to(weight.dtype), weight, bias).view(1, T, H, D).transpose(1, 2)
    scalar = _scalar(ref[:1], got)
    if scalar is None and _rotary_fits(rotary, T, D):
        # transformers' cos, sin repeat their D/2 angles in both halves: the engine's half-split rotation reads
        # one half (a model whose halves differ fails the check below and is replayed)
        rotary = tuple(t.detach()[..., : D // 2] for t in rotary)
        scalar = _scalar(ref[:1], apply_rope(got, rotary[0][:1, None], rotary[1][:1, None]))
    else:
        rotary = None
    if scalar is None:
        return None
    scalar = float(torch.tensor(scalar, dtype=weight.dtype))  # the module's own constant (0.125, not 0.125 + 3e-17)
    return Sliced(weight, bias, scalar, D, rotary)


def _scalar(ref: torch.Tensor, got: torch.Tensor) -> float | None:
    """The least-squares scalar with ref ≈ scalar · got, or None where some entry misses it by more than the
    dtype's tolerance."""
    want, got = ref.double(), got.double()
    norm2 = float((got * got).sum())
    if norm2 == 0.0:
        return None
    scalar = float((want * got).sum()) / norm2
    err = float((want - scalar * got).abs().max())
    return None if err > TOLERANCE.get(ref.dtype, 2e-5) * max(1.0, float(want.abs().max())) else scalar


def _rotary_fits(rotary, T: int, D: int) -> bool:
    """A (cos, sin) pair as transformers passes it: two tensors [B or 1, T, D]."""
    return (
        isinstance(rotary, tuple | list)
        and len(rotary) == 2
        and all(isinstance(t, torch.Tensor) and t.dim() == 3 and tuple(t.shape[1:]) == (T, D) for t in rotary)
    )


__all__ = ["Sliced", "fit", "projection"]
