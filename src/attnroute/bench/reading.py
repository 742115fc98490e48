"""The read benchmark: ablation sweeps on SmolLM2 and the long-context HeadTable.

Effects: SmolLM2 on 8 sequences of 40 random tokens repeated twice (+ BOS), zero ablation.
  plain     one full forward per head (TransformerLens' patching utility does this); timed on one
            head per layer and scaled to all heads (each forward costs the same)
  exact     attnroute's sweep: clean residual stream reused, one copy of the batch per head
  estimate  one forward and one backward (head gates)
Long context (one child process per cell, peak RSS from VmHWM): transformers' SDPA forward (no
weights), transformers' eager forward with output_attentions (what BertViz, TransformerLens' bridge,
nnsight and Inseq read), and attnroute's HeadTable text statistics (fused backend; with --max-weight
the blocked one); ratios from alternating rounds in one process (bench/long_context.py says why); the
repeated-token probe through the fused backend and through eager weights.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from .child import run_child


def effects_rows(progress=None, batch=8, S=40, plain_heads_per_layer=1) -> dict:
    from ..engine.repeats import repeated_random_tokens
    from ..models import load
    from ..read import effects

    lm = load("smollm2")
    stim = repeated_random_tokens(lm.tokenizer, S=S, batch=batch, seed=0)
    b = {"input_ids": stim.input_ids, "attention_mask": stim.attention_mask}
    L, H = lm.n_layers, lm.n_heads
    sample = [(layer, (layer * 4) % H) for layer in range(L) for _ in range(plain_heads_per_layer)]
    t0 = time.perf_counter()
    plain = effects.plain_sweep(lm, b, heads=sample, progress=lambda l, h: progress and progress(f"plain L{l}.H{h}"))
    plain_s = (time.perf_counter() - t0) * (L * H) / len(sample)
    t0 = time.perf_counter()
    exact = effects.exact_sweep(lm, b, modes=("zero",), progress=lambda m, l, *_: progress and progress(f"exact L{l}"))[
        "zero"
    ]
    exact_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    est = effects.gradient_estimate(lm, b)
    est_s = time.perf_counter() - t0
    checked = [(l, h) for l, h in sample]
    max_diff = max(abs(plain[l, h] - exact[l, h]) for l, h in checked)
    agree = effects.rank_agreement(est, exact)
    return {
        "stimulus": stim.describe(),
        "heads": L * H,
        "plain_seconds_all_heads": plain_s,
        "plain_heads_timed": len(sample),
        "exact_seconds": exact_s,
        "estimate_seconds": est_s,
        "exact_speedup": plain_s / exact_s,
        "estimate_speedup": plain_s / est_s,
        "exact_vs_plain_max_abs_diff": float(max_diff),
        **agree,
        "top10_exact": [list(map(int, divmod(int(i), H))) for i in np.argsort(-exact.ravel())[:10]],
    }


def long_context_cell(mode: str, T: int, timeout: int = 1500) -> dict:
    m = run_child("attnroute.bench.long_context", mode, T, timeout=timeout)
    return {"mode": mode, "T": T, **m} if "error" in m else m


def pair_cell(mode: str, T: int, rounds: int, timeout: int = 3000) -> dict:
    m = run_child("attnroute.bench.long_context", "pair", mode, T, rounds, timeout=timeout)
    return {"mode": mode, "T": T, **m} if "error" in m else m


# Time and memory of one run each, one process per cell (peak RSS is per process).
CELLS = [
    ("sdpa-body", 4096),
    ("sdpa-body-nocache", 4096),
    ("eager", 4096),
    ("headtable", 4096),
    ("headtable-masses", 4096),
    ("headtable-max", 4096),
    ("sdpa-body", 16384),
    ("sdpa-body-nocache", 16384),
    ("headtable", 16384),
    ("headtable", 32768),
]
# Ratios to the SDPA forward of the body: alternating rounds in one process, ratio of the medians.
PAIRS = [
    ("headtable", 4096, 5),
    ("headtable-masses", 4096, 5),
    ("headtable-max", 4096, 2),
    ("headtable", 16384, 2),
]


def long_context_rows(cells=CELLS, progress=None) -> list[dict]:
    rows = []
    for mode, T in cells:
        if progress:
            progress(f"long context: {mode} at {T} tokens")
        rows.append(long_context_cell(mode, T))
    return rows


def pair_rows(pairs=PAIRS, progress=None) -> list[dict]:
    rows = []
    for mode, T, rounds in pairs:
        if progress:
            progress(f"ratio: {mode} against the SDPA body at {T} tokens, {rounds} rounds")
        rows.append(pair_cell(mode, T, rounds))
    return rows


def repeated_rows(seeds=(0, 1, 2)) -> dict:
    """The repeated-token probe (prev / duplicate / induction) through the fused backend and through the
    eager weights (its path before the fused backend), same stimuli; seconds and the largest difference."""
    from ..engine.repeats import repeated_random_tokens
    from ..models import load
    from ..read.heads import repeated_scores

    lm = load("smollm2")
    stims = [repeated_random_tokens(lm.tokenizer, seed=s) for s in seeds]
    out, scores = {}, {}
    for impl in ("fused", "eager"):
        repeated_scores(lm, stims[0], impl=impl)  # warm-up
        t0 = time.perf_counter()
        scores[impl] = [repeated_scores(lm, st, impl=impl) for st in stims]
        out[f"{impl}_seconds"] = time.perf_counter() - t0
    out["max_abs_diff"] = float(
        max(
            np.nanmax(np.abs(a[name] - b[name]))
            for a, b in zip(scores["fused"], scores["eager"], strict=True)
            for name in a
        )
    )
    out["stimulus"] = stims[0].describe()
    out["seeds"] = list(seeds)
    return out


def run(progress=None, quick: bool = False, parts=("effects", "long_context"), previous: dict | None = None) -> dict:
    """Run the named parts; parts not run are kept from ``previous`` (an earlier read.json)."""
    out = dict(previous or {})
    out["threads"] = torch.get_num_threads()
    if "effects" in parts:
        out["effects"] = effects_rows(progress, batch=1, S=6) if quick else effects_rows(progress)
    if "long_context" in parts:
        cells = [("sdpa-body", 256), ("headtable", 256)] if quick else CELLS
        out["long_context"] = long_context_rows(cells, progress)
        out["ratios"] = pair_rows([("headtable", 256, 2)] if quick else PAIRS, progress)
        out["repeated"] = repeated_rows((0,) if quick else (0, 1, 2))
    return out
