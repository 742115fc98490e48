"""A tap on one attention layer: zero leaves added to its q, k, v and head outputs, so that one backward
gives the metric's gradient at each of them (patching's estimates, circuits' receivers)."""

from __future__ import annotations

import torch

from ...engine import Intervention


class Tap(Intervention):
    """Adds a zero leaf to q, k, v and the output of one layer: the leaves' gradients are ∂M/∂(q, k, v, out)."""

    def __init__(self, layer: int):
        super().__init__([], layer)
        self.leaves: dict[str, torch.Tensor] = {}
        self.values: dict[str, torch.Tensor] = {}

    def _add(self, name: str, x: torch.Tensor) -> torch.Tensor:
        z = torch.zeros_like(x, requires_grad=True)
        self.leaves[name], self.values[name] = z, x.detach()
        return x + z

    def edit_inputs(self, q, k, v):
        return self._add("q", q), self._add("k", k), self._add("v", v)

    def edit_out(self, out, q0, q1):
        return self._add("out", out)


__all__ = ["Tap"]
