"""why(): why a head attends from i to j — the route's score split exactly into (query side, key side) pairs.

    r = why("smollm2", text, head="L18.H6", query="12", key="3")
    r = why("smollm2", text, head="L18.H6", routes="induction")     # the head's score averaged over routes

The score (after scale and soft-cap, before the mask) is bilinear in what the head's query reads at i and
its key reads at j (qk.py): a term per pair (query-side component at i, key-side component at j), with the
components the circuits' senders — the embeddings, each earlier head's write, each earlier MLP's write — and
the biases (the norm's β, projection biases) as one more component per side. Under a soft-cap
c · tanh(s / c) every term is scaled by the capped score over the raw one (said in the result); an additive
position bias (T5) is its own pair. The terms' sum is checked against the score the model computed from its
own q and k: the difference is reported, and over TOL the split is refused rather than printed.
Over routes: every route's terms averaged (the table), the largest per-route difference reported.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from ...engine import Mask
from ...engine.jsonable import Meta, Result
from ...errors import InputError
from ...models import LoadedModel, load
from ...progress import reporter
from ...settings import WhySettings, verb
from ..adapter import routed
from ..ground.batches import batch_of, no_cache
from ..ground.positions import resolve_positions
from ..stimuli import encode_text, tokens_of
from .graph import Graph
from .layout import CircuitUnsupported, discover, stacks
from .postln import PostLNStream, side_parts
from .qk import TOL, Side, record_qk_norms, split_side
from .stream import Forward

ROUTES_MAX = 4096  # routes averaged in one call
DISCOVER = 16  # tokens of the text the stream's layout is found on (it does not depend on the length)


@dataclass(kw_only=True)
class WhyMeta(Meta):
    head: str
    layer: int
    kv_head: int
    routes: int
    scale: float
    softcap: float | None
    position_bias: bool
    sliced: bool
    max_difference: float
    relative_difference: float
    tokens: list[str]
    said: str


@dataclass(repr=False)
class WhyResult(Result):
    """score, sum, difference; pairs (query_side, key_side, term), largest |term| first; totals per side."""

    SCHEMA = {"experiment": str, "score": float, "sum": float, "difference": float, "pairs": list, "totals": dict}
    ROWS = "pairs"

    model: str
    meta: WhyMeta
    score: float
    total: float
    pairs: list[dict]
    totals: dict

    def to_dict(self) -> dict:
        m = self.meta
        top = self.pairs[0] if self.pairs else None
        lines = [
            f"{m['head']}: score {self.score:+.4f} over {m['routes']} route(s) = Σ of every (query side, key side) "
            f"pair {self.total:+.4f} (difference {self.score - self.total:+.2e})"
        ]
        if top is not None:
            lines.append(f"largest pair: {_name(top['query_side'])} × {_name(top['key_side'])} {top['term']:+.4f}")
        return {
            "experiment": "why",
            "verdict": {"lines": lines},
            "summary": {"routes": m["routes"], "pairs": len(self.pairs)},
            "model": self.model,
            "meta": m.to_dict(),
            "score": self.score,
            "sum": self.total,
            "difference": self.score - self.total,
            "pairs": self.pairs,
            "totals": self.totals,
        }


def _name(c: dict) -> str:
    return c["label"] + (f"@{c['position']}" if c.get("position") is not None else "")


HEAD = re.compile(r"([LE])(\d+)\.(x?)H(\d+)")


@verb(WhySettings)
def why(model=None, text: str | None = None, *, settings: WhySettings | None = None, progress=None, **fields):
    """The route's score split into (query side, key side) pairs; see the module docstring. The fields are
    WhySettings' (head, query, key, routes, top), or pass ``settings``."""
    s = WhySettings.of(settings, model, fields, text=text)
    say = reporter(progress)
    listed = _routes_file(s.routes, s.head) if s.routes not in (None, "induction") else None
    loaded = s.model if isinstance(s.model, LoadedModel) else load(s.model, progress=lambda m: say("load", m))
    ids, _ = encode_text(loaded.tokenizer, s.text, None, add_bos=loaded.causal)
    loaded.fit(ids.shape[1], "text", "the text")
    say("stage", f"why {s.head} attends where it does: one forward, then its query and key split")
    try:
        layout = discover(loaded, ids[:, :DISCOVER])
    except CircuitUnsupported as e:
        if "post-LN" not in str(e):
            raise
        return _why_post_ln(loaded, s, ids, listed)
    graph = Graph(layout)
    rq, rk, a = _receivers(graph, layout, s.head)
    run = Recorded(loaded, layout, graph, ids, a.layer)
    h, kvh = graph.receivers[rq].head, graph.receivers[rk].head
    routes, said = _routes(s, loaded, ids, run, h, listed)
    with torch.no_grad(), routed(loaded, impl="eager"):  # replay() stops the attention module at its call
        qs = split_side(run, rq, sorted({i for i, _ in routes}), run.q[0, h])
        ks = split_side(run, rk, sorted({j for _, j in routes}), run.k[0, kvh])
    return _result(loaded, s, run, routes, said, qs, ks, (h, kvh))


