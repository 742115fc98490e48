"""Heads pruned per attention mode of a speech model, scored by word error rate: are cross-attention heads
less fungible than self-attention heads (Michel et al. 2019, "Are Sixteen Heads Really Better than One?")?

    result = ablate_modes(loaded, clips)   # every head's exact Δ loss, then a WER curve per mode

1. Every head's exact zero-ablation Δ of the decoder's teacher-forced loss on all clips at once
   (effects.exact_sweep — exact for every head, so nothing rests on the estimate; the one-backward
   estimate is kept beside it with its rank agreement).
2. Per mode (encoder self, decoder self, cross), the heads of that mode pruned (zeroed) least important
   first, k at a time; at each k every clip is transcribed by greedy decoding under the pruning and the
   word error rate measured against the clips' texts.
3. Michel et al.'s sharpest test: the last layer of each mode cut to its one most important head.

WER: word-level edit distance / reference words, after lowercasing, dropping punctuation and spelling
numbers 0–20 (Whisper writes "9" for "nine").
"""

from __future__ import annotations

import re
import time

import numpy as np
import torch

from ..audio import audio, bundled_clips
from ..engine import ZeroHead
from ..progress import reporter
from .adapter import routed
from .effects import exact_sweep, gradient_estimate, rank_agreement
from .ground.speech import clip_batch, transcribe_batch

NUMBERS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
NUMBERS = dict(enumerate((NUMBERS + "seventeen eighteen nineteen twenty").split()))
MODES = ("encoder", "decoder", "cross")


def normalize(text: str) -> list[str]:
    words = re.sub(r"[^\w\s']", " ", text.lower()).split()
    return [NUMBERS.get(int(w), w) if w.isdigit() else w for w in words]


def edit_distance(a: list[str], b: list[str]) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def wer(references: list[str], hypotheses: list[str]) -> float:
    """Word error rate over a set: Σ edits / Σ reference words."""
    refs = [normalize(r) for r in references]
    errors = sum(edit_distance(r, normalize(h)) for r, h in zip(refs, hypotheses))
    return errors / max(1, sum(len(r) for r in refs))


def pruned(loaded, heads: list[tuple[int, int]]) -> list:
    """ZeroHead interventions for (layer, head) pairs, one per layer."""
    by_layer: dict[int, list[int]] = {}
    for layer, h in heads:
        by_layer.setdefault(layer, []).append(h)
    return [ZeroHead(hs, layer) for layer, hs in sorted(by_layer.items())]


def score(loaded, clips, features, heads) -> dict:
    """WER and transcripts with ``heads`` zeroed."""
    with torch.no_grad(), routed(loaded, interventions=pruned(loaded, heads), impl="eager"):
        texts = [t for _, t in transcribe_batch(loaded, features)]
    return {"wer": round(wer([c.text for c in clips], texts), 4), "transcripts": texts}


def ablate_modes(loaded, clips=None, steps: int = 8, progress=None) -> dict:
    """The per-mode pruning curves and the last-layer-one-head test (module docstring)."""
    say = reporter(progress)
    clips = [audio(c) for c in (clips or list(bundled_clips()))]
    batch = clip_batch(loaded, clips)
    started = time.perf_counter()
    say("stage", f"exact zero ablation of all {loaded.n_layers * loaded.n_heads} heads on {len(clips)} clips")
    delta = exact_sweep(loaded, batch, modes=("zero",))["zero"]
    estimate = gradient_estimate(loaded, batch)
    modes = {m: [l for l in range(loaded.n_layers) if loaded.mode(l) == m] for m in MODES}
    base = score(loaded, clips, batch["input_features"], [])
    out = {"clips": [c.source for c in clips], "words": sum(len(normalize(c.text)) for c in clips), "baseline": base}
    out["delta_loss"] = np.round(delta, 5).tolist()
    out["estimate_vs_exact"] = rank_agreement(estimate, delta, k=10)
    out["curves"], out["last_layer_one_head"] = {}, {}
    for mode, layers in modes.items():
        order = sorted(((l, h) for l in layers for h in range(loaded.n_heads)), key=lambda lh: delta[lh])
        counts = sorted({round(i * len(order) / steps) for i in range(1, steps + 1)})
        curve = []
        for k in counts:
            say("stage", f"{mode}: {k} of {len(order)} heads pruned")
            curve.append(
                {
                    "pruned": k,
                    "share": round(k / len(order), 3),
                    **score(loaded, clips, batch["input_features"], order[:k]),
                }
            )
        out["curves"][mode] = [{"pruned": 0, "share": 0.0, **base}, *curve]
        last = layers[-1]
        keep = max(range(loaded.n_heads), key=lambda h: delta[last, h])
        cut = [(last, h) for h in range(loaded.n_heads) if h != keep]
        out["last_layer_one_head"][mode] = {
            "layer": last,
            "kept": keep,
            **score(loaded, clips, batch["input_features"], cut),
        }
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


__all__ = ["ablate_modes", "edit_distance", "normalize", "wer"]
