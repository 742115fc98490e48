"""route_attribution(): every query→key route's estimated effect on your metric, the top verified exactly.

    result = route_attribution("smollm2", text="When Mary and John went to the store, John gave a drink to",
                               metric="logit-diff", answer=" Mary", wrong=" John", top=20, verify=10)

One text (the metric attributed on its own run), or prompt pairs of one length (the gradient taken on
the clean runs, the routes' effects averaged over prompts, and each also said as a share of the way
from M_clean to M_corrupt). How it is computed: routes.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ...engine import InputError
from ...engine.jsonable import Meta, Result
from ...errors import deferred_interrupt
from ...models.arithmetic import arithmetic_of, arithmetic_said, float32_arithmetic
from ...promptset import FLAT_AT_CLEAN, finite
from ...settings import SETTLE_STEP, RoutesSettings, verb
from ..adapter import routed
from ..effects import clean_encoding, layer_stack, restart_check, rows_of, run_from
from ..ground.arrays import Store, pairs_key
from ..ground.batches import batch_of, metric_input, no_cache, output_kwargs
from ..ground.budget import said as memory_said
from ..ground.copies import repeat_batch
from ..ground.group import Shard
from ..ground.metrics import resolve
from ..ground.prompts import PromptError, check_metric_kind, tokenize_pairs
from ..ground.settle import SettleRule, settle, settle_said
from ..ground.stats import agreement, gap
from ..stimuli import tokens_of
from ..study import Study, reads_text
from .routes import CHECKPOINT_FROM, MAX_TOKENS, knockout_one, output_gradients, stream_routes
from .sinks import sink_said, sinks_of
from .suffix import Suffix, cache_differs, windowed

NORM_WEIGHT = "A_ij · ‖W_O^h v_j‖ (Kobayashi et al. 2020); null where the output projection is not a Linear"


@dataclass(kw_only=True)
class RoutesMeta(Meta):
    """What a route attribution says about itself: the JSON's ``meta`` (metric values in its own units)."""

    metric: str
    mode: str  # text (the metric attributed on its own run) or pairs (clean runs, toward the corrupt)
    n_prompts: int
    T: int  # tokens per prompt
    m: float  # the metric on the run the gradient was taken on, mean over prompts
    m_values: list  # [N] per prompt
    tokens: list[str]  # the first prompt's tokens (the queries' and keys' positions)
    prompts: list[dict]
    layers: list[int]  # the layers whose routes were streamed
    top: int
    verify: int
    backward: str  # stored activations, or blocks checkpointed (long texts)
    norm_weight: str = NORM_WEIGHT
    m_corrupt: float | None = None  # pairs: the metric on the corrupt runs
    m_corrupt_values: list | None = None
    decoder_tokens: list | None = None  # an encoder-decoder's decoder input
    restart: dict | None = None  # the layer-restart check of the exact knockouts
    settle: dict | None = None  # how the exact top was settled: measured, band, could_enter, beyond_kept
    skipped: list | None = None  # with skip_bad: the prompt rows left out, {row, reason}
    memory: dict | None = None  # with max_memory: the cap, what was resident, the batches' scale, the peak, kept
    arithmetic: dict | None = None  # a bf16/fp16 model: its weights' dtype, read in float32 (models/arithmetic.py)

    OPTIONAL = (
        "m_corrupt",
        "m_corrupt_values",
        "decoder_tokens",
        "restart",
        "settle",
        "skipped",
        "memory",
        "arithmetic",
    )


