"""Reading training curves: where a curve changes fastest, and whether two changes coincide."""

from __future__ import annotations

import numpy as np

from ..engine import InputError


def smooth(y, window: int = 3) -> np.ndarray:
    """Centred moving average (edges use the points that exist), so one noisy eval cannot win."""
    y = np.asarray(y, dtype=float)
    if window <= 1 or len(y) < window:
        return y
    half = window // 2
    return np.array([y[max(0, i - half) : i + half + 1].mean() for i in range(len(y))])


def steepest(steps, y, *, falling: bool, window: int = 3) -> dict:
    """The interval between evaluations where the smoothed curve moves fastest per step.

    Returns {step: midpoint of the interval, rate: change per 1,000 steps, before, after: smoothed
    values at its ends}.
    """
    s, ys = np.asarray(steps, dtype=float), smooth(y, window)
    if len(s) < 2:
        raise InputError(f"need at least 2 evaluations to find a change, got {len(s)}")
    slope = np.diff(ys) / np.diff(s)  # per step
    i = int(np.argmin(slope) if falling else np.argmax(slope))
    return {
        "step": int(round((s[i] + s[i + 1]) / 2)),
        "rate": float(slope[i] * 1000),
        "before": float(ys[i]),
        "after": float(ys[i + 1]),
        "interval": [int(s[i]), int(s[i + 1])],
    }


def rise_step(steps, y, fraction: float = 0.5) -> int | None:
    """First evaluation step at which the smoothed curve has covered ``fraction`` of its total rise
    (None when it never rises). Less sensitive than the steepest interval to a curve that rises in
    two bursts."""
    s, ys = np.asarray(steps), smooth(y)
    lo, hi = ys[0], ys.max()
    if hi - lo <= 0:
        return None
    hit = np.nonzero(ys >= lo + fraction * (hi - lo))[0]
    return int(s[hit[0]])
