"""The settle rule: exact measurement of the components an estimate ranks highest, until the exact top
is settled — the one rule of `heads` (ablation), `patch` (heads, layers, q/k/v), `routes`, `circuit`
(edges), the explorer and every verb that verifies an estimate.

    info = settle(order, measure, exact, SettleRule(first=20, step=10, top=10), estimate=est)

``order`` ranks the components by the estimate (best first); ``measure(indices)`` measures them
exactly; ``exact(indices)`` returns their exact values; ``estimate`` (optional) the estimates themselves.
The first ``first`` are measured, then ``step`` more at a time, until

1. a round leaves the exact top ``top`` (by |value|, or by value for a signed ranking) unchanged, and
2. no unmeasured component could still enter it: with the *error band* b — the largest |exact − estimate|
   seen among the measured components — a component whose |estimate| + b reaches the top's smallest
   exact value is a candidate, and candidates are measured next (largest |estimate| first).

With ``channels`` (a label per component: an edge's receiver channel q, k, v, mlp, logits), each channel
has its own band — the largest error among *its* measured components, once it has BAND_MIN of them (the
overall band before) — so a channel whose estimate is poor (an MLP's, through its gate) widens only its
own components' reach, not every channel's.

With ``bracket`` (a second estimate of every component, as a circuit's EAP beside its EAP-IG) and channels, two
things change, both tested on IOI's circuit (docs/circuits.md): a component's reach starts from the larger of its
two estimates — where a linear estimate misses a nonlinearity the other may not (``embed > L0.MLP``: EAP −0.05,
EAP-IG +6.93, exact +7.13), and their disagreement is then evidence, not noise — and a channel's band is the
largest error among its measured components *of the unmeasured ones' size* (estimates at most LIKE times the
largest unmeasured reach, at least LIKE_MIN of its smallest): an edge of 0.4 off by 0.5 says little of how far
an edge of 0.02 can be off, and the top's errors had kept 4,545 MLP edges of IOI in.

Rule 2 is what the estimate cannot fool: a linear estimate is wrong where a softmax saturates (an
estimate of −0.025 for an exact +0.248 was seen on an induction head's query), and an order by the
estimate alone never measures such a component. Where the estimates are poor the band is wide and more is
measured; ``limit`` caps the measurements, and what could still enter is then said (``could_enter``),
never hidden. Where rounds of ``step`` would crawl — the band excludes nothing yet, or more could enter than
the limit leaves — a round measures as many as were measured before (the rounds double: ``grown`` counts
them), so a few passes over the prompts do what dozens did; where the band *cannot* exclude anything (it is
as wide as the top's smallest value: even an estimate of 0 could enter) the rest is measured at once, up to
``limit`` (``all_at_once``). Without
``estimate`` (a ranking that is not an estimate of the exact value) only rule 1 applies. The counts are the
settings' (settings.SETTLE_FIRST, …).
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
    limit: int | None = None  # at most this many measured (None: as many as the rule needs)

    def describe(self) -> str:
        by = "" if not self.signed else " (largest first)"
        cap = "" if self.limit is None else f", at most {self.limit} measured"
        return (
            f"settle: first {self.first}, then {self.step} at a time until the exact top {self.top}{by} holds and "
            f"no unmeasured estimate within the error band could enter it{cap}"
        )


def exact_top(indices: Sequence[int], values: np.ndarray, k: int, signed: bool) -> set[int]:
    """The k indices with the largest (|)exact value(|), ties kept in the order given."""
    idx = np.asarray(list(indices))
    score = -values if signed else -np.abs(values)
    return set(idx[np.argsort(score, kind="stable")][:k].tolist())


BAND_MIN = 10  # a channel's own error band once this many of its components are measured (the overall one before)
LIKE, LIKE_MIN = 2.0, 2 * BAND_MIN  # with a bracket: a band over the measured of the unmeasured's size (docstring)


@dataclass
class Band:
    """Which unmeasured components could still enter the exact top, given the error seen so far."""

    width: float  # the largest |exact − estimate| among the measured
    floor: float  # the top's smallest exact value (|value|, or value when signed)
    candidates: list[int]  # unmeasured indices that could reach it, largest |estimate| first
    widths: dict | None = None  # with channels: {channel: its band, or None while it has too few measured}
    could_enter: dict | None = None  # with channels: {channel: its candidates}


def band(
    order: list[int], n: int, exact: np.ndarray, estimate: np.ndarray, rule: SettleRule, channels=None, bracket=None
) -> Band:
    """``order[:n]`` measured (their exact values ``exact``); ``estimate`` every component's estimate;
    ``channels`` (optional, an array [components]): each channel's own band; ``bracket`` (optional, with
    channels): a second estimate of every component (the module docstring)."""
    measured = np.asarray(order[:n], dtype=int)
    err = np.abs(exact - estimate[measured])
    width = float(np.nanmax(err)) if n else np.inf
    ranked = exact if rule.signed else np.abs(exact)
    floor = float(np.sort(ranked)[::-1][min(rule.top, n) - 1]) if n >= rule.top else -np.inf
    rest = np.asarray(order[n:], dtype=int)
    size = _size(estimate, bracket if channels is not None else None, rule.signed)  # [components]
    widths = np.full(len(rest), width)
    by: dict | None = None
    if channels is not None:
        by = {str(c): None for c in dict.fromkeys(channels[np.asarray(order, dtype=int)].tolist())}
        for c in by:
            mine, left = channels[measured] == c, channels[rest] == c
            if mine.sum() >= BAND_MIN:
                own = err[mine]
                if bracket is not None:
                    own = own[_like(np.abs(estimate[measured[mine]]), size[rest[left]])]
                by[c] = float(np.nanmax(own))
                widths[left] = by[c]
    picked = rest[size[rest] + widths >= floor]
    left = None if by is None else {c: int(np.sum(channels[picked] == c)) for c in by}
    return Band(width, floor, picked.tolist(), by, left)


def _size(estimate: np.ndarray, bracket: np.ndarray | None, signed: bool) -> np.ndarray:
    """Where a component's reach starts: its estimate (|estimate|; by value when signed), or the larger of its
    two estimates with a bracket."""
    one = lambda e: e if signed else np.abs(e)  # noqa: E731
    return one(estimate) if bracket is None else np.maximum(one(estimate), one(bracket))


def _like(measured_size: np.ndarray, unmeasured_size: np.ndarray) -> np.ndarray:
    """Which measured components (|estimate| [m]) are of the unmeasured ones' size: at most LIKE times the
    largest unmeasured, and at least the LIKE_MIN smallest. A boolean mask [m]."""
    reach = float(unmeasured_size.max()) if len(unmeasured_size) else 0.0
    like = measured_size <= LIKE * reach
    if like.sum() < min(LIKE_MIN, len(measured_size)):
        like = np.zeros(len(measured_size), dtype=bool)
        like[np.argsort(measured_size, kind="stable")[:LIKE_MIN]] = True
    return like


def settle(
    order: Sequence[int],
    measure: Callable[[list[int]], None],
    exact: Callable[[list[int]], np.ndarray],
    rule: SettleRule,
    estimate: np.ndarray | None = None,
    measure_all: Callable[[list[int]], int] | None = None,
    *,
    channels: np.ndarray | None = None,
    bracket: np.ndarray | None = None,
) -> dict:
    """Measure in rounds until the exact top holds and nothing unmeasured could enter it (see the module
    docstring). Returns {"measured", "rounds", "settled", "band", "floor", "could_enter", "all_at_once", "grown"}
    and, with ``channels``, {"bands", "could_enter_by"}.

    When a round's band excludes nothing — every unmeasured component could still enter the top, as on a site
    where nothing matters and the error is as large as the top — rounds of ``step`` would measure them all
    anyway, one round after another: they are measured at once instead (``measure_all``, which returns its
    rounds; by default one call of ``measure``), up to ``limit``, and ``all_at_once`` says how many."""

    def one(idx: list[int], at_once: bool) -> int:
        if at_once and measure_all is not None:
            return measure_all(idx)
        measure(idx)
        return 1

    return drive(settle_rounds(order, exact, rule, estimate, channels, bracket), one)


def drive(rounds, measure: Callable[[list[int], bool], int]) -> dict:
    """Run one settle_rounds generator: each request measured by ``measure(indices, at_once)``, which returns
    how many rounds it took."""
    request = next(rounds)
    while True:
        try:
            request = rounds.send(measure(*request))
        except StopIteration as done:
            return done.value


def settle_jointly(rounds: dict, measure: Callable[[dict], None]) -> dict:
    """Several settle_rounds generators (one per site) advanced together: each round, every unsettled site's
    request is measured in one ``measure({site: indices})`` — one pass over the runs for all of them, a layer's
    components of every site in the same forwards — until each site's rule ends. Returns {site: its record}."""
    requests = {key: next(gen) for key, gen in rounds.items()}
    out: dict = {}
    while requests:
        measure({key: idx for key, (idx, _) in requests.items()})
        after = {}
        for key, gen in rounds.items():
            if key in requests:
                try:
                    after[key] = gen.send(1)
                except StopIteration as done:
                    out[key] = done.value
        requests = after
    return {key: out[key] for key in rounds}