@dataclass(repr=False)
class RoutesResult(Result):
    """The top routes of every head by |estimate|, the top ``verify`` of them knocked out exactly.

    routes     one dict per kept route: layer, head, query and key positions (and tokens), weight A_ij
               (mean over prompts), norm_weight A_ij·‖W_O^h v_j‖, estimate and exact (Δ metric when the
               route is removed and its row renormalized, metric units; exact null where not verified), and
               for pairs each as a share of the way from M_clean to M_corrupt
    agreement  estimate against exact (n, Spearman, R², slope); weight and norm weight against |effect|
    meta       RoutesMeta
    """

    KIND = "routes"
    TABLE = "routes"  # its table's key before format 1 (an alias of rows until 0.3)

    SCHEMA = {
        "experiment": str,
        "verdict": {"lines": [str]},
        "summary": dict,
        "model": str,
        "rows": [{"layer": int, "head": int, "query": int, "key": int, "estimate": float, "weight": float}],
        "meta": {"metric": str, "n_prompts": int, "tokens": [str]},
        "agreement": dict,
    }

    model: str
    meta: RoutesMeta
    routes: list[dict] = field(default_factory=list)
    agreement: dict = field(default_factory=dict)
    sink: dict | None = None  # keys that are attention sinks, when kept routes end there (patching/sinks.py)
    content_routes: list[dict] | None = None  # then: the top routes to every other key (estimates)

    def payload(self) -> dict:
        extra = {} if self.sink is None else {"sink": self.sink, "content_routes": self.content_routes}
        return {
            "experiment": "routes",
            "verdict": {"lines": self._lines()},
            "summary": {
                "routes kept": len(self.routes),
                "verified": sum(r.get("exact") is not None for r in self.routes),
            },
            "model": self.model,
            "meta": self.meta.to_dict(),
            "agreement": self.agreement,
            "routes": self.routes,
            **extra,
        }

    def _lines(self) -> list[str]:
        """The verdict: the metric, the top verified routes, how the top settled, and what the reading says of
        itself (sinks, a memory cap, its arithmetic)."""
        m = self.meta
        lines = [f"{m['metric']} = {m['m']:.3f} over {m['n_prompts']} prompt(s) of {m['T']} tokens"]
        verified = sorted((r for r in self.routes if r.get("exact") is not None), key=lambda r: -abs(r["exact"]))
        for r in (verified or self.routes)[:3]:
            exact = "" if r.get("exact") is None else f", exact {r['exact']:+.3f}"
            lines.append(
                f"L{r['layer']} h{r['head']} {r['query_token']!r} → {r['key_token']!r}: "
                f"estimate {r['estimate']:+.3f}{exact} (weight {r['weight']:.3f})"
            )
        if m.get("settle"):
            lines.append(settle_said(m["settle"], m["verify"], "routes by |exact|", "raise --top or --verify"))
            if m["settle"].get("beyond_kept"):
                lines.append(
                    f"note: a route outside the {m['top']} kept could enter it (its estimate within the band of the "
                    "smallest kept): keep more with --top"
                )
        a = self.agreement.get("estimate_vs_exact", {})
        if a.get("spearman") is not None:
            lines.append(
                f"estimate vs exact over {a['n']} routes: Spearman {a['spearman']:.2f}, R² {a['r2']:.2f}, "
                f"slope {a['slope']:.2f}"
            )
        if self.sink is not None:
            lines.append(sink_said(self.sink, len(self.routes)))
        if over := memory_said(m.memory):
            lines.append(over)
        if said := arithmetic_said(m.get("arithmetic")):
            lines.append(said)
        return lines


@verb(RoutesSettings)
def route_attribution(model=None, text=None, *, settings: RoutesSettings | None = None, progress=None, **fields):
    """Route attribution; the fields are RoutesSettings' (or pass ``settings``). See the module docstring."""
    s = RoutesSettings.of(settings, model, fields, text=text)
    st = Study(s, progress, "route attribution", kind="routes", refuse=reads_text("give it a clip: `audio`"))
    name, fn = resolve(s.metric)
    pairs = _before_weights(st, name)
    with st, float32_arithmetic(st.loaded):  # the checkpoint's lock, Ctrl-C said; bf16 weights read in float32
        return _attribute(st, name, fn, pairs)


