"""Measurements for the bill of long context (`attnroute cost bill`): each cell in a child process.

    python -m attnroute.bench.bill VARIANT T      prints {variant, T, seconds, peak_extra_bytes}

The formulas the measurements stand beside live in cost/long_context.py.
"""

from __future__ import annotations

import json
import sys

import torch

from ..cost.long_context import VARIANTS, call, predicted_bytes, predicted_flops
from ..engine import InputError
from .child import run_child
from .measure import peak_extra_bytes, seconds

MIN_LENGTH = 16


def measure_one(variant: str, T: int, H: int = 8, D: int = 64) -> dict:
    """In this process: median time of 3 calls after a warm-up; peak extra RSS of one call."""
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, T, D, generator=g) for _ in range(3))
    t = seconds(lambda: call(variant, q, k, v), repeats=3 if T <= 4096 else 1)
    return {
        "variant": variant,
        "T": T,
        "seconds": t,
        "peak_extra_bytes": peak_extra_bytes(lambda: call(variant, q, k, v)),
    }


def rows(lengths=(1024, 2048, 4096, 8192), progress=None) -> list[dict]:
    """Every variant at every length, formula beside measurement."""
    if any(T < MIN_LENGTH for T in lengths):
        raise InputError(f"lengths must be at least {MIN_LENGTH} tokens each, got {list(lengths)}", field="lengths")
    out = []
    for T in lengths:
        for variant in VARIANTS:
            if progress:
                progress(f"{variant} at {T}")
            m = run_child("attnroute.bench.bill", variant, T)
            if "error" in m:
                raise RuntimeError(f"measuring {variant} at T={T} failed: {m['error']}")
            m["flops"] = predicted_flops(variant, T)
            m["predicted_bytes"] = predicted_bytes(variant, T)
            m["gflops_per_s"] = m["flops"] / m["seconds"] / 1e9
            out.append(m)
    return out


if __name__ == "__main__":
    print(json.dumps(measure_one(sys.argv[1], int(sys.argv[2]))))
