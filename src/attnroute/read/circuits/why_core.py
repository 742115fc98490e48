"""The split behind why(): one forward recorded at the head's attention call, the route's score computed from
the model's own q and k, and the (query side, key side) terms laid out as the result (why.py for texts,
why_speech.py for clips).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

import torch

from ...engine import Mask
from ...engine.jsonable import Meta, Result
from ...engine.tolerance import split_tolerance
from ...errors import InputError
from ...settings import WhySettings
from ..adapter import routed
from ..ground.batches import batch_of, no_cache
from ..stimuli import tokens_of
from .graph import Graph
from .qk import Side, record_qk_norms
from .stream import Forward

ROUTES_MAX = 4096  # routes averaged in one call


GROUPED = 5  # components per side named in the grouped view (the rest summed in one line)


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

    KIND = "why"
    TABLE = "pairs"  # its table's key before format 1 (an alias of rows until 0.3)

    SCHEMA = {"experiment": str, "score": float, "sum": float, "difference": float, "rows": list, "totals": dict}

    model: str
    meta: WhyMeta
    score: float
    total: float
    pairs: list[dict]
    totals: dict
    weights: list[dict] | None = None  # per route: score, its row's log-sum-exp, the weight it carries

    def payload(self) -> dict:
        m = self.meta
        top = self.pairs[0] if self.pairs else None
        lines = [
            f"{m['head']}: score {self.score:+.4f} over {m['routes']} route(s) = Σ of every (query side, key side) "
            f"pair {self.total:+.4f} (difference {self.score - self.total:+.2e})"
        ]
        if top is not None:
            lines.append(f"largest pair: {_name(top['query_side'])} × {_name(top['key_side'])} {top['term']:+.4f}")
        if self.weights:
            lines.append(weights_said(self.weights))
        extra = {} if self.weights is None else {"route_weights": self.weights, "grouped": self.grouped()}
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
            **extra,
        }

    @classmethod
    def from_dict(cls, data: dict) -> WhyResult:
        meta = WhyMeta.from_dict(data["meta"])
        return cls(
            data["model"], meta, data["score"], data["sum"], data["rows"], data["totals"], data.get("route_weights")
        )

    def grouped(self, top: int = GROUPED) -> dict:
        """Each side's ``top`` components by |total| and the rest as one line: the lines sum to the score
        exactly (the pairs shown and "the rest of the pairs" likewise)."""
        out = {}
        for side in ("query_side", "key_side"):
            rows = self.totals[side]
            shown = [{"label": _name(r["component"]), "total": r["total"]} for r in rows[:top]]
            bias = self.totals.get("position_bias", 0.0)
            rest = self.total - bias - sum(r["total"] for r in rows[:top])
            out[side] = shown + [{"label": f"the other {max(0, len(rows) - top)} components", "total": rest}]
            if bias:
                out[side].append({"label": "position bias", "total": bias})
        out["pairs_rest"] = self.total - sum(p["term"] for p in self.pairs)
        return out


def weights_said(weights: list[dict]) -> str:
    """One line: what the split score means for attention — the weight it carries against its row."""
    if len(weights) == 1:
        w = weights[0]
        return (
            f"weight {w['weight']:.3f}: score {w['score']:+.3f} against its row's log-sum-exp {w['lse']:+.3f} "
            f"(log weight {w['score'] - w['lse']:+.3f})"
        )
    mean = sum(w["weight"] for w in weights) / len(weights)
    low, high = min(w["weight"] for w in weights), max(w["weight"] for w in weights)
    return f"weight {mean:.3f} on average over {len(weights)} routes ({low:.3f} to {high:.3f}) against their rows"


def _name(c: dict) -> str:
    return c["label"] + (f"@{c['position']}" if c.get("position") is not None else "")


HEAD = re.compile(r"([LE])(\d+)\.(x?)H(\d+)")


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

        fw = Forward(layout, graph) if layout is not None else contextlib.nullcontext()
        with record_qk_norms(loaded.attention_modules) as self.qk_norms:
            try:
                with torch.no_grad(), fw:
                    with routed(loaded, before_attend=[before], on_attend=[on]):  # any kernel: nothing is edited
                        loaded.model(**batch_of(loaded, ids), **no_cache(loaded))
            except _Enough:
                pass
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

    def row_weights(self, h: int, kvh: int, routes: list[tuple[int, int]]) -> list[dict]:
        """Per route: its score, its row's log-sum-exp over the keys the row may see (and the head's sink logit,
        where the model adds one), and the weight exp(score − lse) the route carries."""
        allowed = self.allowed(h)
        sinks = self.args.get("sinks")
        out = []
        for i, j in routes:
            keys = torch.arange(self.k.shape[2])
            row = (self.q[0, h, i].double() @ self.k[0, kvh].double().T) * self.scale
            row = self.capped(row + self.bias(h, torch.full_like(keys, i), keys))
            logits = row[allowed[i]]
            if sinks is not None:
                logits = torch.cat([logits, sinks.detach().reshape(-1)[h : h + 1].double()])
            lse = float(torch.logsumexp(logits, 0))
            score = float(row[j])
            out.append({"query": i, "key": j, "score": score, "lse": lse, "weight": float(torch.exp(row[j] - lse))})
        return out

    def bias(self, h: int, i, j) -> torch.Tensor:
        b = self.args.get("bias")
        return torch.zeros(len(i), dtype=torch.float64) if b is None else b.expand(1, -1, -1, -1)[0, h, i, j].double()

    def capped(self, s: torch.Tensor) -> torch.Tensor:
        c = self.args.get("softcap")
        return s if not c else c * torch.tanh(s / c)


def no_such_head(head: str, stream: str, sizes: dict[str, int], heads: int) -> InputError:
    """The refusal of a head the model lacks, naming the heads it has (an encoder's are E<layer>.H<head>)."""
    prefix = {"encoder": "E"}  # the decoder's (and a decoder-only model's) heads are L<layer>.H<head>
    have = [
        f"{prefix.get(name, 'L')}0.H0 … {prefix.get(name, 'L')}{n - 1}.H{heads - 1}" for name, n in sizes.items() if n
    ]
    if not sizes.get(stream):
        return InputError(f"head {head}: this model has no {stream}; its heads are {' and '.join(have)}", field="head")
    return InputError(
        f"head {head}: this model's {stream} has {sizes[stream]} layers × {heads} heads ({' and '.join(have)})",
        field="head",
    )


def receivers(graph: Graph, layout, head: str):
    """(the query head's q receiver, its kv head's k receiver, the attention) for L18.H6 / E2.H0 / L3.xH2."""
    side, layer, cross, h = HEAD.fullmatch(head).groups()
    layer, h = int(layer), int(h)
    stream = "encoder" if side == "E" else "decoder"
    stack = layout.stack(stream) if stream in layout.streams else []
    if layer >= len(stack) or h >= layout.heads:
        sizes = {name: len(layout.stack(name)) for name in layout.streams}
        raise no_such_head(head, stream, sizes, layout.heads)
    a = stack[layer].cross if cross else stack[layer].attn
    if a is None:
        raise InputError(f"head {head}: layer {layer} has no {'cross-' if cross else ''}attention", field="head")
    G = layout.heads // max(1, layout.kv_heads)
    labels = {r.label(): j for j, r in enumerate(graph.receivers)}
    where = f"{side}{layer}.{cross}"
    return labels[f"{where}H{h}.q"], labels[f"{where}KV{h // G}.k"], a


def existing(run: Recorded, h: int, wanted: list[tuple[int, int]], head: str, said: str) -> tuple[list, str]:
    """The routes of ``wanted`` that head ``h``'s own mask lets exist — a causal decoder's future keys, a window's
    far keys and padding have no score to split — in every stream alike (a Whisper decoder's as a text model's);
    refused naming the key when the mask forbids them all, the dropped ones said otherwise."""
    allowed = run.allowed(h)
    routes = [(i, j) for i, j in wanted if bool(allowed[i, j])]
    if not routes:
        raise InputError(
            f"no route asked for exists in {head}: its mask forbids them all (e.g. query {wanted[0][0]} → key "
            f"{wanted[0][1]}: a causal row sees only its own and earlier positions, a windowed one only its window)",
            field="key",
        )
    if len(routes) < len(wanted):
        said += f"; {len(wanted) - len(routes)} masked in this head (no score) left out"
    return routes, said


def result(s: WhySettings, run: Recorded, routes, said: str, sides: tuple, heads, tokens=None) -> WhyResult:
    """The split of the routes' mean score into (query part × key part) pairs, checked against the model's own
    score, with each side's totals: ``sides`` the query's and the key's split (split_side), ``heads`` the
    query head and its kv head."""
    loaded, (qs, ks) = run.loaded, sides
    h, kvh = heads
    terms, bias_term, actual, gap, rel = _split(run, s, routes, qs, ks, heads)
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
        tokens=tokens if tokens is not None else tokens_of(loaded.tokenizer, run.ids[0]),
        said=said + ("; components keyed by stream" if seq2seq else ""),
    )
    weights = run.row_weights(h, kvh, routes)
    return WhyResult(loaded.name, meta, float(actual.mean()), float(terms.sum()) + bias_term, pairs, totals, weights)


def _split(run: Recorded, s: WhySettings, routes, qs: Side, ks: Side, heads) -> tuple:
    """(terms [Cq + 1, Ck + 1] — the mean over routes of each (query part × key part) pair's share of the score,
    the position bias's share, the model's own scores [R], their largest difference from the split and its
    relative size); refused when the split misses the model's score by more than the split tolerance of the
    dtype the model computed q and k in (engine/tolerance.SPLIT_TOLERANCE)."""
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
    gap = float(((raw + bias) * factor - actual).abs().max())
    rel = gap / max(1.0, float(actual.abs().max()))
    if rel > split_tolerance(run.q.dtype):
        msg = f"{s.head}'s score split into pairs misses the model's by {gap:.3g}: not printed"
        raise InputError(msg, field="head")
    return terms, float((bias * factor).mean()), actual, gap, rel


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


__all__ = ["HEAD", "ROUTES_MAX", "Recorded", "WhyMeta", "WhyResult", "receivers", "result"]