def _attribute(st: Study, name: str, fn, pairs) -> RoutesResult:
    s, say, loaded = st.s, st.say, st.loaded
    pairs = st.usable(pairs, loaded, gradient=True)  # no facts before the weights: the model's own tokenizer
    groups, record = tokenize_pairs(loaded.tokenizer, loaded.kind, pairs, s.metric, gradient=True)
    g = _one_length(groups)
    loaded.fit(g.length, "text" if s.single else "prompts", "the text" if s.single else "the prompts")
    layers = _layers(loaded.n_layers, s.layers)
    batch = batch_of(loaded, g.clean)
    kwargs = {**output_kwargs(loaded, fn), **no_cache(loaded)}  # one forward each: nothing decodes
    fields_ = {"answer": g.answer, "wrong": g.wrong}
    fields_ = {k: v for k, v in fields_.items() if v is not None}
    say("stage", f"route attribution: forward + backward on {g.clean.shape[0]} × {g.length} tokens")
    grads, m_base = output_gradients(loaded, batch, fn, fields_, kwargs, layers)
    run = RouteRun(loaded, batch, fn, fields_, kwargs, m_base)
    say("stage", f"streaming the routes of {len(layers)} layers block by block (top {s.top} kept)")
    shares: dict = {}
    routes, *recorded = stream_routes(loaded, batch, grads, s.top, kwargs, record_blocks=s.verify > 0, shares=shares)
    m_corrupt = None if s.single else _corrupt_metric(loaded, g, fn, fields_, kwargs)
    st.metric_name, st.record = name, record
    result = RoutesResult(loaded.name, _meta(st, run, g, m_corrupt, layers))
    _label(loaded, result.meta, routes)
    result.sink, result.content_routes = _past_the_sink(st, batch, grads, kwargs, shares, routes, result.meta)
    del grads
    estimated = lambda: RoutesResult(loaded.name, result.meta, [{**r, "exact": None} for r in routes])  # noqa: E731
    st.partial(estimated, ["estimate"], ["verify"], f"{len(routes)} routes estimated; the top verified next")
    store = _store(st, name, pairs, layers, routes)
    exact = _verify(run, routes, s.verify, recorded, result.meta, say, store)
    den = None if m_corrupt is None else gap(m_corrupt.numpy(), m_base.numpy(), loaded.dtype)
    for r, e in zip(routes, exact):
        r["exact"] = e
        if m_corrupt is not None:  # the share of the clean-to-corrupt gap a route's removal covers (None: no gap)
            r["toward_corrupt"] = None if den is None else r["estimate"] / den
            r["exact_toward_corrupt"] = None if e is None or den is None else e / den
    result.routes, result.agreement = routes, _agreements(routes)
    return result


def _past_the_sink(st: Study, batch, grads, kwargs, shares, routes, meta) -> tuple:
    """(the sink, the content routes) when kept routes end on a sink key — the content routes from one more
    streaming pass that keeps no route to a sink (estimates; the exact checks stay the top routes') — else
    (None, None)."""
    sink = sinks_of(shares, routes, meta["tokens"])
    if sink is None:
        return None, None
    st.say("stage", f"{sink_said(sink, len(routes))}: streaming again for them")
    content, _, _ = stream_routes(st.loaded, batch, grads, st.s.top, kwargs, record_blocks=False, exclude=sink["keys"])
    _label(st.loaded, meta, content)
    for r in content:
        r["exact"] = None
    return sink, content


def _before_weights(st: Study, name: str) -> tuple:
    """The metric, prompts, answers and layers refused before the weights load; the prompt pairs."""
    s = st.s
    facts = st.facts()
    if facts is not None:  # the metric first, said for this model's kind: not the missing answer
        check_metric_kind(s.metric, facts.kind, True)
    if name in FLAT_AT_CLEAN:  # its estimate would be 0 for every route (the model's kind unknown yet)
        raise InputError(
            f"metric {name} is flat (zero gradient) on the run it compares with, so every route "
            "estimate would be 0: use logit-diff, prob, logprob or loss on a causal LM; on an encoder "
            "give your own metric of the pooled embedding (a Python callable)",
            field="metric",
        )
    pairs = st.usable(s.read_pairs(), facts, gradient=True)
    if facts is not None:
        _one_length(tokenize_pairs(facts.tokenizer, facts.kind, pairs, s.metric, gradient=True)[0])
        if facts.n_layers is not None:
            _layers(facts.n_layers, s.layers)
    return pairs


def _one_length(groups):
    """The one group of same-length prompts, its tokens within what one attribution reads in bounded memory."""
    if len(groups) > 1:
        lengths = ", ".join(str(x.length) for x in groups)
        raise PromptError(
            f"route attribution averages routes by position, so every prompt must have the same length; "
            f"these have {len(groups)} lengths ({lengths} tokens): give one template"
        )
    g = groups[0]
    tokens = len(g.rows) * g.length
    if tokens > MAX_TOKENS:
        raise PromptError(
            f"route attribution holds the gradient at every head's output for every token: {len(g.rows)} prompts × "
            f"{g.length} tokens = {tokens:,} tokens, past the {MAX_TOKENS:,} it reads in bounded memory (about "
            f"{tokens / MAX_TOKENS * 6:.0f} GiB on SmolLM2); give at most {max(1, MAX_TOKENS // g.length):,} prompts"
        )
    return g