def settle_rounds(order: Sequence[int], exact: Callable, rule: SettleRule, estimate=None, channels=None, bracket=None):
    """The settle rule as a generator: yields (indices to measure, at once?) and is sent the rounds that took;
    returns the record settle() returns (with ``channels``: each channel's band and what could still enter
    through it). A driver measures (drive, settle_jointly)."""
    order = [int(i) for i in order]
    cap = len(order) if rule.limit is None else min(len(order), max(rule.first, rule.limit))
    order, n = _seeded(order, rule.first, channels) if estimate is not None else (order, rule.first)
    n = min(n, cap)
    rounds, stable, at_once, grown = (yield order[:n], False), False, 0, 0
    unbanded = Band(0.0, -np.inf, [])  # without an estimate: rule 1 alone
    while True:
        values = exact(order[:n])
        b = unbanded if estimate is None else band(order, n, values, estimate, rule, channels, bracket)
        if (stable and not b.candidates) or n >= cap:
            break
        nothing_out = estimate is not None and len(b.candidates) == len(order) - n
        if nothing_out and b.width >= b.floor:  # the band cannot exclude anything: even an estimate of 0 could enter
            at_once = cap - n
            rounds += yield order[n:cap], True
            n = cap
            continue
        before = exact_top(order[:n], values, rule.top, rule.signed)
        grow = nothing_out or len(b.candidates) > cap - n
        order, nxt = _next_round(order, n, b.candidates, min(max(rule.step, n) if grow else rule.step, cap - n))
        rounds += yield nxt, grow
        n, grown = n + len(nxt), grown + len(nxt) * grow
        stable = exact_top(order[:n], exact(order[:n]), rule.top, rule.signed) == before
        if estimate is None and stable:
            break
    left = len(b.candidates) if estimate is not None else 0
    by = {} if b.widths is None else {"bands": b.widths, "could_enter_by": b.could_enter}
    return {
        "measured": n,
        "rounds": rounds,
        "settled": left == 0 and (stable or n == len(order)),
        "band": None if estimate is None else finite_or_none(b.width),
        "floor": None if estimate is None else finite_or_none(b.floor),
        "could_enter": left,
        "all_at_once": at_once,
        "grown": grown,
        **by,
    }


