"""Evaluating a circuit: the metric with only a set of edges carrying the clean run (the rest ablated), over
every prompt, beside the full and the empty set — whose values must be the clean and the corrupt run's (the
checks, said in every result). Two users: circuit()'s faithfulness curve over the estimate's top k edges
(Curve), and evaluate_circuit() on any edge set you choose (ACDC's, one drawn by hand, one edited after
circuit()).

    faithfulness(C) = (M(C) − M(∅)) / (M(full) − M(∅)),  a ratio of means over prompts

undefined (None, with the reason said) when M(full) and M(∅) agree: no gap for a circuit to close.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...engine.jsonable import Meta, Result
from ...errors import InputError
from ...promptset import finite
from ...settings import CircuitSettings, EvaluateSettings, verb
from ..ground.group import Shard
from ..ground.pool import RunPool
from ..ground.stats import gap, mean_ci
from ..study import Study, reads_text
from .graph import Graph
from .layout import discover
from .means import GroupMeans, check_lengths
from .nodes import resolve_edges
from .runs import EdgeRun

FRACTIONS = (0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)  # MIB's circuit sizes


def top_mask(E: int, order: np.ndarray, k: int) -> np.ndarray:
    """bool [E]: the first ``k`` edges of ``order`` in the circuit."""
    mask = np.zeros(E, dtype=bool)
    mask[order[:k]] = True
    return mask


def run_circuits(pool: RunPool, shard: Shard, masks: list[np.ndarray], N: int) -> np.ndarray:
    """[len(masks), N]: the metric per prompt with each mask's edges carrying the clean run, over every run of
    the pool (each rank its own prompts, gathered)."""
    local = np.full((len(masks), N), np.nan)
    for i in range(len(pool)):
        r = pool.get(i)
        local[:, r.group.rows] = r.circuits(masks).numpy()
        pool.done(i)
    return shard.merge(local)


def faithfulness(m: np.ndarray, full: np.ndarray, empty: np.ndarray) -> tuple[float | None, float | None]:
    """(faithfulness, its 95 % interval) of a circuit whose metric per prompt is ``m``; (None, None) with no gap."""
    den = gap(full, empty)  # within rounding: no gap for a circuit to close (ground/stats.gap)
    if den is None:
        return None, None
    mean, ci = mean_ci(m - empty)
    return mean / den, None if ci is None else ci / abs(den)


def spread(m: np.ndarray, full: np.ndarray, empty: np.ndarray) -> dict:
    """A circuit's faithfulness prompt by prompt (where the prompt's own clean/corrupt gap is not 0)."""
    den = full - empty
    ok = np.abs(den) > 1e-6 * max(1e-12, float(np.abs(den).max()))
    f = (m[ok] - empty[ok]) / den[ok]
    if not len(f):
        return {"n": 0}
    q = np.quantile(f, [0.0, 0.25, 0.5, 0.75, 1.0])
    return {
        "n": int(len(f)),
        "min": float(q[0]),
        "q25": float(q[1]),
        "median": float(q[2]),
        "q75": float(q[3]),
        "max": float(q[4]),
        "below_0": float(np.mean(f < 0)),
        "above_1": float(np.mean(f > 1)),
        "values": [finite(v) for v in f],
    }


def checks(full: np.ndarray, empty: np.ndarray, st: dict, ablation: str) -> dict:
    """The full set against the clean run, the empty set against the corrupt run (corrupt ablation)."""
    out_full = {
        "m": float(np.mean(full)),
        "clean": float(np.mean(st["m_clean"])),
        "max_abs_diff": float(np.max(np.abs(full - st["m_clean"]))),
    }
    out_empty = {"m": float(np.mean(empty))}
    if ablation == "corrupt":
        out_empty.update(
            corrupt=float(np.mean(st["m_corrupt"])), max_abs_diff=float(np.max(np.abs(empty - st["m_corrupt"])))
        )
    else:
        out_empty["note"] = "mean ablation: the empty circuit is the model with every write at its mean over prompts"
    return {"full": out_full, "empty": out_empty}


class Curve:
    """Circuits of the top k edges run whole, over every prompt: the curve, its areas, the smallest circuit."""

    BISECT = 6  # at most this many more circuits to narrow the smallest one reaching the target (its bracket said)

    def __init__(self, pool: RunPool, shard: Shard, N: int, E: int, say):
        self.pool, self.shard, self.N, self.E, self.say = pool, shard, N, E, say
        self.M: dict[int, np.ndarray] = {}  # k -> M per prompt [N]

    def measure(self, ks: list[int], order: np.ndarray) -> None:
        todo = [k for k in dict.fromkeys(ks) if k not in self.M]
        if not todo:
            return
        masks = [top_mask(self.E, order, k) for k in todo]
        merged = run_circuits(self.pool, self.shard, masks, self.N)
        for k, row in zip(todo, merged, strict=True):
            self.M[k] = row
        self.say("circuit", f"{len(self.M)} circuits run", done=len(self.M), total=len(FRACTIONS) + self.BISECT)

    def faithfulness(self, k: int) -> tuple[float | None, float | None]:
        return faithfulness(self.M[k], self.M[self.E], self.M[0])

    def run(self, order: np.ndarray, s: CircuitSettings, st: dict) -> dict:
        ks = sorted({int(round(f * self.E)) for f in FRACTIONS})
        self.measure(ks, order)
        curve = []
        for k in ks:
            f, ci = self.faithfulness(k)
            curve.append(
                {
                    "k": k,
                    "fraction": k / self.E,
                    "m": float(np.mean(self.M[k])),
                    "faithfulness": f,
                    "faithfulness_ci": ci,
                }
            )
        x = np.array([c["fraction"] for c in curve])
        y = np.array([np.nan if c["faithfulness"] is None else c["faithfulness"] for c in curve])
        chosen = self._smallest(ks, order, s.faithfulness)
        return {
            "curve": curve,
            "cpr": finite(float(np.trapezoid(y, x))),
            "cmd": finite(float(np.trapezoid(np.abs(1 - y), x))),
            "target": s.faithfulness,
            "ablation": s.ablation,
            "ranking": "exact Δ where measured, else the estimate, by magnitude",
            "chosen": chosen,
            "checks": checks(self.M[self.E], self.M[0], st, s.ablation),
        }

    def _smallest(self, ks: list[int], order: np.ndarray, target: float) -> dict:
        f = {k: self.faithfulness(k)[0] for k in ks}
        if f[self.E] is None:
            m = float(np.mean(self.M[self.E]))
            return {
                "k": None,
                "reason": f"the full and the empty circuit give the same metric ({m:.4g}): no gap to close",
            }
        hit = next((i for i, k in enumerate(ks) if f[k] is not None and f[k] >= target), None)
        if hit is None:
            return {"k": None, "reason": f"no circuit on the curve reached faithfulness {target}"}
        lo, hi = (ks[hit - 1], ks[hit]) if hit else (0, ks[0])
        for _ in range(self.BISECT):
            if hi - lo <= 1:
                break
            mid = (lo + hi) // 2
            self.measure([mid], order)
            fm = self.faithfulness(mid)[0]
            lo, hi = (lo, mid) if fm is not None and fm >= target else (mid, hi)
        fk, ci = self.faithfulness(hi)
        return {
            "k": hi,
            "faithfulness": fk,
            "faithfulness_ci": ci,
            "exact_k": hi - lo <= 1,  # False: the bisection stopped with a bracket [lo, hi]
            "bracket": [lo, hi],
            "edges": [int(e) for e in order[:hi]],
            "per_prompt": spread(self.M[hi], self.M[self.E], self.M[0]),
        }


def zero_points_said(curve: list[dict]) -> str | None:
    """The verdict's word on curve points whose faithfulness is exactly 0 with edges in the circuit: those
    edges form no path from the embeddings to the logits yet, so every write they carry is the corrupt run's
    and the circuit's output is the corrupt output (not a measurement that happens to land on 0)."""
    zeros = [p["k"] for p in curve if p["k"] > 0 and p.get("faithfulness") == 0.0]
    if not zeros:
        return None
    ks = ", ".join(f"{k:,}" for k in zeros[:5]) + (" …" if len(zeros) > 5 else "")
    return (
        f"faithfulness is exactly 0 at k = {ks}: those edges form no path from the embeddings to the logits yet "
        "(the strongest edges are not yet connected to the input), so the circuit runs as the corrupt run"
    )