def _layers(n_layers: int, layers) -> list[int]:
    if layers is None:
        return list(range(n_layers))
    bad = [l for l in layers if l >= n_layers]
    if bad:
        raise InputError(
            f"layers: layer {bad[0]} does not exist: the model has {n_layers} attention layers", field="layers"
        )
    return sorted(set(layers))


@torch.no_grad()
def _corrupt_metric(loaded, g, fn, fields_, kwargs) -> torch.Tensor:
    batch = batch_of(loaded, g.corrupt)
    with routed(loaded, impl="auto"):
        out = loaded.model(**batch, **kwargs)
    return fn(metric_input(loaded, out, batch), {**batch, **fields_}).float()


@dataclass(frozen=True)
class RouteRun:
    """The run every route is measured against: the model, its batch and metric (with the metric's fields and
    the forward's keyword arguments), and the metric's base value per prompt."""

    loaded: object
    batch: dict
    fn: object
    fields: dict
    kwargs: dict
    m_base: torch.Tensor

    def value(self, out) -> torch.Tensor:
        return self.fn(metric_input(self.loaded, out, self.batch), {**self.batch, **self.fields}).float()


@torch.no_grad()
def _store(st: Study, name: str, pairs, layers, routes: list[dict]):
    """The kept routes' exact effects (NaN: not yet measured) and the knockout forwards made, checkpointed. The
    key holds the kept routes themselves, in order, and the arithmetic: the exact effects are stored by position
    in that list, so a run that kept other routes (or ranked them otherwise) must not resume them."""
    s = st.s
    key = None
    if st.checkpoint is not None:
        kept = [[r["layer"], r["head"], r["query"], r["key"]] for r in routes]
        ident = [name, list(layers), s.top, s.verify, kept, arithmetic_of(st.loaded)]
        key = pairs_key("routes", s, pairs, st.loaded, ident)
    st.shard = Shard(1, 0, 1)
    return st.store("routes", key, {"values.routes": (len(routes), 1), "forwards": (1,)})


def _verify(run: RouteRun, routes, verify, recorded, meta, say, store=None) -> list[float | None]:
    """Exact: knock routes out (−inf before the softmax, the row renormalized) and rerun from their layer,
    under the settle rule (ground/settle.py): the exact top ``verify`` among the kept routes must hold and no
    kept route's estimate, within the error band, could still enter it. None where not measured.
    ``recorded``: (each block's output, base) from the streaming pass (routes.stream_routes)."""
    if store is None:  # no checkpoint (a speech model's routes): nothing kept between runs
        store = Store("routes", None, None, {"values.routes": (len(routes), 1)}, Shard(1, 0, 1))
    kept = store.state["values.routes"][:, 0]  # a resumed run's measured routes
    exact: list[float | None] = [None if np.isnan(v) else float(v) for v in kept]
    if verify == 0 or not routes:
        return exact
    batch, m_base = run.batch, run.m_base
    stored, blocks, suffix = _restart(run, recorded, meta)
    encoding = _decoder_encoding(run, routes)

    forwards = [int(store.state.get("forwards", [0])[0])]  # the knockouts' forwards (fewer where routes shared one)

    def measure(idx: list[int]) -> None:
        idx = [i for i in idx if exact[i] is None]  # what a resumed run measured is kept
        for chunk in _shared(idx, routes, rows_of(batch).shape) if suffix is not None else [[i] for i in idx]:
            forwards[0] += 1
            ms = _knocked_out(run, [routes[i] for i in chunk], suffix, stored, blocks, meta.restart["used"], encoding)
            for i, m in zip(chunk, ms, strict=True):
                exact[i] = kept[i] = float((m - m_base).mean())
            store.state["forwards"] = np.array([forwards[0]], dtype=np.float64)
            with deferred_interrupt():  # a checkpoint is written whole
                store.save()
            done = sum(e is not None for e in exact)
            say("verify", f"{done} routes knocked out exactly (of {len(routes)} kept)", done=done, total=len(routes))

    how = _rerun_said(run, suffix, meta, encoding)
    say("stage", f"settling the exact top {verify}: each route knocked out and rerun ({how})")
    rule = SettleRule(first=verify, step=max(1, min(SETTLE_STEP, verify)), top=verify, limit=len(routes))
    est = np.array([r["estimate"] for r in routes])
    info = settle(range(len(routes)), measure, lambda idx: np.array([exact[i] for i in idx]), rule, estimate=est)
    unkept = info["band"] is not None and info["floor"] is not None and abs(est[-1]) + info["band"] >= info["floor"]
    meta.settle = {**info, "rule": rule.describe(), "beyond_kept": bool(unkept and len(routes) == meta.top)}
    meta.restart["knockout_forwards"] = forwards[0]
    return exact


