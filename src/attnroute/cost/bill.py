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

Measured: median wall time, and peak RSS above the baseline in a fresh child process.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import torch

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
        from ..build.backends.blocked import rows_per_block

        bq = rows_per_block(1, H, T, None)
        return 2 * out + 4 * H * bq * min(T, bq + W) * 3  # block outputs + their concatenation; scores, weights, a temporary
    U = u = min(T, int(c * math.ceil(math.log(T))))
    return 4 * (H * T * U * D + H * u * T) + 2 * out


def call(variant: str, q, k, v, W: int = 256):
    from ..build import attend, causal, probsparse_attend, sliding_window

    if variant == "full":
        return attend(q, k, v, impl="sdpa")
    if variant == "causal":
        return attend(q, k, v, causal(), impl="sdpa")
    if variant == "window":
        return attend(q, k, v, sliding_window(W), impl="blocked")
    return probsparse_attend(q, k, v, generator=torch.Generator().manual_seed(0))


def measure_one(variant: str, T: int, H: int = 8, D: int = 64) -> dict:
    """In this process: median time of 3 calls after a warm-up; peak extra RSS of one call."""
    from ..bench.measure import peak_extra_bytes, seconds

    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, T, D, generator=g) for _ in range(3))
    t = seconds(lambda: call(variant, q, k, v), repeats=3 if T <= 4096 else 1)
    return {"variant": variant, "T": T, "seconds": t, "peak_extra_bytes": peak_extra_bytes(lambda: call(variant, q, k, v))}


def rows(lengths=(1024, 2048, 4096, 8192), progress=None) -> list[dict]:
    out = []
    for T in lengths:
        for variant in VARIANTS:
            if progress:
                progress(f"{variant} at {T}")
            res = subprocess.run([sys.executable, "-m", "attnroute.cost.bill", variant, str(T)], capture_output=True,
                                 text=True, check=True)
            m = json.loads(res.stdout.strip().splitlines()[-1])
            m["flops"] = predicted_flops(variant, T)
            m["predicted_bytes"] = predicted_bytes(variant, T)
            m["gflops_per_s"] = m["flops"] / m["seconds"] / 1e9
            out.append(m)
    return out


def plot(data: list[dict], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for v in VARIANTS:
        r = [x for x in data if x["variant"] == v]
        T = [x["T"] for x in r]
        line, = a.loglog(T, [x["seconds"] for x in r], "o-", label=f"{v} measured")
        scale = r[-1]["seconds"] / r[-1]["flops"]  # the formula, pinned to the longest measurement
        a.loglog(T, [x["flops"] * scale for x in r], "--", color=line.get_color(), alpha=0.6, label=f"{v} ∝ FLOPs")
        # measurements under 0.1 MiB (allocator reuse) are drawn at 0.1 MiB
        b.loglog(T, [max(0.1, (x["peak_extra_bytes"] or 0) / 2**20) for x in r], "o-", color=line.get_color(),
                 label=f"{v} measured")
        b.loglog(T, [x["predicted_bytes"] / 2**20 for x in r], "--", color=line.get_color(), alpha=0.6,
                 label=f"{v} formula")
    a.set_xlabel("sequence length T (tokens)")
    a.set_ylabel("time per call (s)")
    a.legend(fontsize=7)
    b.set_xlabel("sequence length T (tokens)")
    b.set_ylabel("peak extra memory (MiB)")
    b.legend(fontsize=7)
    fig.suptitle("the bill of long context: B=1, H=8, D=64, fp32, W=256, ProbSparse c=5")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    print(json.dumps(measure_one(sys.argv[1], int(sys.argv[2]))))
