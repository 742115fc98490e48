"""The settle rule: exact measurement of the components an estimate ranks highest, until the exact top
stops changing — the one rule of `heads` (ablation), `patch` (heads, layers, q/k/v), the explorer and
every verb that verifies an estimate.

    info = settle(order, measure, exact, SettleRule(first=20, step=10, top=10))

``order`` ranks the components by the estimate (best first); ``measure(indices)`` measures them
exactly; ``exact(indices)`` returns their exact values. The first ``first`` are measured, then
``step`` more at a time until a round leaves the exact top ``top`` (by |value|, or by value for a
signed ranking) unchanged — a component the estimate ranked low but whose exact effect is large
gets found when it is near the cutoff. The counts are the settings' (settings.SETTLE_FIRST, …).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ...settings import SETTLE_FIRST, SETTLE_STEP, SETTLE_TOP


@dataclass(frozen=True)
class SettleRule:
    first: int = SETTLE_FIRST  # measured in the first round
    step: int = SETTLE_STEP  # measured in each later round
    top: int = SETTLE_TOP  # the exact top that must stop changing
    signed: bool = False  # rank the exact top by value (largest first) instead of by |value|

    def describe(self) -> str:
        by = "" if not self.signed else " (largest first)"
        return f"settle: first {self.first}, then {self.step} at a time until the exact top {self.top}{by} holds"


def exact_top(indices: Sequence[int], values: np.ndarray, k: int, signed: bool) -> set[int]:
    """The k indices with the largest (|)exact value(|), ties kept in the order given."""
    idx = np.asarray(list(indices))
    score = -values if signed else -np.abs(values)
    return set(idx[np.argsort(score, kind="stable")][:k].tolist())


def settle(
    order: Sequence[int],
    measure: Callable[[list[int]], None],
    exact: Callable[[list[int]], np.ndarray],
    rule: SettleRule,
) -> dict:
    """Measure ``order`` in rounds until the exact top holds; {"measured": n, "rounds": r}."""
    order = [int(i) for i in order]
    n = min(rule.first, len(order))
    measure(order[:n])
    rounds = 1
    while n < len(order):
        before = exact_top(order[:n], exact(order[:n]), rule.top, rule.signed)
        measure(order[n : n + rule.step])
        n, rounds = min(len(order), n + rule.step), rounds + 1
        if exact_top(order[:n], exact(order[:n]), rule.top, rule.signed) == before:
            break
    return {"measured": n, "rounds": rounds}


def measure_first(order: Sequence[int], n: int, measure: Callable[[list[int]], None], chunk: int) -> dict:
    """Measure the first ``n`` of ``order`` (every one when n = len(order)) in rounds of ``chunk``."""
    order = [int(i) for i in order][:n]
    for i in range(0, len(order), chunk):
        measure(order[i : i + chunk])
    return {"measured": len(order), "rounds": max(1, -(-len(order) // chunk))}


__all__ = ["SettleRule", "exact_top", "measure_first", "settle"]
