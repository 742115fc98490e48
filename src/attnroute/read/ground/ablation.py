"""Head ablation effects measured with your metric on your prompts (`heads --metric … --prompts …`).

The same estimate-then-exact read as the built-in effect (read/effects.py: the gate gradient for every
head, exact ablation of the top of its ranking until the exact top holds), with two changes: the
effect batch is the clean side of the prompts, and the effect is Δ M = M_ablated − M_clean of the
metric (per prompt, then the mean). Prompts of different lengths are read as separate batches (no
padding enters a run) and their effects averaged, weighted by how many prompts each holds.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ...errors import InputError
from ...promptset import FLAT_AT_CLEAN
from ...settings import SETTLE_TOP
from ..adapter import routed
from ..effects import MetricEffect, Sweep, gradient_estimate, rank_agreement, settled_sweep
from .batches import batch_of, references
from .budget import scaled
from .metrics import resolve
from .pool import KEEP_BYTES, block_bytes, chunk_groups
from .prompts import tokenize_pairs
from .settle import SettleRule


def exact_rule(exact: int) -> SettleRule:
    """`heads --exact N`: the settle rule from the top N, settling the exact top min(10, N) (largest Δ
    first), so that --exact 2 stays cheap."""
    return SettleRule(first=exact, top=min(SETTLE_TOP, exact), signed=True)


class GroupSweep:
    """Sweeps of several same-length batches behaving as one: deltas are the prompt-weighted means."""

    def __init__(self, sweeps: list[Sweep], sizes: list[int]):
        self.sweeps, self.w = sweeps, np.array(sizes, dtype=float) / sum(sizes)
        self.modes = sweeps[0].modes
        self.measured: list = []

    def measure(self, pairs) -> None:
        for s in self.sweeps:
            s.measure(pairs)
        self.measured += [p for p in pairs if p not in self.measured]

    @property
    def deltas(self) -> dict:
        return {m: sum(w * s.deltas[m] for w, s in zip(self.w, self.sweeps)) for m in self.modes}

    @property
    def info(self) -> dict:
        return {"shortcut": [s.check for s in self.sweeps], "heads_measured": len(self.measured)}


def _effect(loaded, g, fn) -> tuple[dict, MetricEffect]:
    batch = batch_of(loaded, g.clean)
    with torch.no_grad(), routed(loaded, impl="auto"):
        refs = references(loaded, loaded.model(**batch), batch)
    return batch, MetricEffect(fn, {"answer": g.answer, "wrong": g.wrong, **refs})


def _fits(loaded, groups) -> None:
    """The exact ablations restart from each block's recorded output, kept for every prompt: refused before
    any work when they would pass KEEP_BYTES, with the estimate."""
    tokens = sum(len(g.rows) * g.length for g in groups)
    need, keep = block_bytes(loaded, tokens), scaled(KEEP_BYTES)  # less under a memory cap (budget.py)
    if need > keep:
        per = need / max(1, sum(len(g.rows) for g in groups))
        raise InputError(
            f"the exact ablations keep every prompt's block outputs: {sum(len(g.rows) for g in groups):,} prompts "
            f"({tokens:,} tokens) need about {need / 2**30:.1f} GiB, past the {keep / 2**30:.2f} GiB this keeps; "
            f"give at most {int(keep // per):,} prompts",
            field="prompts",
        )


def metric_effect_columns(loaded, cols: dict, s, pairs, say) -> dict:
    """grad_attr and the exact ablation columns (Δ metric) on ``pairs`` (their clean side), for the
    HeadsSettings ``s``."""
    name, fn = resolve(s.metric)
    clean_only = tuple(dataclasses.replace(p, corrupt=p.clean) for p in pairs)  # a corrupt side is unused
    groups, record = tokenize_pairs(loaded.tokenizer, loaded.kind, clean_only, s.metric)
    for r in record:
        del r["corrupt"]
    for g in groups:
        loaded.fit(g.length, "prompts", f"prompt row {pairs[g.rows[0]].row}")
    _fits(loaded, groups)
    chunks = chunk_groups(groups)  # one forward and backward holds at most RUN_TOKENS tokens
    parts = [_effect(loaded, g, fn) for g in chunks]
    sizes = [len(g.rows) for g in chunks]
    say("stage", f"gradient estimate of Δ {name} (one forward, one backward per run of prompts)")
    cols["grad_attr"] = sum(n * gradient_estimate(loaded, b, e) for n, (b, e) in zip(sizes, parts)) / sum(sizes)
    L, H = cols["grad_attr"].shape
    exact = "all" if name in FLAT_AT_CLEAN else s.exact
    sweeps = GroupSweep([Sweep(loaded, b, s.modes, effect=e) for b, e in parts], sizes)
    if exact == "all" or exact >= L * H:
        sweeps.measure([(l, h) for l in range(L) for h in range(H)])
        info = sweeps.info
    elif exact == 0:
        info = {"heads_measured": 0}
    else:
        _, info = settled_sweep(
            loaded, None, np.abs(cols["grad_attr"]), modes=s.modes, rule=exact_rule(exact), sweep=sweeps
        )
    for mode, column in (("zero", "ablation_delta"), ("mean", "ablation_mean"), ("uniform", "ablation_uniform")):
        if mode in s.modes and info.get("heads_measured"):
            cols[column] = sweeps.deltas[mode]
    n = int(info.get("heads_measured", 0))
    first = sweeps.deltas[s.modes[0]] if n else np.full((L, H), np.nan)
    why = " (the estimate is flat for this metric: every head exact)" if name in FLAT_AT_CLEAN else ""
    return {
        "effect_batch": f"the clean side of {len(record)} prompts in {len(groups)} length groups; effect = Δ {name} "
        f"(ablated − clean, mean over prompts){why}",
        "metric": name,
        "grad_vs_ablation": rank_agreement(cols["grad_attr"], first, k=min(10, max(1, n))),
        "effect_prompts": record,
        "ablation": {"statement": f"exact for {n} of {L * H} heads", "modes": list(s.modes), **info},
    }


__all__ = ["GroupSweep", "metric_effect_columns"]