def _rerun_said(run: RouteRun, suffix, meta, encoding) -> str:
    """What a knockout reruns, for the progress line."""
    if suffix is not None:
        return "its query's rows on, from its layer on"
    if meta.restart and meta.restart.get("used"):
        return "every row from its layer on"
    if "encoder_outputs" in run.kwargs:
        return "the decoder on one clean encoding"
    if encoding is not None:
        return "a decoder route: the decoder on one clean encoding; an encoder route: the whole model"
    return "the whole model"


def _decoder_encoding(run: RouteRun, routes: list[dict]) -> torch.Tensor | None:
    """An encoder–decoder's clean encoding [B, S, d] when a route lies in its decoder (self or cross layers) and
    the forwards do not already read one: a knockout there cannot change the encoder, so its rerun reads this
    (computed as every rerun computed it: effects.clean_encoding) instead of running the encoder again."""
    loaded = run.loaded
    if not loaded.seq2seq or "encoder_outputs" in run.kwargs:
        return None
    if all(loaded.mode(r["layer"]) == "encoder" for r in routes):
        return None
    return clean_encoding(loaded, run.batch)


def _knocked_out(run: RouteRun, chunk: list[dict], suffix, stored, blocks, restarts: bool, encoding=None) -> list:
    """The metric with each route of ``chunk`` knocked out: copies in one forward over the suffix of rows from
    their first query and layer on, or one route rerun from its layer (every row); an encoder–decoder's decoder
    route reads ``encoding`` (_decoder_encoding)."""
    loaded = run.loaded
    if suffix is not None:
        start, row = min(r["layer"] for r in chunk), min(r["query"] for r in chunk)
        cuts = [lambda items, r=r: [knockout_one(r, loaded.attention_kinds, items)] for r in chunk]
        return suffix.metrics(start, row, cuts)
    r = chunk[0]
    cut = [knockout_one(r, loaded.attention_kinds)]
    start = r["layer"] if restarts else 0
    kwargs = run.kwargs
    if encoding is not None and loaded.mode(r["layer"]) != "encoder":
        kwargs = {**kwargs, "encoder_outputs": (encoding,)}
    out = run_from(loaded, start, stored, run.batch, interventions=cut, copies=1, blocks=blocks, impl="auto", **kwargs)
    return [run.value(out)]


def _restart(run: RouteRun, recorded, meta) -> tuple:
    """(each block's recorded output, the blocks, the suffix shortcut or None): where a knockout's rerun
    starts — the route's query row on (suffix.py), or every row from its layer on (that restart checked
    against the base run), or every row from the start — said in meta.restart."""
    stored, base = recorded
    blocks = layer_stack(run.loaded)
    meta.restart = {"used": bool(blocks) and bool(stored)}
    suffix = _suffix(run, stored, blocks, base, meta) if meta.restart["used"] else None
    if suffix is None and meta.restart["used"]:
        check = restart_check(run.loaded, stored, run.batch, run.value, run.m_base, blocks, impl="auto", **run.kwargs)
        meta.restart.update(used=check["used"], max_abs_diff=check.get("restart_check_max_abs_diff"))
    return stored, blocks, suffix


SHARED_TOKENS = 256  # rows (copies × prompts × rerun rows) a batched knockout forward may hold


def _shared(idx: list[int], routes: list[dict], shape) -> list[list[int]]:
    """The routes to knock out, in chunks that share one forward as copies: while the copies' rows stay within
    SHARED_TOKENS, where a forward costs reading the weights rather than computing (a 4,096-token text's
    routes near its start run one at a time, as each is a whole forward by itself)."""
    B, T = shape
    chunks: list[list[int]] = []
    for i in idx:
        grown = chunks[-1] + [i] if chunks else [i]
        rows = T - min(routes[j]["query"] for j in grown)
        if chunks and len(grown) * B * rows <= SHARED_TOKENS:
            chunks[-1] = grown
        else:
            chunks.append([i])
    return chunks