def _next_round(order: list[int], n: int, candidates: list[int], size: int) -> tuple[list[int], list[int]]:
    """The next ``size`` to measure — candidates first, else the order's next — moved to ``order[n:]``.

    ``size`` is ``step``, or as many as were measured before where rounds of ``step`` would crawl: the band
    excludes nothing yet (a floor that rises as more is measured may still shut some out), or more could enter
    than the limit leaves (IOI's MLP band kept 4,601 edges in: 13 rounds of 10 to the limit, 115 s CPU)."""
    nxt = (candidates or order[n:])[:size]
    taken = set(nxt)
    return order[:n] + nxt + [i for i in order[n:] if i not in taken], nxt


def _seeded(order: list[int], first: int, channels) -> tuple[list[int], int]:
    """The first round: the estimate's first ``first``, and with ``channels`` each channel's first BAND_MIN too
    (by the estimate), so that every channel has its own band after one round. Returns (the order with the
    round first, its length)."""
    if channels is None:
        return order, first
    head = order[:first]
    seen: dict = {}
    for i in head:
        seen[channels[i]] = seen.get(channels[i], 0) + 1
    for i in order[first:]:
        if seen.get(channels[i], 0) < BAND_MIN:
            seen[channels[i]] = seen.get(channels[i], 0) + 1
            head.append(i)
    taken = set(head)
    return head + [i for i in order if i not in taken], len(head)


def settle_said(info: dict, top: int, what: str, more: str) -> str:
    """One line on how an exact top was settled: ``what`` names the components, ``more`` how to measure more."""
    if info.get("band") is None:
        return f"exact top {top} {what}: {info['measured']} measured"
    head = f"exact top {top} {what}: {info['measured']} measured, estimate error band ±{info['band']:.3g}"
    if info.get("bands"):
        head += " (per channel: " + ", ".join(f"{c} ±{w:.3g}" for c, w in info["bands"].items() if w is not None) + ")"
    if info.get("all_at_once"):
        head += f" (the band could exclude nothing: the last {info['all_at_once']} measured at once, not in rounds)"
    if info.get("grown"):
        head += f" ({info['grown']} in rounds that doubled, where fixed rounds would crawl)"
    if info.get("settled"):
        return head + "; nothing unmeasured could enter it"
    by = ", ".join(f"{c} {n:,}" for c, n in (info.get("could_enter_by") or {}).items() if n)
    through = f" ({by})" if by else ""
    return head + f"; NOT settled: {info['could_enter']:,} unmeasured could still enter it{through} ({more})"