@dataclass(kw_only=True)
class EvaluationMeta(Meta):
    """What an evaluation says about itself: the metric (in its own units), the prompts, the graph's size."""

    metric: str
    direction: str
    ablation: str
    n_prompts: int
    edges: int  # edges in the model's graph
    m_clean: float | None
    m_corrupt: float | None
    prompts: list = field(default_factory=list)
    skipped: list | None = None  # with skip_bad: the prompt rows left out, {row, reason}
    memory: dict | None = None  # with max_memory: the cap, what was resident, the batches' scale, the peak, kept

    OPTIONAL = ("skipped", "memory")


@dataclass(repr=False)
class CircuitEvaluation(Result):
    """The faithfulness of one edge set (see the module docstring).

    circuit   {edges: the labels evaluated, k, faithfulness, faithfulness_ci (null, with reason, when there
              is no gap), m / m_full / m_empty (means of the metric), values / full_values / empty_values
              [N] per prompt, per_prompt (faithfulness's spread), checks {full, empty}}
    meta      EvaluationMeta
    """

    KIND = "evaluate_circuit"

    ROWS = "circuit"
    SCHEMA = {
        "experiment": str,
        "verdict": {"lines": [str]},
        "model": str,
        "circuit": {"edges": [str], "k": int, "checks": dict},
        "meta": {"metric": str, "n_prompts": int},
    }

    model: str
    meta: EvaluationMeta
    circuit: dict = field(default_factory=dict)

    def payload(self) -> dict:
        c, m = self.circuit, self.meta
        if c["faithfulness"] is None:
            said = f"faithfulness is undefined: {c['reason']}"
        else:
            ci = c["faithfulness_ci"]
            said = f"faithfulness {c['faithfulness']:.3f}" + ("" if ci is None else f" ± {ci:.3f}")
        lines = [f"{c['k']:,} of {m['edges']:,} edges ({m['metric']}, {m['ablation']} ablation): {said}"]
        return {
            "experiment": "evaluate_circuit",
            "verdict": {"lines": lines},
            "model": self.model,
            "meta": self.meta.to_dict(),
            "circuit": self.circuit,
        }


