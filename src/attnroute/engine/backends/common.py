"""What every backend receives: a resolved request."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import InputError
from ..masks import Mask


class UnsupportedRequest(InputError):
    """A backend cannot express this request; it says so instead of falling back."""


@dataclass
class Request:
    q: torch.Tensor  # (B, H, Tq, D)
    k: torch.Tensor  # (B, Hkv, Tk, D)
    v: torch.Tensor  # (B, Hkv, Tk, Dv)
    mask: Mask | None
    scale: float
    softcap: float | None = None
    bias: torch.Tensor | None = None  # additive score bias, broadcastable to (B, H, Tq, Tk): T5, ALiBi
    sinks: torch.Tensor | None = None  # (H,) per-head sink logits in the softmax denominator: gpt-oss
    probes: tuple = ()
    interventions: tuple = ()
    layer: int | None = None
    want_trace: bool = False
    memory_budget: int | None = None
    block_size: int | None = None
    v_finite: bool | None = None  # set once per call by backends that walk blocks

    @property
    def dims(self):
        B, H, Tq, D = self.q.shape
        Hkv, Tk, Dv = self.k.shape[1], self.k.shape[2], self.v.shape[3]
        return B, H, Hkv, Tq, Tk, D, Dv

    def bias_rows(self, q0: int, q1: int, kv0: int, kv1: int) -> torch.Tensor | None:
        """The bias for query rows q0..q1-1 and keys kv0..kv1-1 (broadcast dimensions stay 1)."""
        if self.bias is None:
            return None
        b = self.bias
        b = b if b.shape[-2] == 1 else b[..., q0:q1, :]
        return b if b.shape[-1] == 1 else b[..., kv0:kv1]

    def keep_rows(self, q0: int, q1: int) -> torch.Tensor | None:
        """Keep-mask for query rows q0..q1-1: bool [b?, h?, q1-q0, Tk], or None for no mask."""
        if self.mask is None:
            return None
        B, H, _, Tq, Tk, _, _ = self.dims
        return self.mask.rows(B, H, Tq, Tk, q0, q1, device=self.q.device)
