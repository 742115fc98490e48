"""The engine benchmark: every backend side by side, ProbSparse vs full, cached vs uncached decoding.

Settings (docs/benchmarks.md): B=1, H=8, D=64, causal, fp32, Tq = Tk ∈ {1024, 4096, 8192}. torch SDPA
is the tool a user would pick instead; ratios are against it.
"""

from __future__ import annotations

import torch

from ..engine import RowStats, TinyConfig, TinyTransformer, attend, causal, probsparse_attend
from .child import run_child
from .measure import seconds

BACKENDS = ("sdpa", "blocked", "blocked+probes", "eager")


def _inputs(T, B=1, H=8, D=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, generator=g) for _ in range(3)]


def backend_rows(sizes, progress=None):
    rows = []
    for T in sizes:
        q, k, v = _inputs(T)
        repeats = 5 if T <= 4096 else 2
        for name in BACKENDS:
            impl = name.split("+")[0]

            def call(impl=impl, name=name, q=q, k=k, v=v):  # bound now: the loop moves on
                probes = [RowStats()] if name.endswith("probes") else []
                return attend(q, k, v, causal(), impl=impl, probes=probes, memory_budget=1 << 36)

            t = seconds(call, repeats=repeats)
            peak = child_peak_memory(name, T)
            rows.append({"T": T, "impl": name, "seconds": t, "peak_extra_bytes": peak})
            if progress:
                progress(f"T={T} {name}: {t:.3f} s, {peak} B")
    _add_ratios(rows)
    return rows


def child_peak_memory(name: str, T: int) -> int | None:
    m = run_child("attnroute.bench.peak_memory", name, T)
    if "error" in m:
        raise RuntimeError(f"measuring the peak memory of {name} at T={T} failed: {m['error']}")
    return m["peak_extra_bytes"]


def _add_ratios(rows):
    base = {(r["T"]): r for r in rows if r["impl"] == "sdpa"}
    eager = {(r["T"]): r for r in rows if r["impl"] == "eager"}
    for r in rows:
        r["time_vs_sdpa"] = r["seconds"] / base[r["T"]]["seconds"]
        e = eager[r["T"]]["peak_extra_bytes"]
        r["memory_vs_eager"] = (r["peak_extra_bytes"] / e) if (e and r["peak_extra_bytes"] is not None) else None


def probsparse_rows(sizes, progress=None):
    """ProbSparse (factor 5, encoder self-attention: no mask) against full attention by SDPA."""
    rows = []
    for T in sizes:
        q, k, v = _inputs(T, seed=1)
        full = attend(q, k, v, impl="sdpa")
        gen = torch.Generator().manual_seed(0)
        sparse = probsparse_attend(q, k, v, generator=gen)
        err = float((sparse - full).norm() / full.norm())
        t_full = seconds(lambda q=q, k=k, v=v: attend(q, k, v, impl="sdpa"), repeats=3)
        t_sparse = seconds(lambda q=q, k=k, v=v, gen=gen: probsparse_attend(q, k, v, generator=gen), repeats=3)
        rows.append(
            {
                "T": T,
                "full_seconds": t_full,
                "probsparse_seconds": t_sparse,
                "speedup": t_full / t_sparse,
                "relative_error": err,
            }
        )
        if progress:
            progress(f"ProbSparse T={T}: {t_sparse:.3f} s vs full {t_full:.3f} s, rel. error {err:.3f}")
    return rows


def generation_row(prompt_len=512, new_tokens=512, progress=None):
    torch.manual_seed(0)
    cfg = TinyConfig(
        vocab=512, d_model=256, n_layers=4, n_heads=8, d_ff=1024, max_len=prompt_len + new_tokens, positions="rope"
    )
    model = TinyTransformer(cfg).eval()
    prompt = torch.randint(0, cfg.vocab, (1, prompt_len))
    outputs = {}

    def run(use_cache):
        outputs[use_cache] = model.generate(prompt, new_tokens, use_cache=use_cache)

    cached = seconds(lambda: run(True), repeats=1, warmup=0)
    full = seconds(lambda: run(False), repeats=1, warmup=0)
    same = bool(torch.equal(outputs[True], outputs[False]))  # every one of the new_tokens, from the timed runs
    row = {
        "prompt": prompt_len,
        "new_tokens": new_tokens,
        "model": "TinyTransformer d=256, 4 layers, 8 heads, RoPE",
        "cached_seconds": cached,
        "recompute_seconds": full,
        "speedup": full / cached,
        "same_tokens": same,
    }
    if progress:
        progress(f"generation: cached {cached:.2f} s, recompute {full:.2f} s")
    return row


def run(sizes=(1024, 4096, 8192), probsparse_sizes=(1024, 4096), new_tokens=512, progress=None) -> dict:
    return {
        "settings": {
            "B": 1,
            "H": 8,
            "D": 64,
            "mask": "causal (bottom-right)",
            "dtype": "float32",
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
        },
        "backends": backend_rows(sizes, progress),
        "probsparse": probsparse_rows(probsparse_sizes, progress),
        "generation": generation_row(new_tokens=new_tokens, progress=progress),
    }