def finite_or_none(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def measure_first(
    order: Sequence[int], n: int, measure: Callable[[list[int]], None], chunk: int, group: Callable | None = None
) -> dict:
    """Measure the first ``n`` of ``order`` (every one when n = len(order)) in rounds of at least ``chunk``
    (each round is saved to the checkpoint by ``measure``).

    ``group(i)``: the forward component i is measured in (a head's layer, an edge's receiver block). All n are
    measured whatever their order, so a round holds whole groups: a round of 30 in estimate order touched ~19
    of SmolLM2's 30 layers, one forward each (171 forwards for its 270 heads instead of 30; 36 s → 19 s)."""
    order = [int(i) for i in order][:n]
    by: dict = {}
    for k, i in enumerate(order):
        by.setdefault(k if group is None else group(i), []).append(i)
    rounds, this = 0, []
    for members in by.values():  # whole groups, at least ``chunk`` components a round (the last may be short)
        this += members
        if len(this) >= chunk:
            measure(this)
            rounds, this = rounds + 1, []
    if this:
        measure(this)
        rounds += 1
    return {"measured": len(order), "rounds": max(1, rounds)}


def settle_as_asked(
    exact,
    order,
    measure,
    delta,
    rule: SettleRule,
    estimate,
    *,
    group: Callable | None = None,
    channels=None,
    bracket=None,
) -> dict:
    """The switch every settling verb makes on its ``exact`` setting: "all" or N measures the first N of
    ``order`` (rounds of whole ``group``s, measure_first), anything else ("settle") the settle rule. Returns the
    rule said, with what measure_first or settle returned."""
    if exact == "all" or isinstance(exact, int):
        n = len(order) if exact == "all" else min(int(exact), len(order))
        return {"rule": str(exact), **measure_first(order, n, measure, 3 * SETTLE_STEP, group=group)}
    at_once = lambda idx: measure_first(idx, len(idx), measure, 3 * SETTLE_STEP, group=group)["rounds"]  # noqa: E731
    info = settle(order, measure, delta, rule, estimate, at_once, channels=channels, bracket=bracket)
    per = "" if channels is None else f"; a band per channel once {BAND_MIN} of it are measured (the first round's)"
    if channels is not None and bracket is not None:
        per += ", over its measured of the unmeasured's size, each unmeasured reaching from the larger of two estimates"
    return {"rule": rule.describe() + per, **info}


def measure_exact(pool, idx, store, values: np.ndarray, say, said: tuple[str, str], picked=None) -> int:
    """Exact values of components ``idx`` for every prompt (each rank its own runs, gathered by the store's
    shard); those measured already (a resumed checkpoint, an earlier round) are skipped, the round is saved.
    ``said``: the progress line's verb and noun (("head: patching", "components")), ``picked(todo)`` what a
    run's ``measure`` takes for those indices (default: the indices). Returns how many were measured now."""
    todo = [int(i) for i in idx if not np.isfinite(values[i]).all()]
    if not todo:
        return 0
    done = int(np.isfinite(values).all(1).sum())
    say("patch", f"{said[0]} {len(todo)} more {said[1]} exactly ({done} done)", done=done, total=len(values))
    values[todo] = measure_runs(pool, todo if picked is None else picked(todo), store.shard)
    store.save()
    return len(todo)


def measure_runs(pool, chosen: list, shard) -> np.ndarray:
    """[len(chosen), N]: every run of the pool measures ``chosen`` (each rank its own prompts), gathered."""
    local = np.full((len(chosen), shard.n), np.nan)
    for i in range(len(pool)):
        r = pool.get(i)
        local[:, r.group.rows] = r.measure(chosen).numpy()  # (k, n)
        pool.done(i)
    return shard.merge(local)


__all__ = [
    "BAND_MIN",
    "Band",
    "SettleRule",
    "band",
    "exact_top",
    "measure_exact",
    "measure_first",
    "measure_runs",
    "drive",
    "settle",
    "settle_as_asked",
    "settle_jointly",
    "settle_rounds",
    "settle_said",
]
