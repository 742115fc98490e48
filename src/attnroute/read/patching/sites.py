"""Where a patch goes: the engine interventions that record, tap and exchange activations.

A component is (layer, site, unit, position):

    site   what is exchanged                                 unit            tensor in the engine
    head   the head's output, before the output projection   query head h    out [B, H, T, Dv]
    layer  the layer's attention output (every head at once) —               out [B, H, T, Dv]
    q      the head's queries (after rotary, as scored)      query head h    q   [B, H, T, D]
    k      the keys of a kv head (grouped: shared by G heads) kv head g      k   [B, Hkv, T, D]
    v      the values of a kv head                           kv head g       v   [B, Hkv, T, Dv]

"layer" patches the input of the output projection for all heads, which is the same as patching its
output: the projection is a fixed linear map. position None = every position at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...engine import Intervention
from ..ground.taps import Tap

OUT_SITES = ("head", "layer")


@dataclass(frozen=True)
class Component:
    layer: int
    site: str
    unit: int | None  # the query head (head, q), the kv head (k, v), None (layer)
    position: int | None  # None: every position


class Recorder(Intervention):
    """Keeps one layer's q, k, v and head outputs (detached); changes nothing."""

    def __init__(self, layer: int):
        super().__init__([], layer)
        self.q = self.k = self.v = self.out = None

    def edit_inputs(self, q, k, v):
        self.q, self.k, self.v = q.detach(), k.detach(), v.detach()
        return q, k, v

    def edit_out(self, out, q0, q1):
        self.out = out.detach()
        return out

    def tensor(self, site: str) -> torch.Tensor:
        return self.out if site in OUT_SITES else getattr(self, site)


class PatchCopies(Intervention):
    """Copy c of a batch repeated len(components) times (rows c·B … (c+1)·B − 1) gets components[c] of
    this layer from ``source`` (the other run's recording of the same prompts)."""

    def __init__(self, layer: int, components: list[Component], batch: int, source: Recorder):
        super().__init__([], layer)
        self.components, self.B, self.source = components, batch, source

    def _mask(self, shape, site_names) -> torch.Tensor:
        kB, units, T = shape[:3]
        m = torch.zeros(kB, units, T, 1, dtype=torch.bool)
        for c, comp in enumerate(self.components):
            if comp.site not in site_names:
                continue
            rows = slice(c * self.B, (c + 1) * self.B)
            unit = slice(None) if comp.unit is None else comp.unit
            pos = slice(None) if comp.position is None else comp.position
            m[rows, unit, pos] = True
        return m

    def _patch(self, x: torch.Tensor, site_names: tuple[str, ...], src: torch.Tensor) -> torch.Tensor:
        if not any(c.site in site_names for c in self.components):
            return x
        mask = self._mask(x.shape, site_names).to(x.device)
        copies = x.shape[0] // src.shape[0]
        return torch.where(mask, src.repeat(copies, 1, 1, 1).to(x.dtype), x)

    def edit_inputs(self, q, k, v):
        s = self.source
        return self._patch(q, ("q",), s.q), self._patch(k, ("k",), s.k), self._patch(v, ("v",), s.v)

    def edit_out(self, out, q0, q1):
        return self._patch(out, OUT_SITES, self.source.out[:, :, q0:q1])


def components(site: str, layers: int, heads: int, kv_heads: int, positions: list[int] | None) -> list[Component]:
    """Every component of ``site``: one per (layer, unit) — per position too when ``positions`` is a list."""
    units = {"layer": [None], "head": range(heads), "q": range(heads), "k": range(kv_heads), "v": range(kv_heads)}
    pos = [None] if positions is None else positions
    return [Component(l, site, u, p) for l in range(layers) for u in units[site] for p in pos]


def estimate_grid(base: Tap, source: Recorder, site: str) -> torch.Tensor:
    """The linear estimate of patching each (unit, position) of ``site`` on its own, per prompt [B, units, T]:
    (source − base) · ∂M/∂base summed over the feature axis (attribution patching, Nanda 2023; Syed et al.
    2023). A whole-sequence patch of a unit is the sum over T; a layer's, the sum over units and T."""
    name = "out" if site in OUT_SITES else site
    grad = base.leaves[name].grad.float()  # a bf16/fp16 model's products summed in float32
    return ((source.tensor(site).float() - base.values[name].float()) * grad).sum(-1)  # (B, units, T)


def pick(grid: torch.Tensor, c: Component) -> torch.Tensor:
    """One component's value per prompt [B] from an estimate grid [B, units, T]."""
    x = grid if c.unit is None else grid[:, c.unit : c.unit + 1]
    x = x if c.position is None else x[:, :, c.position : c.position + 1]
    return x.sum(dim=(1, 2))


__all__ = ["Component", "PatchCopies", "Recorder", "Tap", "components", "estimate_grid", "pick"]
