"""Layers built on attend(): MultiHeadAttention, FeedForward, pre-norm Block, TinyTransformer.

TinyTransformer is a causal LM small enough to train on a laptop (learn/ trains it) and to
read with the same probes and interventions as a real model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .attend import attend
from .errors import InputError
from .kvcache import KVCache
from .masks import causal
from .positions import LearnedPositions, RoPE, SinusoidalPositions
from .stages import project


class MultiHeadAttention(nn.Module):
    """Self- or cross-attention with H query heads and Hkv kv heads (MHA: Hkv=H, MQA: Hkv=1).

    x [B, Tq, C] (and context [B, Tk, C] for cross-attention) -> [B, Tq, C] (or [B, Tq, H·Dv]
    without the output projection).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        head_dim: int | None = None,
        *,
        bias: bool = False,
        out_proj: bool = True,
        rope: RoPE | None = None,
        scale: float | None = None,
    ):
        super().__init__()
        n_kv_heads = n_kv_heads or n_heads
        if n_heads % n_kv_heads:
            raise InputError(f"n_heads={n_heads} must be a multiple of n_kv_heads={n_kv_heads}")
        head_dim = head_dim or d_model // n_heads
        self.n_heads, self.n_kv_heads, self.head_dim, self.scale = n_heads, n_kv_heads, head_dim, scale
        self.q_proj = nn.Linear(d_model, n_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(n_heads * head_dim, d_model, bias=bias) if out_proj else None
        self.rope = rope

    def forward(
        self,
        x,
        context=None,
        mask=None,
        *,
        positions=None,
        cache: KVCache | None = None,
        layer: int | None = None,
        impl: str = "auto",
        probes=(),
        interventions=(),
    ):
        src = x if context is None else context
        q = project(x, self.q_proj.weight, self.q_proj.bias, self.n_heads)  # (B, H, Tq, D)
        k = project(src, self.k_proj.weight, self.k_proj.bias, self.n_kv_heads)  # (B, Hkv, Tk, D)
        v = project(src, self.v_proj.weight, self.v_proj.bias, self.n_kv_heads)  # (B, Hkv, Tk, D)
        if self.rope is not None:
            if context is not None:
                raise InputError("RoPE rotates q and k by their own positions; it is not defined for cross-attention")
            if positions is None:
                start = cache.length(layer or 0) if cache is not None else 0
                positions = torch.arange(start, start + x.shape[1], device=x.device)  # (Tq,)
            q, k = self.rope(q, k, positions)
        if cache is not None:
            k, v = cache.append(layer or 0, k, v)  # (B, Hkv, T_cached + Tk, D)
        out = attend(
            q, k, v, mask, scale=self.scale, impl=impl, probes=probes, interventions=interventions, layer=layer
        )  # (B, H, Tq, D)
        B, H, Tq, Dv = out.shape
        out = out.transpose(1, 2).reshape(B, Tq, H * Dv)  # (B, Tq, H·Dv): the output-projection input
        return self.o_proj(out) if self.o_proj is not None else out


class FeedForward(nn.Module):
    """Position-wise MLP: Linear → GELU → Linear (Vaswani et al. §3.3)."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.up, self.down = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.down(nn.functional.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + ff(norm(x)) when d_ff > 0."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None,
        d_ff: int,
        rope: RoPE | None,
        scale: float | None,
        head_dim: int | None = None,
    ):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads, n_kv_heads, head_dim=head_dim, rope=rope, scale=scale)
        self.norm2 = nn.LayerNorm(d_model) if d_ff else None
        self.ff = FeedForward(d_model, d_ff) if d_ff else None

    def forward(self, x, mask, **kw):
        x = x + self.attn(self.norm1(x), mask=mask, **kw)
        if self.ff is not None:
            x = x + self.ff(self.norm2(x))
        return x


@dataclass(frozen=True)
class TinyConfig:
    vocab: int = 64  # small synthetic alphabets (learn/ tasks)
    d_model: int = 64  # width where induction heads form in minutes on 2 cores
    n_layers: int = 2  # two layers: the smallest stack with an induction circuit
    n_heads: int = 4
    n_kv_heads: int | None = None  # None = MHA; 1 = MQA; else GQA
    d_ff: int = 0  # 0 = attention-only (Elhage et al. 2021)
    max_len: int = 256
    positions: str = "learned"  # learned | sinusoidal | rope
    scaled: bool = True  # False drops 1/√d_k (learn scale's experiment)
    head_dim: int | None = None  # None = d_model // n_heads; set it to vary d_k at a fixed width

    @property
    def d_head(self) -> int:
        return self.head_dim or self.d_model // self.n_heads


class TinyTransformer(nn.Module):
    """A causal LM: embed (+ positions) → blocks → norm → unembed. tokens [B, T] -> logits [B, T, vocab]."""

    def __init__(self, cfg: TinyConfig):
        super().__init__()
        if cfg.positions not in ("learned", "sinusoidal", "rope"):
            raise InputError(f"positions must be learned, sinusoidal or rope, got {cfg.positions!r}")
        self.cfg = cfg
        head_dim = cfg.d_head
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = {"learned": LearnedPositions, "sinusoidal": SinusoidalPositions}.get(cfg.positions)
        self.pos = self.pos(cfg.max_len, cfg.d_model) if self.pos else None
        rope = RoPE(head_dim) if cfg.positions == "rope" else None
        scale = None if cfg.scaled else 1.0
        self.blocks = nn.ModuleList(
            Block(cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_ff, rope, scale, head_dim)
            for _ in range(cfg.n_layers)
        )
        self.norm = nn.LayerNorm(cfg.d_model)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        c = self.cfg
        p = next(self.parameters())
        return KVCache(
            c.n_layers, batch, c.n_kv_heads or c.n_heads, c.d_head, max_len or c.max_len, dtype=p.dtype, device=p.device
        )

    def forward(self, tokens, *, cache: KVCache | None = None, mask=None, impl="auto", probes=(), interventions=()):
        B, T = tokens.shape
        start = cache.length() if cache is not None else 0
        positions = torch.arange(start, start + T, device=tokens.device)  # (T,)
        x = self.embed(tokens)  # (B, T, C)
        if self.pos is not None:
            x = x + self.pos(positions)
        mask = causal() if mask is None else mask
        for i, block in enumerate(self.blocks):
            x = block(
                x,
                mask,
                positions=positions,
                cache=cache,
                layer=i,
                impl=impl,
                probes=probes,
                interventions=interventions,
            )
        return self.unembed(self.norm(x))  # (B, T, vocab)

    @torch.no_grad()
    def generate(
        self,
        tokens,
        max_new_tokens: int,
        *,
        use_cache: bool = True,
        cache=None,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ):
        """Greedy (temperature 0) or sampled continuation: tokens [B, T] -> [B, T + max_new_tokens].
        ``cache``: an empty cache to decode into (a contiguous KVCache by default; a PagedView works)."""
        B, T = tokens.shape
        if T + max_new_tokens > self.cfg.max_len:
            raise InputError(f"{T} prompt + {max_new_tokens} new tokens exceed max_len={self.cfg.max_len}")
        if cache is None and use_cache:
            cache = self.new_cache(B, T + max_new_tokens)
        out, step_in = tokens, tokens
        for _ in range(max_new_tokens):
            logits = self(step_in, cache=cache)[:, -1]  # (B, vocab)
            nxt = _pick(logits, temperature, generator)  # (B, 1)
            out = torch.cat([out, nxt], dim=1)
            step_in = nxt if use_cache else out
        return out


def _pick(logits, temperature, generator):
    if temperature <= 0:
        return logits.argmax(-1, keepdim=True)
    probs = torch.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)