@verb(EvaluateSettings)
def evaluate_circuit(
    model=None, prompts=None, edges=None, *, settings: EvaluateSettings | None = None, progress=None, **fields
) -> CircuitEvaluation:
    """The faithfulness of the circuit ``edges`` on the prompt pairs, with circuit()'s checks; the fields are
    EvaluateSettings'. ``edges``: SENDER>RECEIVER labels, or a CircuitResult (its chosen circuit); a result's
    other circuits are ``result.top(k)``, its k first edges."""
    if hasattr(edges, "circuit") and hasattr(edges, "top"):  # a CircuitResult: the circuit it chose
        chosen = edges.circuit.get("chosen", {})
        if chosen.get("k") is None:
            raise InputError(
                f"edges: the circuit result chose no circuit ({chosen.get('reason')}); give edges", field="edges"
            )
        edges = chosen["labels"]
    s = EvaluateSettings.of(settings, model, fields, prompts=prompts, edges=edges)
    between_clips = "a speech model's circuits are read between two clips (circuit with `audio_clean`)"
    st = Study(s, progress, refuse=reads_text(between_clips))
    st.prompts(check=lambda facts, groups: check_lengths(groups, st.pairs) if s.ablation == "mean" else None)
    with st:
        if s.ablation == "mean":
            check_lengths(st.groups, st.pairs)
        layout = discover(st.loaded, st.groups[0].clean[:1])
        graph = Graph(layout)
        chosen = resolve_edges(graph, s.edges)
        return _evaluate(st, layout, graph, chosen)


def _evaluate(st: Study, layout, graph: Graph, chosen: list[int]) -> CircuitEvaluation:
    s, N, E = st.s, st.shard.n, len(graph)
    means = GroupMeans(layout, graph) if s.ablation == "mean" else None

    def make(g):
        return EdgeRun(st.loaded, layout, graph, g, st.metric, direction=s.direction, ablation=s.ablation, means=means)

    pool = st.pool(make)
    if means is not None:
        means.fill(pool, st.shard, st.say)
    ends = {"m_clean": np.full(N, np.nan), "m_corrupt": np.full(N, np.nan)}
    for i in range(len(pool)):
        r = pool.get(i)
        ends["m_clean"][r.group.rows], ends["m_corrupt"][r.group.rows] = r.m_clean.numpy(), r.m_corrupt.numpy()
        pool.done(i)  # kept only within the pool's memory budget
    ends = {k: st.shard.merge(v) for k, v in ends.items()}
    st.say("circuit", f"the circuit of {len(chosen):,} edges, the full and the empty one, run whole")
    circuit = np.zeros(E, dtype=bool)
    circuit[chosen] = True
    m, full, empty = run_circuits(pool, st.shard, [circuit, np.ones(E, dtype=bool), np.zeros(E, dtype=bool)], N)
    f, ci = faithfulness(m, full, empty)
    out = {"edges": list(s.edges), "k": len(chosen), "faithfulness": f, "faithfulness_ci": ci}
    if f is None:
        out["reason"] = f"the full and the empty circuit give the same metric ({float(np.mean(full)):.4g}): no gap"
    out.update(m=float(np.mean(m)), m_full=float(np.mean(full)), m_empty=float(np.mean(empty)))
    out.update(values=[finite(v) for v in m], full_values=[finite(v) for v in full])
    out.update(empty_values=[finite(v) for v in empty], per_prompt=spread(m, full, empty))
    out["checks"] = checks(full, empty, ends, s.ablation)
    meta = EvaluationMeta(
        metric=st.metric_name,
        direction=s.direction,
        ablation=s.ablation,
        n_prompts=N,
        edges=E,
        m_clean=finite(float(np.mean(ends["m_clean"]))),
        m_corrupt=finite(float(np.mean(ends["m_corrupt"]))),
        prompts=st.record,
        skipped=st.skipped or None,
        memory=st.bound.report() or None,
    )
    return CircuitEvaluation(st.loaded.name, meta, out)


__all__ = [
    "zero_points_said",
    "FRACTIONS",
    "CircuitEvaluation",
    "Curve",
    "EvaluationMeta",
    "checks",
    "evaluate_circuit",
    "faithfulness",
    "run_circuits",
    "spread",
    "top_mask",
]