def _why_post_ln(loaded, s: WhySettings, ids, listed) -> WhyResult:
    """A post-LN model (BERT, BART): the components carried through every LayerNorm frozen (postln.py)."""
    side, layer, cross, h = HEAD.fullmatch(s.head).groups()
    layer, h = int(layer), int(h)
    stream = "encoder" if side == "E" else "decoder"
    found = dict(stacks(loaded))
    if stream not in found or layer >= len(found[stream]) or h >= loaded.n_heads:
        n = len(found.get(stream, []))
        raise InputError(f"head {s.head}: this model's {stream} has {n} layers × {loaded.n_heads} heads", field="head")
    index = {id(m): i for i, m in enumerate(loaded.attention_modules)}
    attns = [m for m in found[stream][layer].modules() if id(m) in index]
    kinds = [loaded.attention_kinds[index[id(m)]] for m in attns]
    module = next((m for m, k in zip(attns, kinds, strict=True) if (k == "cross") == bool(cross)), None)
    if module is None:
        raise InputError(f"head {s.head}: layer {layer} has no {'cross-' if cross else ''}attention", field="head")
    g = index[id(module)]
    run = Recorded(loaded, None, None, ids, g)
    kvh = h // (loaded.n_heads // loaded.n_kv_heads)
    routes, said = _routes(s, loaded, ids, run, h, listed)
    split = PostLNStream(loaded, ids)
    sides = []
    for channel, unit, positions, actual in (
        ("q", h, sorted({i for i, _ in routes}), run.q[0, h]),
        ("k", kvh, sorted({j for _, j in routes}), run.k[0, kvh]),
    ):
        read = "kv" if cross and channel == "k" else "x"
        parts, comps = side_parts(split, module, g, read, unit, channel, positions)
        _check_side(parts, actual[positions], f"{s.head}'s {channel}")
        sides.append(Side(parts, [], positions, False, components=comps))
    return _result(loaded, s, run, routes, said, sides[0], sides[1], (h, kvh))


def _check_side(parts: torch.Tensor, actual: torch.Tensor, what: str) -> None:
    gap = float((parts.sum(0) - actual.double()).abs().max())
    if gap > TOL * max(1.0, float(actual.abs().max())):
        raise CircuitUnsupported(f"{what} split into components misses the model's own by {gap:.3g}")


class _Enough(Exception):
    """Ends the recorded forward at the head's attention call."""


