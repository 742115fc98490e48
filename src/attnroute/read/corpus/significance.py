"""Which heads matter over a corpus: a paired test per candidate and Holm's correction over them."""

from __future__ import annotations

import numpy as np

from ..moments import Moments

ALPHA = 0.05


def holm(p: np.ndarray, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down adjusted p-values and which hypotheses are rejected at ``alpha`` (Holm 1979)."""
    m = len(p)
    order = np.argsort(p)
    adjusted = np.empty(m)
    running = 0.0
    for rank_i, i in enumerate(order):
        running = max(running, min(1.0, (m - rank_i) * p[i]))
        adjusted[i] = running
    return adjusted, adjusted <= alpha


def significance(deltas: np.ndarray) -> dict:
    """Per candidate: mean Δ, 95 % interval, the paired t-test's p (ablated vs clean over documents:
    one-sample on Δ), Holm-adjusted p, and rejection at α."""
    from scipy import stats

    n = deltas.shape[0]
    m = Moments((deltas.shape[1],))
    for row in deltas:
        m.add(row)
    if n < 2:
        p = np.full(deltas.shape[1], np.nan)
        return {"mean": m.mean, "ci": m.ci95(), "p": p, "p_holm": p, "significant": np.zeros_like(p, dtype=bool)}
    with np.errstate(all="ignore"):
        p = stats.ttest_1samp(deltas, 0.0, axis=0).pvalue
    p = np.where(np.isnan(p), 1.0, p)  # a constant Δ column (e.g. all zero): no evidence
    adjusted, reject = holm(p)
    return {"mean": m.mean, "ci": m.ci95(), "p": p, "p_holm": adjusted, "significant": reject}


__all__ = ["ALPHA", "holm", "significance"]
