"""Position schemes: sinusoidal and learned (added to the input), RoPE (rotates q and k).

RoPE (Su et al. 2021, arXiv 2104.09864) rotates each pair of channels of q and k by an angle
proportional to the position, so q_m·k_n depends on m − n only. Two pairings ship in real code
(huggingface/transformers #25199):

    half_split   pairs channel i with i + D/2   (GPT-NeoX, Llama in transformers: rotate_half)
    interleaved  pairs channel 2i with 2i + 1   (GPT-J, the paper's complex form, Meta's Llama)

They agree after a fixed permutation of q/k channels (:func:`interleaved_to_half_split`), which
is what checkpoint converters apply to W_q and W_k.
"""

from __future__ import annotations

import torch
from torch import nn

from .errors import InputError

PAIRINGS = ("half_split", "interleaved")


def sinusoidal(n_positions: int, dim: int, base: float = 10000.0) -> torch.Tensor:
    """[n_positions, dim]: PE(p, 2i) = sin(p / base^(2i/dim)), PE(p, 2i+1) = cos(…) (Vaswani et al. §3.5)."""
    if dim % 2:
        raise InputError(f"sinusoidal embedding needs an even dim, got {dim}")
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (dim/2,)
    pe = torch.zeros(n_positions, dim, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)
    return pe.float()


def sinusoidal_shift(k: int, dim: int, base: float = 10000.0) -> torch.Tensor:
    """The fixed linear map M_k with PE(p + k) = PE(p) @ M_k.T for every p (a block rotation)."""
    freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    m = torch.zeros(dim, dim, dtype=torch.float64)
    c, s = torch.cos(k * freq), torch.sin(k * freq)
    i = torch.arange(0, dim, 2)
    m[i, i], m[i, i + 1] = c, s  # sin(a+b) = sin a cos b + cos a sin b
    m[i + 1, i], m[i + 1, i + 1] = -s, c  # cos(a+b) = cos a cos b − sin a sin b
    return m.float()


class LearnedPositions(nn.Module):
    """A trained vector per absolute position (GPT-2)."""

    def __init__(self, max_len: int, dim: int):
        super().__init__()
        self.table = nn.Embedding(max_len, dim)
        nn.init.normal_(self.table.weight, std=0.02)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        if int(positions.max()) >= self.table.num_embeddings:
            raise InputError(f"position {int(positions.max())} beyond learned table of {self.table.num_embeddings}")
        return self.table(positions)


class SinusoidalPositions(nn.Module):
    def __init__(self, max_len: int, dim: int):
        super().__init__()
        self.register_buffer("table", sinusoidal(max_len, dim), persistent=False)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table[positions]


def rope_frequencies(head_dim: int, base: float = 10000.0, scaling: str | None = None, factor: float = 1.0):
    """Inverse frequencies θ_i = base^(−2i/D), i < D/2, with optional context extension.

    linear (position interpolation, arXiv 2306.15595): positions divided by ``factor``.
    ntk (NTK-aware, bloc97 2023; transformers' "dynamic" uses the same base change):
        base' = base · factor^(D / (D − 2)).
    """
    if head_dim % 2:
        raise InputError(f"RoPE needs an even head dim, got {head_dim}")
    if scaling not in (None, "linear", "ntk"):
        raise InputError(f"RoPE scaling must be None, 'linear' or 'ntk', got {scaling!r}")
    if scaling == "ntk":
        base = base * factor ** (head_dim / (head_dim - 2))
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    if scaling == "linear":
        inv = inv / factor
    return inv


def rope_angles(positions: torch.Tensor, inv_freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of position · θ: [..., T, D/2] each (fp64 math, cast by the caller)."""
    ang = positions.to(torch.float64)[..., None] * inv_freq.to(positions.device)  # (.., T, D/2)
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: str = "half_split") -> torch.Tensor:
    """Rotate x [B, H, T, D] by angles cos/sin [T, D/2] or [B, 1, T, D/2]."""
    if pairing not in PAIRINGS:
        raise InputError(f"RoPE pairing must be one of {PAIRINGS}, got {pairing!r}")
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if pairing == "half_split":
        a, b = x.chunk(2, dim=-1)  # (B, H, T, D/2) each: pairs (i, i + D/2)
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]  # pairs (2i, 2i + 1)
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)


def interleaved_to_half_split(head_dim: int) -> torch.Tensor:
    """Channel permutation p with x_half = x_interleaved[..., p]: [0, 2, 4, …, 1, 3, 5, …]."""
    return torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])


def half_split_to_interleaved(head_dim: int) -> torch.Tensor:
    return torch.argsort(interleaved_to_half_split(head_dim))


class RoPE(nn.Module):
    """Rotary positions for q and k; ``forward(q, k, positions)`` with positions [T] or [B, T]."""

    def __init__(
        self,
        head_dim: int,
        base: float = 10000.0,
        pairing: str = "half_split",
        scaling: str | None = None,
        factor: float = 1.0,
    ):
        super().__init__()
        if pairing not in PAIRINGS:
            raise InputError(f"RoPE pairing must be one of {PAIRINGS}, got {pairing!r}")
        self.pairing = pairing
        self.register_buffer("inv_freq", rope_frequencies(head_dim, base, scaling, factor), persistent=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor):
        cos, sin = rope_angles(positions, self.inv_freq)  # (T, D/2) or (B, T, D/2)
        if cos.dim() == 3:
            cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, D/2)
        return apply_rope(q, cos, sin, self.pairing), apply_rope(k, cos, sin, self.pairing)