def _suffix(run: RouteRun, stored, blocks, base, meta) -> Suffix | None:
    """The knockouts' shortcut to the rows a route can change (suffix.py), when the model allows it and it
    reproduces the base run (its check restarts from the middle layer at the middle row, so it checks the
    layer restart too); else None (each knockout reruns every row from its layer), said in meta."""
    loaded, batch, fn = run.loaded, run.batch, run.fn
    why = None if base is not None else "the streaming pass did not record every layer's keys and values"
    why = "not a causal LM without sliding windows" if not loaded.causal or windowed(loaded) else why
    why = why or cache_differs(loaded, batch, base[0])
    if why is not None:
        meta.restart["suffix"] = {"used": False, "reason": f"{why}: every row rerun"}
        return None
    value = lambda logits, copies=1: fn(logits, repeat_batch({**batch, **run.fields}, copies)).float()  # noqa: E731
    suffix = Suffix(
        loaded,
        batch,
        stored,
        blocks,
        value=value,
        kwargs=run.kwargs,
        last_only=getattr(fn, "last_only", False),
        base=base,
    )
    check = suffix.check(run.m_base)
    meta.restart["suffix"] = check
    return suffix if check["used"] else None


def _label(loaded, meta, routes) -> None:
    tokens = meta["tokens"]
    dec = meta.get("decoder_tokens")
    for r in routes:
        kind = loaded.attention_kinds[r["layer"]]
        qt = dec if kind in ("decoder-self", "cross") and dec else tokens
        kt = dec if kind == "decoder-self" and dec else tokens
        r["query_token"], r["key_token"] = qt[r["query"]], kt[r["key"]]
        if kind != "self":
            r["stream"] = kind


def _meta(st: Study, run: RouteRun, g, m_corrupt, layers) -> RoutesMeta:
    loaded, s, record, m_base = st.loaded, st.s, st.record, run.m_base
    meta = RoutesMeta(
        metric=st.metric_name,
        mode="text" if s.single else "pairs",
        n_prompts=int(g.clean.shape[0]),
        T=g.length,
        m=float(m_base.mean()),
        m_values=[finite(v) for v in m_base.tolist()],
        tokens=record[0]["clean"],
        prompts=record,
        layers=layers,
        top=s.top,
        verify=s.verify,
        backward="blocks checkpointed" if len(g.rows) * g.length > CHECKPOINT_FROM else "stored activations",
        skipped=st.skipped or None,
        memory=st.bound.report() or None,
        arithmetic=arithmetic_of(loaded),
    )
    if m_corrupt is not None:
        meta.m_corrupt, meta.m_corrupt_values = float(m_corrupt.mean()), [finite(v) for v in m_corrupt.tolist()]
    if loaded.seq2seq:
        start = int(loaded.model.config.decoder_start_token_id or 0)
        meta.decoder_tokens = tokens_of(loaded.tokenizer, [start])
    return meta


def _rank(a, b) -> float | None:
    a, b = np.asarray(a, float), np.asarray(b, float)
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3 or np.ptp(a[ok]) == 0 or np.ptp(b[ok]) == 0:
        return None
    from scipy.stats import spearmanr  # here: importing scipy.stats costs every process ~1 s (ground/stats.py)

    return float(spearmanr(a[ok], b[ok]).statistic)


def _agreements(routes: list[dict]) -> dict:
    """Estimate vs exact on the verified routes; weight and norm-weighted weight vs |effect| (rank)."""
    ver = [r for r in routes if r.get("exact") is not None]
    nan = float("nan")
    get = lambda rs, k: [nan if r.get(k) is None else r[k] for r in rs]  # noqa: E731
    return {
        "estimate_vs_exact": agreement(get(ver, "estimate"), get(ver, "exact")),
        "weight_vs_abs_exact": _rank(get(ver, "weight"), np.abs(get(ver, "exact"))),
        "norm_weight_vs_abs_exact": _rank(get(ver, "norm_weight"), np.abs(get(ver, "exact"))),
        "weight_vs_abs_estimate": _rank(get(routes, "weight"), np.abs(get(routes, "estimate"))),
        "norm_weight_vs_abs_estimate": _rank(get(routes, "norm_weight"), np.abs(get(routes, "estimate"))),
    }


__all__ = ["RoutesMeta", "RoutesResult", "route_attribution"]