class Recorded:
    """One forward of the text with the residual stream recorded (stream.py), the QK-norms' inputs and
    outputs, and at the head's layer the q and k the model attended with, its mask and engine arguments."""

    def __init__(self, loaded, layout, graph, ids: torch.Tensor, layer: int):
        self.loaded, self.layout, self.graph, self.ids = loaded, layout, graph, ids
        got: dict = {}

        def before(lyr, module, q, k, v):
            if lyr == layer:
                got["q"], got["k"] = q.detach(), k.detach()

        def on(lyr, mask, args):
            if lyr == layer:
                got["mask"], got["args"] = mask, args
                raise _Enough  # nothing after the head's attention call is read

        self.qk_norms, hooks = record_qk_norms(loaded.attention_modules)
        fw = Forward(layout, graph) if layout is not None else contextlib.nullcontext()
        try:
            with torch.no_grad(), fw:
                with routed(loaded, before_attend=[before], on_attend=[on]):  # any kernel: nothing is edited
                    loaded.model(**batch_of(loaded, ids), **no_cache(loaded))
        except _Enough:
            pass
        finally:
            for hook in hooks:
                hook.remove()
        self.rec = fw.rec if layout is not None else {}
        self.q, self.k, self.mask, self.args = got["q"], got["k"], got["mask"], got["args"]
        self.scale = self.args.get("scale") or self.q.shape[-1] ** -0.5

    def allowed(self, h: int) -> torch.Tensor:
        """[Tq, Tk] bool: the routes that exist in head ``h`` (True = may attend)."""
        Tq, Tk = self.q.shape[2], self.k.shape[2]
        m = self.mask
        if m is None:
            return torch.ones(Tq, Tk, dtype=torch.bool)
        m = m.materialize(1, self.q.shape[1], Tq, Tk) if isinstance(m, Mask) else m
        return m.expand(1, self.q.shape[1], Tq, Tk)[0, h]

    def scores(self, h: int, kvh: int, routes: list[tuple[int, int]]) -> torch.Tensor:
        """[R] the scores the model computed for ``routes`` from its own q and k (scale, bias, soft-cap)."""
        i, j = (torch.tensor(x) for x in zip(*routes, strict=True))
        s = (self.q[0, h, i].double() * self.k[0, kvh, j].double()).sum(-1) * self.scale
        return self.capped(s + self.bias(h, i, j))

    def bias(self, h: int, i, j) -> torch.Tensor:
        b = self.args.get("bias")
        return torch.zeros(len(i), dtype=torch.float64) if b is None else b.expand(1, -1, -1, -1)[0, h, i, j].double()

    def capped(self, s: torch.Tensor) -> torch.Tensor:
        c = self.args.get("softcap")
        return s if not c else c * torch.tanh(s / c)


def _receivers(graph: Graph, layout, head: str):
    """(the query head's q receiver, its kv head's k receiver, the attention) for L18.H6 / E2.H0 / L3.xH2."""
    side, layer, cross, h = HEAD.fullmatch(head).groups()
    layer, h = int(layer), int(h)
    stream = "encoder" if side == "E" else "decoder"
    stack = layout.stack(stream) if stream in layout.streams else []
    if layer >= len(stack) or h >= layout.heads:
        raise InputError(
            f"head {head}: this model's {stream} has {len(stack)} layers × {layout.heads} heads", field="head"
        )
    a = stack[layer].cross if cross else stack[layer].attn
    if a is None:
        raise InputError(f"head {head}: layer {layer} has no {'cross-' if cross else ''}attention", field="head")
    G = layout.heads // max(1, layout.kv_heads)
    labels = {r.label(): j for j, r in enumerate(graph.receivers)}
    where = f"{side}{layer}.{cross}"
    return labels[f"{where}H{h}.q"], labels[f"{where}KV{h // G}.k"], a


