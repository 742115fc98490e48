"""path_patch(): one edge, exactly — the sender's change between the runs reaching one receiver directly.

    r = path_patch("smollm2", "induction", sender="L8.H1", receiver="L18.H6", channel="k")

On the base run (corrupt when denoising) the receiver's input becomes x + Δ_S (runs.py), its norm and
projections recomputed, everything after it run as the model runs; reported per prompt as patch reports a
component: Δ metric, its 95 % interval, normalized, and the edge's estimate (EAP or EAP-IG) beside it. A
k or v receiver named by a query head (L18.H6 with channel k) is the kv head that query head reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...engine.jsonable import Meta, Result
from ...promptset import finite
from ...settings import PathPatchSettings, verb
from ..ground.metrics import resolve
from ..ground.prompts import tokenize_pairs
from ..ground.stats import gap, mean_ci
from ..study import CLIP_PAIR, Study, reads_text
from .estimate import eap
from .graph import Graph
from .layout import discover
from .nodes import resolve_edges
from .runs import EdgeRun


@dataclass(kw_only=True)
class PathMeta(Meta):
    metric: str
    direction: str
    n_prompts: int
    estimate: str
    m_clean: float | None
    m_corrupt: float | None
    m_clean_values: list
    m_corrupt_values: list
    prompts: list[dict]
    skipped: list | None = None  # with skip_bad: the prompt rows left out, {row, reason}
    memory: dict | None = None  # with max_memory: the cap, what was resident, the batches' scale, the peak, kept

    OPTIONAL = ("skipped", "memory")


@dataclass(repr=False)
class PathPatchResult(Result):
    """One edge: sender and receiver (as circuit's edges name them), exact Δ metric per prompt (mean, 95 %
    interval, values [N]), normalized ((M_patched − M_corrupt) / (M_clean − M_corrupt)), the estimate."""

    KIND = "path_patch"

    SCHEMA = {"experiment": str, "edge": dict, "meta": {"metric": str, "n_prompts": int}}

    model: str
    meta: PathMeta
    edge: dict

    def payload(self) -> dict:
        e, m = self.edge, self.meta
        lines = [
            f"{e['label']}: exact {e['exact']:+.3f} ± {e['exact_ci'] or 0:.3f} ({m['metric']}, {m['direction']}), "
            f"estimate {e['estimate']:+.3f} ({m['estimate']})"
        ]
        return {
            "experiment": "path_patch",
            "verdict": {"lines": lines},
            "summary": {"prompts": m["n_prompts"]},
            "model": self.model,
            "meta": self.meta.to_dict(),
            "edge": self.edge,
        }


@verb(PathPatchSettings)
def path_patch(model=None, prompts=None, *, settings: PathPatchSettings | None = None, progress=None, **fields):
    """Path patching of one edge; the fields are PathPatchSettings'. See the module docstring."""
    s = PathPatchSettings.of(settings, model, fields, prompts=prompts)
    st = Study(s, progress, refuse=reads_text(CLIP_PAIR))
    st.metric_name, fn = resolve(s.metric)
    loaded, groups, st.record = _inputs(st)
    return measure_edge(st, groups, fn)


def measure_edge(st: Study, groups: list, fn) -> PathPatchResult:
    """The edge's exact Δ and estimate on ``groups`` (the study holds the model, metric name and records):
    what path_patch does once its inputs are had — prompt pairs here, two clips in read/speech."""
    s, say, loaded = st.s, st.say, st.loaded
    layout = discover(loaded, groups[0].clean[:1])
    graph = Graph(layout)
    (e,) = resolve_edges(graph, [_kv_named(s.edge, layout.heads // max(1, layout.kv_heads))])
    m = {k: np.full(len(st.record), np.nan) for k in ("clean", "corrupt", "exact", "estimate")}
    pool = st.pool(lambda g: EdgeRun(loaded, layout, graph, g, fn, direction=s.direction, ablation="corrupt"), groups)
    for i in range(len(pool)):
        r = pool.get(i)
        m["clean"][r.group.rows], m["corrupt"][r.group.rows] = r.m_clean.numpy(), r.m_corrupt.numpy()
        m["exact"][r.group.rows] = (r.measure([e])[0] - r.m_base).numpy()
        m["estimate"][r.group.rows] = eap(r, s.ig_steps)[e]
        pool.done(i)
        say("patch", f"run {i + 1} of {len(pool)}", done=i + 1, total=len(pool))
    return _result(st, layout, graph, e, m)


def _inputs(st: Study) -> tuple:
    """(the model, the prompts as groups of one length, each prompt's record), from prompt pairs checked
    before the weights load (Study.prompts); two clips are read/speech's."""
    pairs = st.prompts()
    loaded = st.load()
    groups, record = tokenize_pairs(loaded.tokenizer, loaded.kind, pairs, st.s.metric)
    for g in groups:
        loaded.fit(g.length, "prompts", f"prompt row {pairs[g.rows[0]].row}")
    return loaded, groups, record


def _kv_named(label: str, G: int) -> str:
    """'L18.H6.k' (a query head's keys) as the graph names it: 'L18.KV{6 // G}.k'."""
    import re

    return re.sub(r"\.(x?)H(\d+)\.([kv])$", lambda mt: f".{mt.group(1)}KV{int(mt.group(2)) // G}.{mt.group(3)}", label)


def _result(st: Study, layout, graph, e: int, m: dict) -> PathPatchResult:
    """The edge's exact Δ and estimate over the prompts (``m``: per prompt), and what the run was."""
    s, sender, receiver = st.s, *graph.edge(e)
    seq2seq, G = len(layout.streams) > 1, layout.heads // max(1, layout.kv_heads)
    den = gap(m["clean"], m["corrupt"])  # None: the runs agree, nothing to normalize by
    base = m["corrupt"] if s.direction == "denoising" else m["clean"]
    exact, exact_ci = mean_ci(m["exact"])
    est, est_ci = mean_ci(m["estimate"])
    edge = {
        "label": f"{sender.label()}>{receiver.label()}",
        "sender": sender.to_dict(seq2seq),
        "receiver": receiver.to_dict(seq2seq, G),
        "exact": exact,
        "exact_ci": exact_ci,
        "normalized": None if den is None else float(np.mean(m["exact"] + base - m["corrupt"])) / den,
        "values": [finite(v) for v in m["exact"]],
        "estimate": est,
        "estimate_ci": est_ci,
        "estimate_values": [finite(v) for v in m["estimate"]],
    }
    meta = PathMeta(
        metric=st.metric_name,
        direction=s.direction,
        n_prompts=len(m["clean"]),
        estimate="EAP" if s.ig_steps == 1 else f"EAP-IG, {s.ig_steps} steps",
        m_clean=float(np.mean(m["clean"])),
        m_corrupt=float(np.mean(m["corrupt"])),
        m_clean_values=[finite(v) for v in m["clean"]],
        m_corrupt_values=[finite(v) for v in m["corrupt"]],
        prompts=st.record,
        skipped=st.skipped or None,
        memory=st.bound.report() or None,
    )
    return PathPatchResult(st.loaded.name, meta, edge)


__all__ = ["PathPatchResult", "path_patch"]
