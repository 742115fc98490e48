"""The settings of `attnroute learn`: the training every experiment shares, and each experiment's own.

Frozen and validated once: every integer field is positive (seed, ff and warmup may be 0), every rate
finite and ≥ 0. The models and tasks they describe are built in learn/ (this floor imports no torch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from ..errors import InputError
from .base import Settings, opt, path_arg

MAY_BE_ZERO = frozenset({"seed", "ff", "warmup"})  # ff = 0 is the attention-only model; warmup 0: none
POSITIONS = ("learned", "sinusoidal", "rope")


@dataclass(frozen=True)
class TrainSettings(Settings):
    """AdamW on a synthetic task, evaluated every K steps (learn/train.py)."""

    steps: int = opt(1500, "training steps per model")
    batch: int = opt(32, "sequences per step")
    lr: float = opt(1e-3, "AdamW's learning rate")
    weight_decay: float = opt(0.01, "AdamW's weight decay")
    warmup: int = opt(50, "steps of linear warm-up")
    every: int = opt(50, "evaluate every K steps")
    seed: int = opt(0, "seed of the init and the batches")
    clip: float = opt(1.0, "gradient norm clip")

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            for x in value if isinstance(value, tuple) else (value,):
                if isinstance(x, bool) or x is None or isinstance(x, str):
                    continue
                if isinstance(x, int) and (x < 0 or (x == 0 and f.name not in MAY_BE_ZERO)):
                    raise InputError(
                        f"{f.name} must be {'>= 0' if f.name in MAY_BE_ZERO else 'positive'}, got {x}", field=f.name
                    )
                if isinstance(x, float) and not (math.isfinite(x) and x >= 0):
                    raise InputError(f"{f.name} must be a finite number >= 0, got {x}", field=f.name)
        if getattr(self, "positions", "rope") not in POSITIONS:
            raise InputError(
                f"positions must be one of {', '.join(POSITIONS)}, got {self.positions!r}", field="positions"
            )


@dataclass(frozen=True)
class InductionSettings(TrainSettings):
    """An induction circuit forms (learn/induction.py)."""

    layers: int = opt(2, "layers (an induction circuit needs two)")
    heads: int = opt(4, "heads per layer")
    width: int = opt(64, "d_model")
    ff: int = opt(0, "d_ff of feed-forward layers; 0 = attention-only")
    positions: str = opt("rope", "learned, sinusoidal or rope (rope: the circuit forms near step 600)")
    every: int = opt(25, "evaluate every K steps")
    lr: float = opt(3e-3, "AdamW's learning rate")
    vocab: int = opt(64, "tokens of the repeat task")
    length: int = opt(48, "tokens per sequence")
    min_len: int = opt(8, "the shortest repeated span")
    max_len: int = opt(24, "the longest repeated span")
    fixed_offset: int | None = opt(None, "the shortcut contrast: the repeat always D positions after the first copy")
    probe_periods: tuple[int, ...] = opt((12, 20), "S of the repeated-random-token probes (≠ fixed_offset)")
    eval_batch: int = opt(128, "sequences per evaluation")
    save: str | None = opt(None, "a folder: the trained model saved there for --model, with prompt pairs (rotary only)")

    def __post_init__(self):
        super().__post_init__()
        path_arg(self.save, "save", "a folder's path")
        if self.save is not None and self.positions != "rope":
            raise InputError(
                f"only a rotary model is saved for --model (transformers has no architecture for positions="
                f"{self.positions} without an MLP); drop `save` or use positions rope",
                field="save",
            )
        if self.layers < 2:
            raise InputError(
                f"an induction circuit needs two layers (previous-token, then induction); got `layers` {self.layers}",
                field="layers",
            )
        if 2 * max(self.probe_periods) > self.length:  # a probe is S random tokens, then the same S again
            raise InputError(
                f"probe_periods {list(self.probe_periods)} read {2 * max(self.probe_periods)} tokens, past the "
                f"{self.length} positions the model is trained on (a learned table has no more); lower the "
                "periods to at most length/2 or raise length",
                field="probe_periods",
            )


@dataclass(frozen=True)
class ScaleSettings(TrainSettings):
    """With and without 1/√d_k at several head dims (learn/scale.py)."""

    head_dims: tuple[int, ...] = opt((16, 32, 64, 128, 256), "head dims trained with and without the scale")
    init_dims: tuple[int, ...] = opt((16, 32, 64, 128, 256, 512), "head dims measured at init only")
    layers: int = opt(2, "layers")
    heads: int = opt(1, "heads per layer (one: the smallest induction circuit)")
    width: int = opt(64, "d_model")
    positions: str = opt("rope", "learned, sinusoidal or rope")
    steps: int = opt(1000, "training steps per model")
    lr: float = opt(3e-3, "AdamW's learning rate")


@dataclass(frozen=True)
class PruneSettings(TrainSettings):
    """1–8 heads on a mixture of routes, then pruning by importance (learn/pruning.py)."""

    head_counts: tuple[int, ...] = opt((1, 2, 4, 8), "heads per layer, one model each")
    layers: int = opt(2, "layers")
    width: int = opt(128, "d_model, fixed across head counts (8 heads → d_k = 16)")
    positions: str = opt("rope", "learned, sinusoidal or rope")
    steps: int = opt(1200, "training steps per model")
    every: int = opt(100, "evaluate every K steps")
    lr: float = opt(3e-3, "AdamW's learning rate")
    fraction: float = opt(0.10, "of all heads, removed per pruning step (Michel et al.)")
    score_batch: int = opt(8, "examples per |∂L/∂ξ| term (Michel et al. accumulate per batch)")


@dataclass(frozen=True)
class FFSettings(TrainSettings):
    """Attention-only against attention + feed-forward at the same budget (learn/feedforward.py)."""

    width: int = opt(64, "d_model")
    heads: int = opt(4, "heads per layer")
    attention_layers: int = opt(4, "layers of the attention-only stack")
    ff_layers: int = opt(2, "layers of the stack with feed-forward layers")
    d_ff: int = opt(128, "d_ff (2·width·d_ff ≈ 4·width²: one FF costs what one attention layer costs)")
    positions: str = opt("rope", "learned, sinusoidal or rope")
    lr: float = opt(3e-3, "AdamW's learning rate")
    batch: int = opt(256, "sequences of two tokens per step (one scored row each)")
    vocab: int = opt(128, "tokens in the table task (a vocab × vocab table to compute)")
    length: int = opt(2, "tokens per sequence")


@dataclass(frozen=True)
class CrossSettings(TrainSettings):
    """An encoder-decoder: heads pruned per attention mode, cross maps swapped (learn/crossattn.py)."""

    steps: int = opt(600, "training steps (100 % token accuracy from about step 300, seed 0)")
    batch: int = opt(64, "sequences per step")
    lr: float = opt(3e-3, "AdamW's learning rate")
    length: int = opt(6, "content tokens in a source")
    vocab: int = opt(14, "tokens, the 4 special ones included")
    width: int = opt(64, "d_model")
    heads: int = opt(4, "heads per attention layer")
    layers: int = opt(2, "layers per stack")
    eval_batch: int = opt(512, "sequences per evaluation")


__all__ = ["CrossSettings", "FFSettings", "InductionSettings", "PruneSettings", "ScaleSettings", "TrainSettings"]