def _routes_file(path: str, head: str) -> list[tuple[int, int]]:
    """The (query, key) rows of ``head`` in a routes --json file, read before the weights load."""
    p = Path(path)
    try:
        rows = json.loads(p.read_text())["routes"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(
            f"routes must be 'induction' or a routes --json file; {path!r} is not one ({type(e).__name__})",
            field="routes",
        ) from None
    layer, h = (int(x) for x in re.findall(r"\d+", head))
    found = [(int(r["query"]), int(r["key"])) for r in rows if r.get("layer") == layer and r.get("head") == h]
    if not found:
        raise InputError(f"{path} lists no route of {head}: give a routes file of that head", field="routes")
    return found


def _routes(s: WhySettings, loaded, ids, run: Recorded, h: int, listed) -> tuple[list[tuple[int, int]], str]:
    """The routes to split (only those the head's mask lets exist) and a line saying what was chosen."""
    allowed = run.allowed(h)
    Tq, Tk = allowed.shape
    if listed is not None:
        wanted, said = listed, f"{len(listed)} routes of {s.head} from {s.routes}"
    elif s.routes == "induction":
        wanted = _induction(ids[0].tolist())
        said = f"{len(wanted)} induction routes (each token → the one after its latest earlier occurrence)"
    else:
        qs = _positions(loaded, s.text, ids, s.query, "query", Tq)
        ks = _positions(loaded, s.text, ids, s.key, "key", Tk)
        wanted, said = [(i, j) for i in qs for j in ks], f"query {s.query!r} → {qs}, key {s.key!r} → {ks}"
    outside = [(i, j) for i, j in wanted if not (i < Tq and j < Tk)]
    if outside:
        raise InputError(f"route {outside[0]} is outside the head's {Tq} queries × {Tk} keys", field="query")
    routes = [(i, j) for i, j in wanted if bool(allowed[i, j])]
    if not routes:
        raise InputError(f"no route asked for exists in {s.head}: its mask forbids them all", field="key")
    if len(routes) < len(wanted):
        said += f"; {len(wanted) - len(routes)} masked in this head (no score) left out"
    if len(routes) > ROUTES_MAX:
        raise InputError(f"{len(routes)} routes: at most {ROUTES_MAX} in one call", field="routes")
    return routes, said


def _induction(t: list[int]) -> list[tuple[int, int]]:
    """(i, p + 1) for each position i whose token occurred before, p its latest earlier occurrence."""
    last: dict[int, int] = {}
    out = []
    for i, tok in enumerate(t):
        if tok in last and last[tok] + 1 <= i:
            out.append((i, last[tok] + 1))
        last[tok] = i
    return out


def _positions(loaded, text: str, ids, spec: str, field: str, T: int) -> list[int]:
    """Positions on the text; an encoder-decoder's decoder (it reads its start token) takes indices only."""
    if T == ids.shape[1]:
        return resolve_positions(loaded.tokenizer, text, ids, spec, field)[0]
    if not re.fullmatch(r"\s*\d+(\s*,\s*\d+)*\s*", spec):
        raise InputError(f"{field}: the decoder reads {T} token(s) (its start token): give indices", field=field)
    return sorted({int(x) for x in spec.split(",")})


def _result(loaded, s: WhySettings, run: Recorded, routes, said: str, qs, ks, heads) -> WhyResult:
    h, kvh = heads
    qi = torch.tensor([qs.positions.index(i) for i, _ in routes])
    kj = torch.tensor([ks.positions.index(j) for _, j in routes])
    Q, K = qs.parts[:, qi], ks.parts[:, kj]  # [Cq + 1, R, D], [Ck + 1, R, D]
    raw = (Q.sum(0) * K.sum(0)).sum(-1) * run.scale  # [R] the bilinear score, before bias and cap
    i, j = (torch.tensor(x) for x in zip(*routes, strict=True))
    bias = run.bias(h, i, j)
    capped = run.capped(raw + bias)
    factor = torch.where((raw + bias).abs() > 0, capped / (raw + bias), torch.ones_like(raw))
    terms = torch.einsum("ard,brd,r->ab", Q, K, factor * run.scale) / len(routes)  # the mean over routes
    actual = run.scores(h, kvh, routes)
    split = (raw + bias) * factor
    gap = float((split - actual).abs().max())
    rel = gap / max(1.0, float(actual.abs().max()))
    if rel > TOL:
        msg = f"{s.head}'s score split into pairs misses the model's by {gap:.3g}: not printed"
        raise InputError(msg, field="head")
    bias_term = float((bias * factor).mean())
    single = len(routes) == 1
    qc = _components(run, qs, routes[0][0] if single else None)
    kc = _components(run, ks, routes[0][1] if single else None)
    pairs = _pairs(terms, qc, kc, s.top, bias_term)
    totals = {"query_side": _totals(terms.sum(1), qc), "key_side": _totals(terms.sum(0), kc)}
    if bias_term:
        totals["position_bias"] = bias_term
    seq2seq = run.loaded.seq2seq
    meta = WhyMeta(
        head=s.head,
        layer=int(HEAD.fullmatch(s.head).group(2)),
        kv_head=kvh,
        routes=len(routes),
        scale=float(run.scale),
        softcap=run.args.get("softcap"),
        position_bias=run.args.get("bias") is not None,
        sliced=qs.sliced and ks.sliced,
        max_difference=gap,
        relative_difference=rel,
        tokens=tokens_of(loaded.tokenizer, run.ids[0]),
        said=said + ("; components keyed by stream" if seq2seq else ""),
    )
    return WhyResult(loaded.name, meta, float(actual.mean()), float(terms.sum()) + bias_term, pairs, totals)


def _components(run: Recorded, side: Side, position: int | None) -> list[dict]:
    """The side's components as the JSON names them: each sender, then the biases."""
    seq2seq = run.loaded.seq2seq
    out = []
    for c in side.components or [_as_dict(run.graph.senders[x]) for x in side.senders]:
        d = {"kind": c["kind"], "layer": c["layer"], "head": c["head"], "position": position, "label": _label(c)}
        out.append({**d, "stream": c["stream"]} if seq2seq else d)
    out.append({"kind": "bias", "layer": None, "head": None, "position": position, "label": "bias"})
    return out


def _as_dict(c) -> dict:
    return {"kind": c.kind, "layer": c.layer, "head": c.head, "stream": c.stream, "attention": c.attention}


def _label(c: dict) -> str:
    """As the circuits name senders: embed (enc.embed), L5.H1 / E2.H0 / L3.xH2, L5.MLP / E2.MLP."""
    enc = c.get("stream") == "encoder"
    if c["kind"] == "embed":
        return "enc.embed" if enc else "embed"
    where = f"{'E' if enc else 'L'}{c['layer']}"
    if c["kind"] == "mlp":
        return f"{where}.MLP"
    return f"{where}.{'x' if c.get('attention') == 'cross' else ''}H{c['head']}"


def _pairs(terms: torch.Tensor, qc: list[dict], kc: list[dict], top: int, bias_term: float) -> list[dict]:
    """The ``top`` pairs by |term| (a position bias, where the model adds one, is a pair of its own)."""
    flat = terms.flatten()
    order = torch.argsort(flat.abs(), descending=True)[:top].tolist()
    rows = [
        {"query_side": qc[o // terms.shape[1]], "key_side": kc[o % terms.shape[1]], "term": float(flat[o])}
        for o in order
    ]
    if bias_term:
        pb = {"kind": "bias", "layer": None, "head": None, "position": None, "label": "position bias"}
        rows.append({"query_side": pb, "key_side": pb, "term": bias_term})
        rows.sort(key=lambda r: -abs(r["term"]))
    return rows[:top]


def _totals(values: torch.Tensor, components: list[dict]) -> list[dict]:
    order = torch.argsort(values.abs(), descending=True).tolist()
    return [{"component": components[o], "total": float(values[o])} for o in order]


__all__ = ["WhyResult", "why"]
