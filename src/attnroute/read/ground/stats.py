"""Numbers over prompts: a mean with its 95 % interval, and an estimate's agreement with exact values.

    mean, ci = mean_ci(values)              # Student's t interval; None where it is not defined

Estimate against exact: does the first-order estimate rank and size effects the way exact runs do?

Syed et al. (2023, arXiv 2310.10348) found the linear estimate and exact patching agreeing only loosely
(R² = 0.27, slope 0.53 on a 4-layer model), so an estimate is reported beside the exact values it was
checked against, never alone:

    spearman  rank correlation (ties averaged)
    r2, slope the least-squares line exact ≈ slope · estimate + intercept, and its R²
"""

from __future__ import annotations

import numpy as np

from ...engine.tolerance import READ_TOLERANCE
from ...promptset import finite
from ..moments import Moments


def gap(clean, corrupt, dtype=None) -> float | None:
    """mean(clean − corrupt) over prompts when it is a gap to divide by, else None: a difference within the
    rounding a metric of this scale carries in ``dtype`` (READ_TOLERANCE's effects bound × max(1, |M|); float32:
    1e-4) is no gap — a pair whose runs agree has nothing for a patch, a route or a circuit to restore, and the
    ratios that divide by it (normalized effects, faithfulness, CPR) are undefined, said as such (docs/patching.md)."""
    import torch

    clean, corrupt = np.asarray(clean, dtype=float), np.asarray(corrupt, dtype=float)
    den = float(np.mean(clean - corrupt))
    scale = max(1.0, float(np.max(np.abs(np.concatenate([clean.ravel(), corrupt.ravel()])))))
    tol = READ_TOLERANCE.get(dtype or torch.float32, READ_TOLERANCE[torch.float32])["effects"]
    return None if not np.isfinite(den) or abs(den) <= tol * scale else den


def mean_ci(x) -> tuple[float | None, float | None]:
    """(mean, half-width of its 95 % interval) over the values; null (None) where not finite."""
    m = Moments(())
    for v in x:
        m.add(v)
    return finite(m.mean), finite(m.ci95())


def mean_ci_rows(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """mean_ci of every row of X [R, N] at once (NaN skipped; NaN where a row has no value)."""
    m = Moments((X.shape[0],))
    for column in np.asarray(X, dtype=np.float64).T:
        m.add(column)
    return m.mean, m.ci95()


def agreement(estimate, exact) -> dict:
    """Spearman ρ, R² and slope over the pairs where both are finite; None where fewer than 3 pairs."""
    a, b = np.asarray(estimate, dtype=np.float64), np.asarray(exact, dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    out = {"n": int(a.size), "spearman": None, "r2": None, "slope": None}
    if a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return out
    from scipy.stats import rankdata  # here: importing scipy.stats costs every process ~1 s and 36 MiB

    ra, rb = rankdata(a), rankdata(b)
    slope, intercept = np.polyfit(a, b, 1)
    resid = b - (slope * a + intercept)
    r2 = 1 - float((resid**2).sum()) / float(((b - b.mean()) ** 2).sum())
    out.update(spearman=float(np.corrcoef(ra, rb)[0, 1]), r2=r2, slope=float(slope))
    return out


__all__ = ["gap", "agreement", "mean_ci", "mean_ci_rows"]
