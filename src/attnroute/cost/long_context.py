"""The bill of long context: FLOPs and peak memory of full, causal, sliding-window and ProbSparse
attention as functions of length, by formula and measured side by side (one attention call,
B = 1, H heads of dim D, fp32).

FLOPs count 2 per multiply-add, for the two matmuls (scores and weighted values):

    full        4 · H · T² · D
    causal      4 · H · D · T(T+1)/2                 (query i sees i + 1 keys)
    window W    4 · H · D · Σ_i min(i+1, W) ≈ 4·H·D·T·W
    ProbSparse  2 · H · T · U · D  +  4 · H · u · T · D,   U = u = c·⌈ln T⌉ (sampling, then full rows
                for the u active queries; lazy rows cost a mean or cumsum, O(T·D))

Extra memory beyond the inputs (4-byte elements; the output O = H·T·D is new memory too):

    full, causal   torch SDPA's fused kernel: the output only (no T² matrix)
    window         attnroute blocked: the per-block outputs and their concatenation (2·O) plus one
                   block of rows × the keys it can see, 3 · H · bq · (bq + W)
    ProbSparse     the sampled keys H · T · U · D, the active rows' scores H · u · T, the lazy
                   context and the scattered output (2·O)

Measured (bench/bill.py, `attnroute cost bill`): median wall time, and peak RSS above the baseline in a
fresh child process; show/cost_figures.py draws both against these formulas.
"""

from __future__ import annotations

import math

import torch

from ..engine import attend, causal, probsparse_attend, sliding_window
from ..engine.backends.blocked import rows_per_block

VARIANTS = ("full", "causal", "window", "probsparse")


def predicted_flops(variant: str, T: int, H: int = 8, D: int = 64, W: int = 256, c: float = 5) -> int:
    if variant == "full":
        return 4 * H * T * T * D
    if variant == "causal":
        return 4 * H * D * T * (T + 1) // 2
    if variant == "window":
        return 4 * H * D * sum(min(i + 1, W) for i in range(T))
    U = u = min(T, int(c * math.ceil(math.log(T))))
    return 2 * H * T * U * D + 4 * H * u * T * D


def predicted_bytes(variant: str, T: int, H: int = 8, D: int = 64, W: int = 256, c: float = 5) -> int:
    if variant in ("full", "causal"):
        return 4 * H * T * D
    out = 4 * H * T * D
    if variant == "window":
        bq = rows_per_block(1, H, T, None)
        return (
            2 * out + 4 * H * bq * min(T, bq + W) * 3
        )  # block outputs + their concatenation; scores, weights, a temporary
    U = u = min(T, int(c * math.ceil(math.log(T))))
    return 4 * (H * T * U * D + H * u * T) + 2 * out


def call(variant: str, q, k, v, W: int = 256):
    """One attention call of the variant: what `attnroute cost bill` times."""
    if variant == "full":
        return attend(q, k, v, impl="sdpa")
    if variant == "causal":
        return attend(q, k, v, causal(), impl="sdpa")
    if variant == "window":
        return attend(q, k, v, sliding_window(W), impl="blocked")
    return probsparse_attend(q, k, v, generator=torch.Generator().manual_seed(0))


__all__ = ["VARIANTS", "call", "predicted_bytes", "predicted_flops"]
