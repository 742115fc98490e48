"""Settling a circuit's edges: the settle rule (ground/settle.py) over every edge, an error band per receiving
channel, each channel on the closer of its estimates, and what an unsettled result says.

    record, est = settle_edges(pool, graph, settings, store, base, asked, say)
    line = unsettled_said(measured_rows, record, agreement, ig_steps)    # None once settled

A channel (q, k, v, mlp, logits) whose estimate is poor widens only its own edges' reach (settle.band);
with EAP beside EAP-IG (``--ig-steps m``, m > 1) each channel takes the one whose largest error over its
first measured edges is smaller (per_channel). docs/circuits.md, "Settling, and what is not settled".
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ...settings import CircuitSettings
from ..ground.arrays import Store
from ..ground.pool import RunPool
from ..ground.settle import BAND_MIN, SettleRule, measure_exact, settle_as_asked
from .graph import Graph, where_read


def unsettled_said(measured: list[dict], settle: dict, agreement: dict, ig_steps: int = 1) -> str | None:
    """When the exact top did not settle: which channel's estimate stops it — each channel whose own band still
    lets unmeasured edges in, the measured edge whose error sets that band, the channel's R² — and what would
    settle it (issue 53.3). None when it settled."""
    if settle.get("band") is None or settle.get("settled") or not measured:
        return None
    by = settle.get("could_enter_by") or {}
    blocking = [c for c, n in by.items() if n] or [None]  # None: one band over every channel
    said = []
    for ch in blocking:
        mine = [r for r in measured if ch is None or channel_of(r) == ch] or measured
        worst = max(mine, key=lambda r: abs(r["exact"] - r["estimate"]))
        width = settle["band"] if ch is None else (settle.get("bands") or {}).get(ch) or settle["band"]
        r2 = (agreement.get(channel_of(worst)) or {}).get("r2")
        n = by.get(ch, settle["could_enter"]) if ch is not None else settle["could_enter"]
        said.append(
            f"the {channel_of(worst) if ch is None else ch} estimate ({n:,} could enter; band ±{width:.3g} from "
            f"{worst['label']}, exact {worst['exact']:+.3f}, estimated {worst['estimate']:+.3f}"
            + ("" if r2 is None else f"; R² {r2:.2f}")
            + ")"
        )
    return (
        "not settled because of " + " and ".join(said) + f"; to settle, measure the {settle['could_enter']:,} "
        f"that could enter (--limit {settle['measured'] + settle['could_enter']:,}{_cost(settle)}) or estimate "
        f"more closely (--ig-steps {5 if ig_steps < 5 else 2 * ig_steps}: EAP-IG, each channel on the closer of it "
        "and EAP)"
    )


def _cost(settle: dict) -> str:
    """What measuring the edges that could enter would take, at the pace this run measured its edges."""
    per = settle.get("seconds_per_edge")
    if not per:
        return ""
    t = per * settle["could_enter"]
    return f", about {t:.0f} s at this run's pace" if t < 90 else f", about {t / 60:,.0f} min at this run's pace"


def channel_of(row: dict) -> str:
    return row["receiver"]["channel"] or row["receiver"]["kind"]


def settle_edges(pool: RunPool, graph: Graph, s: CircuitSettings, store: Store, base, asked: list[int], say) -> tuple:
    """The settle rule over the edges, a band per receiver channel, on each channel's closer estimate where
    two were made (per_channel). Returns (the record — with how long an edge took to measure here, so that an
    unsettled verdict can say what measuring the rest would cost —, the estimate per edge used [E, N])."""
    values = store.state["values.edges"]
    clock = {"seconds": 0.0, "edges": 0}

    def measure(idx):
        t = time.perf_counter()
        clock["edges"] += measure_exact(pool, idx, store, values, say, ("path patching", "edges"))
        clock["seconds"] += time.perf_counter() - t

    if asked:
        measure(asked)
    channels = graph.channels()
    delta = lambda idx: np.nanmean(values[idx] - base, 1)  # noqa: E731
    est, other, chosen, seeds = store.state["est"], None, {}, []
    if s.exact == "settle":
        est, other, chosen, seeds = per_channel(store.state, channels, measure, delta)
    order = np.argsort(-np.abs(est.mean(1)), kind="stable")
    block = lambda e: where_read(graph.receivers[graph.pairs[e][1]])  # noqa: E731  (EdgeRun.measure groups by it)
    rule = SettleRule(top=s.top, limit=s.limit)
    # the edges asked for and each channel's seeds are the rule's first round, counted toward the limit: sets fixed
    # by the settings and the estimates alone (not what a checkpoint holds), so a resumed run settles as one would
    known = list(dict.fromkeys([*asked, *seeds])) if s.exact == "settle" else []
    if known:
        taken = set(known)
        order = np.array(known + [int(e) for e in order if int(e) not in taken])
        rule = dataclasses.replace(rule, first=max(rule.first, len(known)))
    bracket = None if other is None else other.mean(1)  # each edge's other estimate (settle.band)
    info = settle_as_asked(
        s.exact, order, measure, delta, rule, est.mean(1), group=block, channels=channels, bracket=bracket
    )
    if chosen:
        info["estimates"] = chosen
    if clock["edges"]:
        info["seconds_per_edge"] = clock["seconds"] / clock["edges"]  # this machine, these prompts
    return info, est


def per_channel(st: dict, channels: np.ndarray, measure, delta) -> tuple:
    """With EAP beside EAP-IG (issue 53.3: a channel whose estimate disagrees with exact switches to a better
    one): each channel's first BAND_MIN edges by either estimate are measured, and the channel takes the
    estimate whose largest error on them is smaller — its band (EAP-IG where they tie: the one asked for).
    Returns (the estimate per edge [E, N], the other one [E, N] — the settle rule's bracket —, {channel: "EAP" |
    "EAP-IG"}, the edges measured); without two estimates, ("est", None, {}, [])."""
    if "est_eap" not in st:
        return st["est"], None, {}, []
    ig, ap = st["est"], st["est_eap"]
    names = list(dict.fromkeys(channels.tolist()))
    seeds = []
    for ch in names:
        mine = np.flatnonzero(channels == ch)
        for e in (ig, ap):
            seeds += mine[np.argsort(-np.abs(e[mine].mean(1)), kind="stable")[:BAND_MIN]].tolist()
    seeds = list(dict.fromkeys(seeds))
    measure(seeds)
    exact = delta(seeds)
    chosen, out, other = {}, ig.copy(), ap.copy()
    for ch in names:
        at = [i for i, e in enumerate(seeds) if channels[e] == ch]
        idx = [seeds[i] for i in at]
        err = {k: float(np.max(np.abs(exact[at] - e[idx].mean(1)))) for k, e in (("EAP-IG", ig), ("EAP", ap))}
        chosen[ch] = "EAP" if err["EAP"] < err["EAP-IG"] else "EAP-IG"
        if chosen[ch] == "EAP":
            out[channels == ch], other[channels == ch] = ap[channels == ch], ig[channels == ch]
    return out, other, chosen, seeds


__all__ = ["channel_of", "per_channel", "settle_edges", "unsettled_said"]
