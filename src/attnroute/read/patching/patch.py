"""Activation patching with your metric: which heads (and which side of their routes) carry the difference.

    result = patch("smollm2", "ioi.jsonl", metric="logit-diff", sites=("head", "q", "k", "v"))

For every component (sites.py) the attribution estimate comes first — one forward and one backward on
the base run per group of prompts — and exact patching then settles the top of its ranking per site:
the first 20 components by |estimate|, then 10 more at a time until the exact top ``top`` stops
changing (``exact="all"`` measures every component, an integer N the top N). Reported per component:

    delta       M_patched − M_base per prompt: mean, 95 % interval, and the per-prompt values
    normalized  (M_patched − M_corrupt) / (M_clean − M_corrupt), a ratio of means over prompts
                (1 = the clean behaviour restored by denoising; 0 = removed by noising), its interval
                the delta's interval over |M_clean − M_corrupt|
    estimate    the linear estimate of delta, and normalized the same way

and per site the estimate's agreement with exact patching (Spearman ρ, R², slope).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ...engine.jsonable import Meta, Result
from ...errors import InputError
from ...promptset import finite
from ...settings import SETTLE_STEP, PatchSettings, verb
from ..ground.arrays import Store, pairs_key
from ..ground.budget import said as memory_said
from ..ground.group import Shard
from ..ground.pool import RunPool
from ..ground.prompts import pair_positions
from ..ground.settle import (
    SettleRule,
    measure_exact,
    measure_runs,
    settle_as_asked,
    settle_jointly,
    settle_rounds,
)
from ..ground.stats import agreement, gap, mean_ci
from ..ground.wire import gather
from ..study import CLIP_PAIR, Study, reads_text
from .runs import PairRun
from .sites import Component, components, pick


@dataclass(kw_only=True)
class PatchMeta(Meta):
    """What a patching run says about itself: the JSON's ``meta``. Metric values are in the metric's own
    units (logit-diff: logits; prob: probability; logprob, loss, kl: nats; cosine: cosine)."""

    metric: str
    direction: str  # denoising or noising
    sites: list[str]
    n_prompts: int
    m_clean: float | None  # mean over prompts, and its 95 % interval
    m_clean_ci: float | None
    m_corrupt: float | None
    m_corrupt_ci: float | None
    m_clean_values: list  # [N] per prompt (null: not finite)
    m_corrupt_values: list  # [N]
    normalized_defined: bool  # M_clean and M_corrupt differ: the normalized score means something
    positions: dict  # what `positions` resolved to
    lengths: list[int]  # the prompts' token counts (one group per length)
    prompts: list[dict]  # each prompt as tokens
    exact: dict  # per site: the settle rule, how many were measured, in how many rounds
    shortcut: list[dict]  # per group: the layer-restart check
    layers: int
    heads: int
    kv_heads: int
    attention_kinds: list[str]
    top: int = 10  # the exact top the settle rule holds per site
    ranks: int = 1
    resumed: dict | None = None  # the checkpoint resumed from, and how many components it held
    skipped: list | None = None  # with skip_bad: the prompt rows left out, {row, reason}
    memory: dict | None = None  # with max_memory: the cap, what was resident, the batches' scale, the peak, kept

    OPTIONAL = ("skipped", "memory")


@dataclass(repr=False)
class PatchResult(Result):
    """Activation patching of every component of the asked sites.

    rows       one dict per component (layer, head, site, position): delta (M_patched − M_base, metric
               units) with its 95 % interval and per-prompt values [N], normalized ((M_patched − M_corrupt) /
               (M_clean − M_corrupt): 1 = the clean behaviour), the estimate likewise; ``exact`` false where
               only estimated; k and v rows name the query heads that share the kv head
    agreement  per site: the estimate against exact patching (n, Spearman, R², slope)
    grid       per site: normalized [L, units] (positions all) or [L, units, T] (per position), NaN where
               only estimated; units are query heads (head, q), kv heads (k, v), or 1 (layer)
    direct     logit-diff only: each head's direct effect on the clean and corrupt runs (logits), per prompt
    meta       PatchMeta
    """

    KIND = "patch"

    SCHEMA = {
        "experiment": str,
        "verdict": {"lines": [str]},
        "summary": dict,
        "model": str,
        "rows": [{"layer": int, "site": str, "estimate": float}],
        "meta": {"metric": str, "direction": str, "n_prompts": int, "prompts": [dict]},
        "agreement": dict,
    }

    model: str
    meta: PatchMeta
    rows: list[dict] = field(default_factory=list)
    agreement: dict = field(default_factory=dict)
    grid: dict = field(default_factory=dict)
    direct: dict = field(default_factory=dict)

    def payload(self) -> dict:
        exact = [r for r in self.rows if r["exact"] is not None and r["normalized"] is not None]
        best = sorted(exact, key=lambda r: -abs(r["normalized"]))[:3]
        m = self.meta
        lines = [
            f"{m['metric']}: clean {m['m_clean']:.3f}, corrupt {m['m_corrupt']:.3f} over {m['n_prompts']} "
            f"prompts ({m['direction']})"
        ]
        ci = lambda r: "" if r["normalized_ci"] is None else f" ± {r['normalized_ci']:.3f}"  # noqa: E731
        lines += [f"{_label(r)}: normalized {r['normalized']:+.3f}{ci(r)}" for r in best]
        if over := memory_said(m.memory):
            lines.append(over)
        return {
            "experiment": "patch",
            "verdict": {"lines": lines},
            "summary": {"components": len(self.rows), "measured exactly": len(exact), "prompts": m["n_prompts"]},
            "model": self.model,
            "meta": self.meta.to_dict(),
            "agreement": self.agreement,
            "rows": self.rows,
            "direct": self.direct or {"reason": "direct effects are given for the logit-diff metric"},
        }

    @classmethod
    def from_dict(cls, data: dict) -> PatchResult:
        """The result back from its JSON: ``direct`` empty where the JSON gives its reason, the grids rebuilt
        from the rows (they are not written)."""
        out = super().from_dict(data)
        out.direct = {} if set(out.direct) == {"reason"} else out.direct
        out.grid = {site: grid_of(out.meta, site, out.rows) for site in out.meta.sites}
        return out


def _label(r: dict) -> str:
    unit = "" if r["head"] is None else (f" kv head {r['head']}" if r["site"] in ("k", "v") else f" head {r['head']}")
    where = "" if r["position"] is None else f" @ {r['position']}"
    return f"L{r['layer']}{unit} {r['site']}{where}"


@verb(PatchSettings)
def patch(model=None, prompts=None, *, settings: PatchSettings | None = None, progress=None, **fields) -> PatchResult:
    """Activation patching; the fields are PatchSettings' (or pass ``settings``). See the module docstring.
    Under torchrun the prompts are sharded over the ranks (ground/arrays.py); every rank returns the same result."""
    s = PatchSettings.of(settings, model, fields, prompts=prompts)
    st = Study(s, progress, "patching", kind="patch", refuse=reads_text(CLIP_PAIR))
    st.prompts(check=lambda facts, groups: refuse_unsupported(facts.kind, _positions(st, facts, groups)[0]))
    with st:
        mode, positions, resolved = _positions(st, st.loaded, st.groups)
        refuse_unsupported(st.loaded.kind, mode)
        return _run(st, positions, resolved)


def _positions(st: Study, model, groups) -> tuple:
    """(mode, positions, resolved) of the settings' positions on ``model``'s tokenizer (its facts, or itself)."""
    return pair_positions(model.tokenizer, model.kind, st.s.positions, st.pairs, groups)


def _run(st: Study, positions, resolved) -> PatchResult:
    loaded, s, pairs, shard, say = st.loaded, st.s, st.pairs, st.shard, st.say
    N, metric_name = len(pairs), st.metric_name
    pool = st.pool(lambda g: PairRun(loaded, g, st.metric, s.direction))
    chunks = pool.chunks
    comps = {site: components(site, loaded.n_layers, loaded.n_heads, loaded.n_kv_heads, positions) for site in s.sites}
    store = st.store("patch", _key(st, loaded, metric_name), _shapes(comps, len(pairs)))
    say(
        "stage",
        f"recording clean and corrupt runs of {len(shard.rows)} prompts in {len(chunks)} runs, and the "
        "attribution estimate (one forward and one backward per run)",
    )
    first = _first_pass(pool, s, comps, store, metric_name == "logit-diff", say)
    m_clean, m_corrupt = store.state["m_clean"], store.state["m_corrupt"]
    say(
        "stage",
        f"clean {np.nanmean(m_clean):.3f}, corrupt {np.nanmean(m_corrupt):.3f} ({metric_name}); "
        "exact patching of the estimate's top, settled",
    )
    direct = _direct(first["direct"], chunks, N, loaded, shard) if metric_name == "logit-diff" else {}
    parts = {"resolved": resolved, "chunks": chunks, "shortcut": first["shortcut"], "direct": direct, "store": store}
    settle = _settle_sites(st, pool, comps, parts)
    return _assemble(st, comps, list(s.sites), settle, parts)


def _settle_sites(st: Study, pool: RunPool, comps: dict, parts: dict) -> dict:
    """Every site's exact patching, each said as the result so far once measured (53.4). Under the settle rule
    the sites settle jointly (53.3): a round measures every unsettled site's next components in one pass over
    the runs. "all" or N: site by site, in rounds of whole layers."""
    s, store = st.s, parts["store"]
    if s.exact == "settle":
        return _settle_jointly(st, pool, comps, parts)
    settle: dict = {}
    for k, site in enumerate(s.sites):
        settle[site] = _settle(pool, comps[site], store, site, s, st.say)
        if pending := list(s.sites[k + 1 :]):
            build = lambda: _assemble(st, comps, list(settle), settle, parts)  # noqa: E731
            st.partial(build, list(settle), pending, f"{site} measured; {', '.join(pending)} pending")
    return settle


def _settle_jointly(st: Study, pool: RunPool, comps: dict, parts: dict) -> dict:
    """The settle rule on every site at once (ground/settle.settle_jointly): each site keeps its own order, band
    and top; their requests of a round share the forwards (a layer's components of every site together)."""
    s, store = st.s, parts["store"]
    rule = SettleRule(top=s.top)
    base = store.state["m_corrupt" if s.direction == "denoising" else "m_clean"]
    values = {site: store.state[f"values.{site}"] for site in s.sites}
    rounds = {}
    for site in s.sites:
        est = store.state[f"est.{site}"].mean(1)
        delta = lambda idx, v=values[site]: np.nanmean(v[idx] - base, 1)  # noqa: E731  (what the estimate estimates)
        rounds[site] = settle_rounds(np.argsort(-np.abs(est), kind="stable"), delta, rule, est)
    settle: dict = {}

    def measure(requests: dict) -> None:  # a large round (a band that excludes nothing) in pieces of whole layers
        running, done = list(requests), [x for x in s.sites if x not in requests]
        for piece in _by_layers(requests, comps):
            _measure_sites(pool, piece, comps, store, values, st.say)  # each piece saved to the checkpoint
            build = lambda: _assemble(st, comps, s.sites, settle, parts)  # noqa: E731
            st.partial(build, done, [], f"a settle round of {', '.join(running)} measured", running=running)

    said = rule.describe() + "; the sites settled jointly (a round measures every unsettled site's next components)"
    for site, info in settle_jointly(rounds, measure).items():
        settle[site] = {"rule": said, **info}
    return settle


def _by_layers(requests: dict, comps: dict, at_least: int = 3 * SETTLE_STEP) -> list[dict]:
    """A round's requests ({site: indices}) in pieces of whole layers, each of at least ``at_least``
    components (the last may be short): what a Ctrl-C loses is one piece, and a layer is one forward."""
    layers: dict[int, dict] = {}
    for site, idx in requests.items():
        for i in idx:
            layers.setdefault(comps[site][i].layer, {}).setdefault(site, []).append(int(i))
    pieces, this = [], {}
    for layer in sorted(layers):
        for site, idx in layers[layer].items():
            this.setdefault(site, []).extend(idx)
        if sum(map(len, this.values())) >= at_least:
            pieces, this = [*pieces, this], {}
    return [*pieces, this] if this else pieces


def _measure_sites(pool: RunPool, requests: dict, comps: dict, store: Store, values: dict, say) -> None:
    """Exact values of every site's requested components, in one pass over the runs (PairRun.measure groups
    them by layer); those measured already are skipped; the round is saved to the checkpoint."""
    todo = [(site, int(i)) for site, idx in requests.items() for i in idx if not np.isfinite(values[site][i]).all()]
    if not todo:
        return
    done = sum(int(np.isfinite(v).all(1).sum()) for v in values.values())
    total = sum(len(v) for v in values.values())
    say("patch", f"patching {len(todo)} more components exactly ({done} done)", done=done, total=total)
    merged = measure_runs(pool, [comps[site][i] for site, i in todo], store.shard)
    for row, (site, i) in zip(merged, todo, strict=True):
        values[site][i] = row
    store.save()


def _assemble(st: Study, comps: dict, sites: list[str], settle: dict, parts: dict) -> PatchResult:
    """The result of the ``sites`` measured so far: every one when the verb ends, fewer in a partial result."""
    loaded, s, store = st.loaded, st.s, parts["store"]
    m_clean, m_corrupt = store.state["m_clean"], store.state["m_corrupt"]
    den = gap(m_clean, m_corrupt, loaded.dtype)  # None: the runs agree, nothing to normalize by
    meta = _meta(st, parts["resolved"], m_clean, m_corrupt, parts["chunks"], parts["shortcut"], dict(settle))
    meta.ranks, meta.resumed, meta.top, meta.skipped = st.shard.world, store.resumed, s.top, st.skipped or None
    meta.memory = st.bound.report() or None
    meta.sites = list(sites)
    result = PatchResult(loaded.name, meta, direct=parts["direct"])
    m_base = m_corrupt if s.direction == "denoising" else m_clean
    for site in sites:
        est, values = store.state[f"est.{site}"], store.state[f"values.{site}"]
        rows = [_row(loaded, c, est[i], values[i], m_base, m_corrupt, den) for i, c in enumerate(comps[site])]
        result.rows += rows
        result.agreement[site] = agreement([r["estimate"] for r in rows], [r["delta"] for r in rows])
        result.grid[site] = grid_of(result.meta, site, rows)
    return result


def _key(st: Study, loaded, metric_name: str) -> str | None:
    s, pairs = st.s, st.pairs
    if st.checkpoint is None:
        return None
    settings = [metric_name, s.direction, list(s.sites), s.positions, str(s.exact), s.top]
    return pairs_key("patch", s, pairs, loaded, settings)


def _shapes(comps: dict, N: int) -> dict[str, tuple]:
    shapes = {"m_clean": (N,), "m_corrupt": (N,)}
    for site, cs in comps.items():
        shapes[f"values.{site}"] = shapes[f"est.{site}"] = (len(cs), N)
    return shapes


def _first_pass(pool: RunPool, s: PatchSettings, comps: dict, store: Store, direct: bool, say) -> dict:
    """Every run once: the metric on its clean and corrupt prompts, the estimate of every component (unless
    a checkpoint holds them), its direct effects (logit-diff) and its restart check."""
    N = store.shard.n
    need_est = store.resumed is None or not all(f"est.{site}" in store.state for site in s.sites)
    m = {"m_clean": np.full(N, np.nan), "m_corrupt": np.full(N, np.nan)}
    est = {site: np.zeros((len(cs), N)) for site, cs in comps.items()}
    parts, shortcut = [], []
    for i in range(len(pool)):
        r = pool.get(i)
        m["m_clean"][r.group.rows], m["m_corrupt"][r.group.rows] = r.m_clean.numpy(), r.m_corrupt.numpy()
        if need_est:
            grid = r.gradients(s.sites, per_position=any(c.position is not None for c in comps.get("k", [])))
            for site, cs in comps.items():
                for j, c in enumerate(cs):
                    est[site][j, r.group.rows] = _estimate(grid, c).float().numpy()
        parts.append(r.direct() if direct else None)
        shortcut.append(r.shortcut)
        pool.done(i)
        say("record", f"run {i + 1} of {len(pool)} recorded", done=i + 1, total=len(pool))
    for name, values in m.items():
        store.state.setdefault(name, store.shard.merge(values))
    if need_est:
        for site in comps:
            store.state[f"est.{site}"] = store.shard.merge(est[site])  # (C, N)
        store.save()
    return {"direct": parts, "shortcut": shortcut}


def _estimate(grid: dict, c: Component) -> torch.Tensor:
    """One component's estimate per prompt [n]; a whole key from its own recomputation (qkfix.py)."""
    if c.site == "k" and c.position is None:
        return grid[(c.layer, "k", "total")][:, c.unit]
    return pick(grid[(c.layer, c.site)], c)


def refuse_unsupported(kind: str, mode: str) -> None:
    """What patching cannot do on this kind of model, said before the weights load when the config is read."""
    if kind == "seq2seq" and mode == "each":
        raise InputError(
            "positions: per-position patching reads one token axis; an encoder-decoder has two (encoder and "
            "decoder): use positions all",
            field="positions",
        )


def _settle(pool: RunPool, comps, store: Store, site: str, s: PatchSettings, say) -> dict:
    """Exact patching of one site in the order of |mean estimate| as asked (every component, or the first N;
    the settle rule settles the sites jointly: _settle_jointly), in rounds each saved to the checkpoint."""
    est, values = store.state[f"est.{site}"], store.state[f"values.{site}"]
    base = store.state["m_corrupt" if s.direction == "denoising" else "m_clean"]
    order = np.argsort(-np.abs(est.mean(1)), kind="stable")
    picked = lambda todo: [comps[i] for i in todo]  # noqa: E731

    measure = lambda idx: measure_exact(pool, idx, store, values, say, (f"{site}: patching", "components"), picked)  # noqa: E731

    delta = lambda idx: np.nanmean(values[idx] - base, 1)  # noqa: E731  (what the estimate estimates)
    layer = lambda i: comps[i].layer  # noqa: E731  (one restarted forward per layer of a round)
    return settle_as_asked(s.exact, order, measure, delta, SettleRule(top=s.top), est.mean(1), group=layer)


def _row(loaded, c: Component, est: np.ndarray, patched: np.ndarray, m_base, m_corrupt, den: float | None) -> dict:
    exact = bool(np.isfinite(patched).all())  # measured on every prompt
    scale = None if den is None else abs(den)
    delta, delta_ci = mean_ci(patched - m_base) if exact else (None, None)
    norm_mean, norm_ci = mean_ci(patched - m_corrupt) if exact else (None, None)
    est_mean, est_ci = mean_ci(est)
    base_off = float(np.mean(m_base - m_corrupt))
    row = {
        "layer": c.layer,
        "head": c.unit,
        "site": c.site,
        "position": c.position,
        "exact": delta,  # the measured Δ (null where only estimated), as in every table of attnroute
        "delta": delta,
        "delta_ci": delta_ci,
        "normalized": None if not exact or scale is None else norm_mean / den,
        "normalized_ci": None if not exact or scale is None or norm_ci is None else norm_ci / scale,
        "values": [finite(v) for v in patched] if exact else None,
        "estimate": est_mean,
        "estimate_ci": est_ci,
        "estimate_normalized": None if scale is None else (base_off + est_mean) / den,
        "estimate_values": [finite(v) for v in est],
    }
    if c.site in ("k", "v"):
        G = loaded.n_heads // loaded.n_kv_heads
        row["query_heads"] = list(range(c.unit * G, (c.unit + 1) * G))
    return row


def grid_of(meta: PatchMeta, site: str, rows: list[dict]) -> np.ndarray:
    """One site's normalized effects as [L, units] ([L, units, T] per position), NaN where only estimated;
    units are query heads (head, q), kv heads (k, v) or 1 (layer). Rows hold every component of the site, so
    the last position any row names is the last patched."""
    units = {"layer": 1, "k": meta.kv_heads, "v": meta.kv_heads}.get(site, meta.heads)
    mine = [r for r in rows if r["site"] == site]
    per_position = any(r["position"] is not None for r in mine)
    T = 1 + max((r["position"] for r in mine), default=0) if per_position else 1
    g = np.full((meta.layers, units, T), np.nan)
    for r in mine:
        if r["normalized"] is not None:
            g[r["layer"], r["head"] or 0, r["position"] or 0] = r["normalized"]
    return g if per_position else g[..., 0]


def _direct(parts: list[dict], chunks: list, N: int, loaded, shard: Shard) -> dict:
    """Per head: the direct effect on the clean and corrupt runs (mean, interval, per prompt) and the rest;
    ``parts``: each run's direct effects (PairRun.direct), in the order of ``chunks``."""
    reasons = [p[side]["reason"] for p in parts for side in ("clean", "corrupt") if "reason" in p[side]]
    if shard.world > 1:  # every rank says the same
        reasons = [r for rs in gather(reasons[:1], shard.world) for r in rs]
    if reasons:
        return {"reason": reasons[0]}
    L, H = loaded.n_layers, loaded.n_heads
    worst = [p[side]["adds_up_max_abs_diff"] for p in parts for side in ("clean", "corrupt")]
    out = {"rows": [], "rest": {}, "adds_up_max_abs_diff": float(np.nanmax(shard.merge_max(worst)))}
    per = {}
    for side in ("clean", "corrupt"):
        heads, rest = np.full((L, H, N), np.nan), np.full(N, np.nan)
        for g, p in zip(chunks, parts):
            heads[..., g.rows] = p[side]["heads"].numpy().transpose(1, 2, 0)
            rest[g.rows] = p[side]["rest"].numpy()
        per[side] = shard.merge(heads).transpose(2, 0, 1)  # (N, L, H)
        out["rest"][side], out["rest"][f"{side}_ci"] = mean_ci(shard.merge(rest))
    for l in range(L):
        for h in range(H):
            row = {"layer": l, "head": h}
            for side in ("clean", "corrupt"):
                row[side], row[f"{side}_ci"] = mean_ci(per[side][:, l, h])
            row["difference"], row["difference_ci"] = mean_ci(per["clean"][:, l, h] - per["corrupt"][:, l, h])
            row["clean_values"] = [finite(v) for v in per["clean"][:, l, h]]
            out["rows"].append(row)
    out["norm"] = parts[0]["clean"]["norm"] if parts else None
    out["post_norms"] = parts[0]["clean"]["post_norms"] if parts else None  # layers whose write is normed first
    writes = [p[side]["writes_check_max_abs_diff"] for p in parts for side in ("clean", "corrupt")]
    out["writes_check_max_abs_diff"] = float(np.nanmax(shard.merge_max(writes))) if writes else None
    return out


def _meta(st: Study, resolved, m_clean, m_corrupt, chunks, shortcut, settle) -> PatchMeta:
    loaded, s = st.loaded, st.s
    c_mean, c_ci = mean_ci(m_clean)
    x_mean, x_ci = mean_ci(m_corrupt)
    return PatchMeta(
        **{
            "metric": st.metric_name,
            "direction": s.direction,
            "sites": list(s.sites),
            "n_prompts": len(st.pairs),
            "m_clean": c_mean,
            "m_clean_ci": c_ci,
            "m_corrupt": x_mean,
            "m_corrupt_ci": x_ci,
            "m_clean_values": [finite(v) for v in m_clean],
            "m_corrupt_values": [finite(v) for v in m_corrupt],
            "normalized_defined": gap(m_clean, m_corrupt, loaded.dtype) is not None,
            "positions": resolved,
            "lengths": sorted({g.length for g in chunks}),
            "prompts": st.record,
            "exact": settle,
            "shortcut": shortcut,
            "layers": loaded.n_layers,
            "heads": loaded.n_heads,
            "kv_heads": loaded.n_kv_heads,
            "attention_kinds": list(loaded.attention_kinds),
        }
    )


__all__ = ["PatchMeta", "PatchResult", "patch"]
