"""circuit(): which head feeds which, and the smallest set of edges that carries your behaviour.

    result = circuit("smollm2", "ioi", metric="logit-diff", ig_steps=5)

1. every edge estimated at once (estimate.py: EAP, or EAP-IG with ``ig_steps`` > 1), per prompt;
2. the estimate's top settled by exact path patching (runs.py) under the settle rule (ground/settle.py):
   the first 20, then 10 at a time, until the exact top ``top`` holds and no unmeasured edge's estimate,
   within the measured error band, could enter it — at most ``limit`` edges; the ``edges`` asked for are
   always measured;
3. circuits of the top k edges run whole (every edge outside carries the ablated run's value, every edge
   inside the clean one) for k over MIB's fractions of all edges: the faithfulness curve
   f(k) = (M(C_k) − M(∅)) / (M(full) − M(∅)), its area (CPR) and its area away from 1 (CMD), the full set's
   and the empty set's M checked against the clean and corrupt runs, and the smallest k reaching
   ``faithfulness`` (bisected between the fractions), with its per-prompt spread.

Edges are ranked for circuits by their exact effect where measured, by the estimate elsewhere.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ...engine.jsonable import Meta, Result
from ...promptset import finite
from ...settings import CircuitSettings, verb
from ..ground.arrays import Store, pairs_key
from ..ground.budget import said as memory_said
from ..ground.pool import RUN_TOKENS, RunPool, chunk_groups
from ..ground.stats import agreement, gap, mean_ci, mean_ci_rows
from ..study import CLIP_PAIR, Study, reads_text
from .composition import weight_scores
from .estimate import chosen_over, eap
from .evaluate import Curve, zero_points_said
from .graph import Graph
from .layout import discover
from .means import GroupMeans, check_lengths
from .nodes import resolve_edges
from .qkfix import QK_BUDGET
from .runs import EdgeRun
from .settling import settle_edges, unsettled_said


@dataclass(kw_only=True)
class CircuitMeta(Meta):
    """What a circuit run says about itself (metric values in the metric's own units)."""

    metric: str
    direction: str
    n_prompts: int
    estimate: str  # "EAP" or "EAP-IG, m steps"
    ig_steps: int
    ablation: str
    m_clean: float | None
    m_clean_ci: float | None
    m_corrupt: float | None
    m_corrupt_ci: float | None
    m_clean_values: list
    m_corrupt_values: list
    exact: dict  # the settle rule and how it ended
    top: int
    senders: int
    receivers: int
    edges: int
    layers: int
    heads: int
    kv_heads: int
    streams: list[str]
    lengths: list[int]  # positions per run (of the longest stream: a speech model's encoder frames)
    prompts: list[dict]
    checks: dict  # the stream's decomposition and the restart
    ranks: int = 1
    resumed: dict | None = None
    skipped: list | None = None  # with skip_bad: the prompt rows left out, {row, reason}
    memory: dict | None = None  # with max_memory: the cap, what was resident, the batches' scale, the peak, kept

    OPTIONAL = ("skipped", "memory")
    stream_layers: dict | None = None  # blocks per stream ({"encoder": 4, "decoder": 4})


@dataclass(repr=False)
class CircuitResult(Result):
    """Every edge's estimate, the top settled exactly, and the circuit curve.

    edges      one dict per edge, most important first (exact |Δ| where measured, else |estimate|):
               sender {layer, head, kind: embed|head|mlp}, receiver {layer, head, kind: head|mlp|logits,
               channel: q|k|v|null} (an encoder–decoder's nodes also name their stream and attention);
               estimate (Δ metric, metric units) and its 95 % interval; exact (null where unmeasured), its
               interval and per-prompt values [N]; normalized ((M_patched − M_corrupt) / (M_clean −
               M_corrupt), like patch's); estimate_values [N] for the top 500 by |estimate| and every measured
    circuit    curve [{k, fraction, m, faithfulness, faithfulness_ci}], cpr, cmd, target, chosen {k,
               faithfulness, edges (indices into edges), labels, per_prompt}, checks {full, empty}
    agreement  per receiver channel (q, k, v, mlp, logits): estimate against exact (n, Spearman, R², slope)
    meta       CircuitMeta
    """

    KIND = "circuit"
    TABLE = "edges"  # its table's key before format 1 (an alias of rows until 0.3)

    SCHEMA = {
        "experiment": str,
        "verdict": {"lines": [str]},
        "summary": dict,
        "model": str,
        "rows": [{"sender": dict, "receiver": dict, "estimate": float}],
        "circuit": {"curve": [dict], "cpr": float, "cmd": float, "chosen": dict},
        "meta": {"metric": str, "direction": str, "n_prompts": int, "prompts": [dict]},
        "agreement": dict,
    }

    model: str
    meta: CircuitMeta
    edges: list[dict] = field(default_factory=list)
    circuit: dict = field(default_factory=dict)
    agreement: dict = field(default_factory=dict)

    def top(self, k: int) -> list[str]:
        """The labels of the ``k`` most important edges (the rows' order: exact |Δ| where measured, else
        |estimate|) — a circuit to give evaluate_circuit."""
        return [r["label"] for r in self.edges[: max(0, int(k))]]

    def arrays(self) -> dict[str, np.ndarray]:
        """The edge table as arrays indexed by edge (the graph's order, each row's ``edge``): estimate [E] and
        exact [E] (NaN where not measured), in the metric's units."""
        E = len(self.edges)
        out = {"estimate": np.full(E, np.nan), "exact": np.full(E, np.nan)}
        for r in self.edges:
            out["estimate"][r["edge"]] = r["estimate"]
            out["exact"][r["edge"]] = np.nan if r["exact"] is None else r["exact"]
        return out

    def payload(self) -> dict:
        m, c = self.meta, self.circuit
        lines = [
            f"{m['metric']}: clean {m['m_clean']:.3f}, corrupt {m['m_corrupt']:.3f} over {m['n_prompts']} prompts; "
            f"{m['edges']:,} edges estimated ({m['estimate']})"
        ]
        measured = [r for r in self.edges if r["exact"] is not None]
        for r in sorted(measured, key=lambda r: -abs(r["exact"]))[:3]:
            lines.append(f"{r['label']}: exact {r['exact']:+.3f} (estimate {r['estimate']:+.3f})")
        if said := unsettled_said(measured, m["exact"], self.agreement, m["ig_steps"]):
            lines.append(said)
        ch = c.get("chosen", {})
        if ch.get("k") is not None:
            lines.append(
                f"the top {ch['k']:,} edges ({ch['k'] / max(1, m['edges']):.2%}) reach faithfulness "
                f"{ch['faithfulness']:.2f} (target {c['target']:.2f}); CPR {c['cpr']:.3f}, CMD {c['cmd']:.3f}"
            )
        elif c and c.get("cpr") is None:  # M(full) = M(empty): no gap for a circuit to close
            lines.append(f"faithfulness is undefined: {c['chosen'].get('reason', 'the full and empty circuits agree')}")
        elif c:
            lines.append(f"no circuit on the curve reached faithfulness {c['target']:.2f}; CPR {c['cpr']:.3f}")
        if c and (zeros := zero_points_said(c.get("curve", []))):
            lines.append(zeros)
        if over := memory_said(m.memory):
            lines.append(over)
        return {
            "experiment": "circuit",
            "verdict": {"lines": lines},
            "summary": {"edges": m["edges"], "measured exactly": len(measured), "prompts": m["n_prompts"]},
            "model": self.model,
            "meta": self.meta.to_dict(),
            "agreement": self.agreement,
            "circuit": self.circuit,
            "edges": self.edges,
        }


@verb(CircuitSettings)
def circuit(model=None, prompts=None, *, settings: CircuitSettings | None = None, progress=None, **fields):
    """Circuit discovery; the fields are CircuitSettings' (or pass ``settings``). See the module docstring.
    Under torchrun the prompts are sharded over the ranks; every rank returns the same result."""
    s = CircuitSettings.of(settings, model, fields, prompts=prompts)
    study = Study(s, progress, "circuit discovery", kind="circuit", refuse=reads_text(CLIP_PAIR))
    study.prompts(
        check=lambda facts, groups: (_check_groups(s, study.pairs, groups), check_sizes(s.edges or (), facts))
    )
    with study:
        _check_groups(s, study.pairs, study.groups)
        study.say("stage", "finding the residual stream's writers and readers (one short forward)")
        layout = discover(study.loaded, study.groups[0].clean[:1])
        graph = Graph(layout)
        asked = resolve_edges(graph, s.edges or ())
        key = _key(study)
        return run_circuit(study, layout, graph, study.mine(), asked, key)


def _before_weights(study: Study, facts, groups) -> None:
    """What the tokenizer and config can refuse: unequal lengths under mean ablation, edges naming what is not."""
    _check_groups(study.s, study.pairs, groups)
    check_sizes(study.s.edges or (), facts)


def _check_groups(s: CircuitSettings, pairs, groups) -> None:
    if s.ablation == "mean":
        check_lengths(groups, pairs)


def check_sizes(labels, facts) -> None:
    """Layers and heads named in edge labels, checked against the model's config before the weights load."""
    import re

    from ...errors import InputError

    cfg = facts.config
    if cfg is None or facts.kind == "seq2seq":
        return
    L = int(getattr(cfg, "num_hidden_layers", 0) or 0)
    H = int(getattr(cfg, "num_attention_heads", 0) or 0)
    Hkv = int(getattr(cfg, "num_key_value_heads", 0) or H)
    for label in labels:
        for layer, unit, n in re.findall(r"L(\d+)\.(?:x?(H|KV)(\d+))?", label):
            bad = int(layer) >= L or (unit == "H" and int(n) >= H) or (unit == "KV" and int(n) >= Hkv)
            if L and bad:
                raise InputError(
                    f"edges: {label!r} names a layer or head the model lacks ({L} layers × {H} heads, {Hkv} kv heads)",
                    field="edges",
                )


def run_circuit(study: Study, layout, graph, groups, asked, key) -> CircuitResult:
    """Estimate every edge, settle the top exactly, run the top circuits whole, and describe them."""
    loaded, s, shard, say = study.loaded, study.s, study.shard, study.say
    N, E = shard.n, len(graph)
    fn = study.metric

    means = GroupMeans(layout, graph) if s.ablation == "mean" else None

    def make(g):
        return EdgeRun(loaded, layout, graph, g, fn, direction=s.direction, ablation=s.ablation, means=means)

    pool = study.pool(make, groups, _work_per_token(graph, layout))
    chunks = pool.chunks
    shapes = {"m_clean": (N,), "m_corrupt": (N,), "est": (E, N), "values.edges": (E, N)}
    if s.ig_steps > 1:  # EAP beside EAP-IG: each channel settles on the closer of the two (settling.per_channel)
        shapes["est_eap"] = (E, N)
    store = study.store("circuit", key, shapes)
    say("stage", f"{E:,} edges: recording clean and corrupt runs and estimating every edge ({_estimate_name(s)})")
    units = chunk_groups(study.mine() if groups is None else groups, RUN_TOKENS)  # the runs uncapped (qk_groups)
    checks = _first_pass(pool, s, store, say, qk_groups(pool.chunks, units))
    st = store.state
    base = st["m_corrupt" if s.direction == "denoising" else "m_clean"]
    say("stage", f"clean {np.nanmean(st['m_clean']):.3f}, corrupt {np.nanmean(st['m_corrupt']):.3f}: path patching")
    settled, est = settle_edges(pool, graph, s, store, base, asked, say)
    if means is not None:
        means.fill(pool, shard, say)
    value = _ranking_value(est, st["values.edges"], base)
    parts = {"store": store, "base": base, "value": value, "settled": settled, "checks": checks, "chunks": chunks}
    parts["est"] = est
    build = lambda: _assemble(study, layout, graph, parts)  # noqa: E731  (the result so far: issue 53.4)
    study.partial(build, ["estimate", "settle"], ["curve", "composition"], "every edge estimated, the top settled")
    say("stage", "circuits of the top edges, run whole: the faithfulness curve")
    parts["circuit"] = Curve(pool, shard, N, E, say).run(np.argsort(-np.abs(value), kind="stable"), s, st)
    result = build()  # the curve's result, said as it is before composition adds to its rows (a copy of them)
    curved = lambda: dataclasses.replace(result, edges=[dict(r) for r in result.edges])  # noqa: E731
    study.partial(curved, ["estimate", "settle", "curve"], ["composition"], "the faithfulness curve run")
    say("stage", "composition scores from the weights, beside the measured edges")
    with_composition(loaded, layout, result.edges)
    result.agreement = _agreements(result.edges, result.meta.exact, st)
    return result


def _assemble(study: Study, layout, graph: Graph, parts: dict) -> CircuitResult:
    """The result of the stages run so far (``parts``: the store, the settle record, the curve once run); the
    curve's chosen edges as indices into the rows (built once with the curve: the mapping is made in place)."""
    st = parts["store"].state
    meta = _meta(study, layout, graph, st, parts["settled"], parts["checks"], parts["chunks"])
    meta.ranks, meta.resumed, meta.skipped = study.shard.world, parts["store"].resumed, study.skipped or None
    meta.memory = study.bound.report() or None
    result = CircuitResult(study.loaded.name, meta, circuit=parts.get("circuit", {}))
    result.edges = _rows(graph, layout, st, parts)
    _index_chosen(result)
    return result


def _estimate_name(s: CircuitSettings, checks: dict | None = None, layout=None, chosen: dict | None = None) -> str:
    name = "EAP" if s.ig_steps == 1 else f"EAP-IG, {s.ig_steps} steps"
    if chosen:  # each channel on the closer of EAP and EAP-IG over its first measured edges (settling.per_channel)
        on = {k: [ch for ch, c in chosen.items() if c == k] for k in ("EAP-IG", "EAP")}
        name = "; ".join(f"{k if k == 'EAP' else name} for {', '.join(chs)}" for k, chs in on.items() if chs)
        name += " (per channel, the closer to exact on its first measured edges)"
    if checks and checks.get("qk_fix"):
        layers = ", ".join(_block_label(layout, x) for x in checks["qk_fix"])
        name += f"; q/k edges into {layers} with AtP*'s QK fix (the layers whose q, k matter most), others linear"
    elif checks and checks.get("qk_fix") == []:
        name += f"; q/k edges linear (no QK fix: prompts × tokens² over {QK_BUDGET:,})"
    return name


def _block_label(layout, layer: int) -> str:
    """A flat attention layer named as the edges name its block: E1 (an encoder's), L2 (a decoder's)."""
    b = next((b for b in layout.blocks if b.attn.layer == layer), None) if layout is not None else None
    if b is None:
        return f"L{layer}"
    return f"{'E' if b.stream == 'encoder' else 'L'}{b.index}"


def _key(study: Study) -> str | None:
    s = study.s
    if study.checkpoint is None:
        return None
    settings = [study.metric_name, s.direction, s.ig_steps, str(s.exact), s.top, s.limit, s.ablation]
    return pairs_key("circuit", s, study.pairs, study.loaded, settings)


WORK_FACTOR = 3.5  # measured: IOI's runs of 240 tokens held 1.37 GiB in their estimate, 3.25 × the formula below


def _work_per_token(graph: Graph, layout) -> int:
    """What a run's estimate holds per token while it runs, beyond the recordings kept: every receiver's gradient
    and every sender's delta (float32), and the gradient pass's activations and products — WORK_FACTOR times
    the first two (under a memory cap, runs are cut to it: study.pool)."""
    return int(WORK_FACTOR * (len(graph.receivers) + len(graph.senders)) * layout.d_model * 4)


def qk_groups(chunks: list, units: list) -> list[tuple | None]:
    """Per run: (its uncapped run's index, that run's prompts, the runs cut from it) where a memory cap cut the
    uncapped run into several, else None. The QK fix chooses its layers on the uncapped run's prompts
    (estimate.chosen_over), so a cap changes the batches, not the layers fixed nor the estimates."""
    where = {int(r): u for u, c in enumerate(units) for r in c.rows}
    of = [where[int(c.rows[0])] for c in chunks]
    pieces: dict[int, list[int]] = {}
    for j, u in enumerate(of):
        pieces.setdefault(u, []).append(j)
    return [(u, len(units[u].rows), pieces[u]) if len(pieces[u]) > 1 else None for u in of]


def _each(pool: RunPool, indices: list[int]):
    """The pool's runs at ``indices``, each let go (pool.done) once used, or when the caller stops early."""
    for j in indices:
        run = pool.get(j)
        try:
            yield run
        finally:
            pool.done(j)


def _first_pass(pool: RunPool, s: CircuitSettings, store: Store, say, groups: list | None = None) -> dict:
    """Every run once: the metric on both runs and every edge's estimate (unless the checkpoint holds them).
    ``groups``: qk_groups of the runs (None: each run chooses its QK fix's layers itself)."""
    N = store.shard.n
    need = "est" not in store.state
    m = {"m_clean": np.full(N, np.nan), "m_corrupt": np.full(N, np.nan)}
    est = None
    checks = []
    chosen: dict[int, list] = {}  # uncapped run -> the QK fix's layers, chosen over the runs cut from it
    for i in range(len(pool)):
        g = None if groups is None else groups[i]
        if need and g is not None and g[0] not in chosen:
            chosen[g[0]] = chosen_over(_each(pool, g[2]), g[1])
        r = pool.get(i)
        m["m_clean"][r.group.rows], m["m_corrupt"][r.group.rows] = r.m_clean.numpy(), r.m_corrupt.numpy()
        if need:
            est = {k: np.zeros((len(r.graph), N)) for k in _estimates(s)} if est is None else est
            for k, steps in _estimates(s).items():
                est[k][:, r.group.rows] = eap(r, steps, blocks=None if g is None else chosen[g[0]])
        checks.append({**r.checked, "restart": r.shortcut, "qk_fix": getattr(r, "qk_fixed", None)})
        pool.done(i)
        say("record", f"run {i + 1} of {len(pool)} recorded and estimated", done=i + 1, total=len(pool))
    for name, values in m.items():
        store.state.setdefault(name, store.shard.merge(values))
    fixed = [c["qk_fix"] for c in checks if c["qk_fix"] is not None]
    qk_fix = None if not fixed else sorted({layer for f in fixed for layer in f})  # the layers fixed, in any run
    if need:
        for k in _estimates(s):
            store.state[k] = store.shard.merge(est[k] if est is not None else np.zeros((0, N)))
        store.state["qk_fix"] = _qk_saved(qk_fix)  # a resumed run says what the estimating run applied
        store.save()
    else:
        qk_fix = _qk_read(store.state.get("qk_fix"))
    return {
        "stream_sums_max_rel_diff": max((c["stream_sums_max_rel_diff"] for c in checks), default=None),
        "restart": checks[0]["restart"] if checks else None,
        "qk_fix": qk_fix,
    }


def _estimates(s: CircuitSettings) -> dict[str, int]:
    """The estimates a run makes, by store key: the one asked for, and EAP beside an EAP-IG."""
    return {"est": s.ig_steps, **({"est_eap": 1} if s.ig_steps > 1 else {})}


def _qk_saved(layers: list[int] | None) -> np.ndarray:
    """The QK fix as the checkpoint keeps it: [-1] when the fix was not tried, else [0, layer, …]."""
    return np.array([-1.0]) if layers is None else np.array([0.0, *layers], dtype=float)


def _qk_read(saved: np.ndarray | None) -> list[int] | None:
    """The QK fix a checkpoint's estimates were made with (None: not tried, or a checkpoint from before)."""
    if saved is None or saved.size == 0 or saved[0] < 0:
        return None
    return [int(x) for x in saved[1:]]


def _ranking_value(est: np.ndarray, values: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Per edge: the exact Δ (mean over prompts) where measured, the estimate elsewhere."""
    measured = np.isfinite(values).all(1)
    out = est.mean(1).copy()
    out[measured] = (values[measured] - base).mean(1)
    return out


def _meta(study: Study, layout, graph, st, settled, checks, chunks) -> CircuitMeta:
    s, metric_name, record = study.s, study.metric_name, study.record
    c_mean, c_ci = mean_ci(st["m_clean"])
    x_mean, x_ci = mean_ci(st["m_corrupt"])
    return CircuitMeta(
        metric=metric_name,
        direction=s.direction,
        n_prompts=len(st["m_clean"]),
        estimate=_estimate_name(s, checks, layout, settled.get("estimates")),
        ig_steps=s.ig_steps,
        ablation=s.ablation,
        m_clean=c_mean,
        m_clean_ci=c_ci,
        m_corrupt=x_mean,
        m_corrupt_ci=x_ci,
        m_clean_values=[finite(v) for v in st["m_clean"]],
        m_corrupt_values=[finite(v) for v in st["m_corrupt"]],
        exact=settled,
        top=s.top,
        senders=len(graph.senders),
        receivers=len(graph.receivers),
        edges=len(graph),
        layers=len(layout.blocks),
        heads=layout.heads,
        kv_heads=layout.kv_heads,
        streams=layout.streams,
        stream_layers={st: len(layout.stack(st)) for st in layout.streams},
        lengths=sorted({g.length for g in chunks}),
        prompts=record,
        checks=checks,
    )


TOP_VALUES = 500  # edges whose per-prompt estimates the JSON keeps (besides every measured edge)


def _rows(graph: Graph, layout, st: dict, parts: dict) -> list[dict]:
    """One row per edge, most important first (its key "edge" is its index in the graph), its estimate the one
    its channel settled on (``parts["est"]``). Means and intervals over prompts are computed for every edge at
    once."""
    base, value, est, values = parts["base"], parts["value"], parts["est"], st["values.edges"]
    den = gap(st["m_clean"], st["m_corrupt"])
    scale = None if den is None else abs(den)
    seq2seq, G = len(layout.streams) > 1, layout.heads // max(1, layout.kv_heads)
    order = np.argsort(-np.abs(value), kind="stable")
    keep = set(np.argsort(-np.abs(est.mean(1)), kind="stable")[:TOP_VALUES].tolist())
    measured = np.isfinite(values).all(1)
    est_mean, est_ci = mean_ci_rows(est)
    delta, delta_ci = mean_ci_rows(values - base)
    norm = mean_ci_rows(values - st["m_corrupt"])[0]
    rows = []
    for e in order.tolist():
        s, r = graph.edge(e)
        m = bool(measured[e])
        rows.append(
            {
                "edge": e,
                "label": f"{s.label()}>{r.label()}",
                "sender": s.to_dict(seq2seq),
                "receiver": r.to_dict(seq2seq, G),
                "estimate": finite(est_mean[e]),
                "estimate_ci": finite(est_ci[e]),
                "exact": finite(delta[e]) if m else None,
                "exact_ci": finite(delta_ci[e]) if m else None,
                "normalized": None if not m or scale is None else finite(norm[e] / den),
                "values": [finite(v) for v in values[e] - base] if m else None,
                "estimate_values": [finite(v) for v in est[e]] if (m or e in keep) else None,
            }
        )
    return rows


def with_composition(loaded, layout, rows: list[dict]) -> None:
    """Each head → head edge of one stream's self-attention gets ``composition``: the weight-only Q-, K- or
    V-composition score of its channel (composition.py); for a kv head's k or v, the largest over the query
    heads that read it. Every other edge gets None."""
    scores, stream = weight_scores(loaded, layout)
    G = layout.heads // max(1, layout.kv_heads)
    L, H = scores["q"].shape[:2]
    # [L, H, L, H or kv heads]: a k or v receiver is a kv head, scored by the most its query heads compose
    # (fmax skips the NaN of senders at or after the receiver; one lookup per row, not a nanmax per row)
    table = {
        ch: scores[ch] if ch == "q" else np.fmax.reduce(scores[ch].reshape(L, H, L, H // G, G), axis=-1)
        for ch in scores
    }
    for row in rows:
        s, r = row["sender"], row["receiver"]
        same = s.get("stream", stream) == stream and r.get("stream", stream) == stream
        selfs = s.get("attention", "self") == r.get("attention", "self") == "self"  # a cross head's W_O is not scored
        ok = same and s["kind"] == "head" and r["kind"] == "head" and selfs
        row["composition"] = float(table[r["channel"]][s["layer"], s["head"], r["layer"], r["head"]]) if ok else None


def _agreements(rows: list[dict], settled: dict, st: dict) -> dict:
    """Estimate against exact over the measured edges, per receiver channel (q, k, v) or kind (mlp, logits),
    with the channel's own error band and what could still enter the top through it (the settle rule's); with
    EAP beside EAP-IG, each estimate's agreement too (``by_estimate``) and the one the channel settled on."""
    by: dict[str, tuple[list, list, list]] = {}
    for row in rows:
        if row["exact"] is None:
            continue
        r = row["receiver"]
        est, ex, at = by.setdefault(r["channel"] or r["kind"], ([], [], []))
        est.append(row["estimate"])
        ex.append(row["exact"])
        at.append(row["edge"])
    bands, left, chosen = settled.get("bands") or {}, settled.get("could_enter_by") or {}, settled.get("estimates")
    out = {ch: agreement(est, ex) for ch, (est, ex, _) in sorted(by.items())}
    for ch, a in out.items():
        if ch in bands:
            a.update(band=bands[ch], could_enter=left.get(ch))
        if chosen and "est_eap" in st:
            at, ex = by[ch][2], by[ch][1]
            each = {"EAP-IG": st["est"], "EAP": st["est_eap"]}
            a.update(estimate=chosen.get(ch), by_estimate={k: agreement(e[at].mean(1), ex) for k, e in each.items()})
    return out


def _index_chosen(result: CircuitResult) -> None:
    """The chosen circuit's edges as indices into result.edges (and their labels)."""
    chosen = result.circuit.get("chosen", {})
    if chosen.get("k") is None:
        return
    at = {row["edge"]: i for i, row in enumerate(result.edges)}
    chosen["edges"] = [at[e] for e in chosen["edges"]]
    chosen["labels"] = [result.edges[i]["label"] for i in chosen["edges"]]


__all__ = ["CircuitMeta", "CircuitResult", "circuit"]
