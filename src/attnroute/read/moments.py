"""Mergeable running statistics: count, mean and variance of arrays, one observation at a time
(Welford 1962) or a whole accumulator at once (Chan, Golub & LeVeque 1979).

    m = Moments((L, H)); m.add(x)              # x: one document's [L, H] values (NaN = not observed)
    m.merge(other)                             # the same result as adding other's observations here
    m.mean, m.variance, m.ci95()               # per entry

Entries are independent: an observation that is NaN in one entry counts nowhere for that entry.
State is three float64 arrays, so a checkpoint (safetensors) and a collective (all_gather) carry it
exactly.
"""

from __future__ import annotations

import math

import numpy as np

# two-sided 95 % quantiles of Student's t for small n − 1 (beyond 30: the normal's 1.96 is within 2 %)
_T95 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    25: 2.060,
    30: 2.042,
}


def t95(dof: int) -> float:
    """Student's t quantile for a two-sided 95 % interval (the largest tabulated dof ≤ dof; 1.96 past 30)."""
    if dof < 1:
        return math.nan
    if dof > 30:
        return 1.96
    return _T95[max(d for d in _T95 if d <= dof)]


class Moments:
    def __init__(self, shape):
        self.n = np.zeros(shape, dtype=np.float64)
        self.mean_ = np.zeros(shape, dtype=np.float64)
        self.m2 = np.zeros(shape, dtype=np.float64)

    def add(self, x) -> None:
        """One observation per entry (NaN entries are skipped): Welford's update."""
        x = np.asarray(x, dtype=np.float64)
        ok = ~np.isnan(x)
        n1 = self.n + ok
        delta = np.where(ok, x - self.mean_, 0.0)
        self.mean_ = self.mean_ + np.where(ok, delta / np.maximum(n1, 1), 0.0)
        self.m2 = self.m2 + np.where(ok, delta * (np.where(ok, x, 0.0) - self.mean_), 0.0)
        self.n = n1

    def merge(self, other: Moments) -> None:
        """Fold another accumulator in (Chan et al.): as if its observations had been added here."""
        n = self.n + other.n
        delta = other.mean_ - self.mean_
        safe = np.maximum(n, 1)
        self.mean_ = self.mean_ + delta * other.n / safe
        self.m2 = self.m2 + other.m2 + delta**2 * self.n * other.n / safe
        self.n = n

    @property
    def mean(self) -> np.ndarray:
        return np.where(self.n > 0, self.mean_, np.nan)

    @property
    def variance(self) -> np.ndarray:
        """The sample variance (n − 1 in the denominator); NaN below two observations."""
        return np.where(self.n > 1, self.m2 / np.maximum(self.n - 1, 1), np.nan)

    def ci95(self) -> np.ndarray:
        """Half-width of the 95 % interval of the mean: t · s / √n (NaN below two observations)."""
        counts, where = np.unique(self.n, return_inverse=True)  # t once per count, not once per entry
        t = np.array([t95(int(n) - 1) for n in counts])[where].reshape(self.n.shape) if self.n.size else self.n
        return np.where(self.n > 1, t * np.sqrt(self.variance) / np.sqrt(np.maximum(self.n, 1)), np.nan)

    def state(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}.n": self.n, f"{prefix}.mean": self.mean_, f"{prefix}.m2": self.m2}

    @classmethod
    def from_state(cls, state: dict, prefix: str) -> Moments:
        m = cls(state[f"{prefix}.n"].shape)
        m.n, m.mean_, m.m2 = (np.array(state[f"{prefix}.{k}"], dtype=np.float64) for k in ("n", "mean", "m2"))
        return m


__all__ = ["Moments", "t95"]
