"""The routing report: one self-contained HTML page (no network), its data as JSON, PNG charts.

Weights: every key of every row as 8-bit log codes (show/weights.py: 1e-6 … 1, ±2.8 %), causal layers
as their lower triangle, zlib-compressed. Past WEIGHT_BUDGET bytes of codes (texts far beyond 512
tokens), each row keeps its top-k keys (k chosen to fit) and the page states the mean and largest
mass so dropped. The page's script is show/components.js (shared with the explorer, serve/) and
show/report.js; its style show/page.css — inlined, so the page runs offline under a CSP that
allows no network at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape
from importlib import resources
from pathlib import Path

import numpy as np

from ..engine.jsonable import strict
from ..read.report import RoutingView
from ..read.roles import ROLES
from .jsonout import write_text
from .sections import insert
from .weights import log8_bytes, pack_log8, pack_topk

# bytes of weight codes before compression: a 512-token SmolLM2 page (30 × 9 heads, causal triangles,
# 35.5 MB of codes) keeps every key; the zlib-compressed blob is what the page carries
WEIGHT_BUDGET = 40_000_000


@dataclass(repr=False)
class Report:
    html: str
    data: dict

    def save(self, path) -> Path:
        return write_text(path, self.html)  # atomic: an earlier page at the path stays whole if this fails

    def __repr__(self) -> str:  # one line: the page is .html, its data .data
        return (
            f"<Report of {self.data.get('model')}: {len(self.data.get('tokens', []))} tokens, {len(self.html):,} bytes>"
        )

    def _repr_html_(self) -> str:  # Jupyter: the page inline, in a sandboxed iframe (its scripts stay in it)
        return (
            f'<iframe srcdoc="{escape(self.html, quote=True)}" style="width:100%;height:900px;border:0" '
            'sandbox="allow-scripts"></iframe>'
        )


def pack_weights(weights: list[np.ndarray], budget: int = WEIGHT_BUDGET) -> dict:
    """Every key of every row (log8 codes, show/weights.py) when their codes fit ``budget`` bytes; past it,
    each row's top k keys with k chosen to fit, and the dropped mass measured (the page states it)."""
    if log8_bytes(weights) <= budget:
        return pack_log8(weights)
    L = len(weights)
    H, Tq, T = weights[0].shape
    k = max(1, min(T, budget // (L * H * Tq * 3)))  # 2 bytes index + 1 byte code per kept entry
    return pack_topk(weights, k)


def report_data(view: RoutingView, kv: dict | None = None) -> dict:
    """The page's data (also its JSON): [L, H] statistics, roles, tokens, packed weights, and the KV card
    ``kv`` (cost.kv_card: computed by the caller, a cost floor's formula; None: no card)."""
    table = view.table
    tokens = _readable(view.tokens)
    cols = {c: np.nan_to_num(v, nan=0.0).round(5).tolist() for c, v in table.columns.items()}
    return {
        "model": table.model,
        "layers": table.layers,
        "heads": table.heads,
        "kv_heads": view.kv_heads,
        "tokens": tokens,
        "decoder_tokens": _readable(view.decoder_tokens) if view.decoder_tokens else None,
        "generated_from": view.generated_from,
        "attention": [table.attention_kind(layer) for layer in range(table.layers)],
        "stream_layer": [table.stream_layer(layer) for layer in range(table.layers)],
        "columns": cols,
        "roles": table.roles,
        "meta": strict(table.meta.to_dict()),  # numpy scalars as numbers, NaN as null: as in the JSON
        "has_effects": getattr(table.meta, "grad_vs_ablation", None) is not None,
        "no_effects": "ablation skipped (--no-ablation)",  # what the page says without them (the explorer: its words)
        "weights": pack_weights(view.weights),
        "value_norms": _norms(view.value_norms),
        "sink_keys": view.sink_keys if view.sink_keys is not None else [0],
        "kv": kv if kv is not None else {"unavailable": "no KV-cache card was computed for this page"},
        "corpus": corpus_card(view.corpus) if view.corpus is not None else None,
        "seconds": round(view.seconds, 1),
    }


CORPUS_STATISTICS = ("entropy_norm", "entropy", "sink_mass", "punct_mass", "local", "norm_mass")


def corpus_card(table) -> dict:
    """A corpus read's means, 95 % intervals and significant heads, for the page's error-bar card."""

    def grid(a):
        return [[None if np.isnan(v) else round(float(v), 5) for v in row] for row in a]

    meta = table.meta  # a CorpusMeta
    imp = meta.importance
    rows = []
    for layer, h, d in table.top("ablation_delta", min(20, len(imp.get("candidates", [])))):
        if np.isnan(d):
            continue
        ci, p = table["ablation_delta_ci"][layer, h], table["ablation_p_holm"][layer, h]
        rows.append(
            {
                "head": f"L{layer}.H{h}",
                "delta": round(float(d), 5),
                "ci": None if np.isnan(ci) else round(float(ci), 5),
                "p_holm": float(p),
                "significant": bool(p <= 0.05),
            }
        )
    note = (
        imp.get("note", "no per-document ablation in this read")
        if imp.get("n_significant") is None
        else f"{imp['n_significant']} of {len(imp['candidates'])} candidate heads change the loss significantly "
        f"({imp['test']}; {imp['correction']}); Michel et al. 2019: {imp['michel_et_al_2019']}."
    )
    return {
        "source": meta.corpus,
        "n_documents": meta.n_documents,
        "n_tokens": meta.n_tokens,
        "statistics": list(CORPUS_STATISTICS),
        "mean": {c: grid(table[c]) for c in CORPUS_STATISTICS},
        "ci": {c: grid(table[f"{c}_ci"]) for c in CORPUS_STATISTICS},
        "importance_rows": rows,
        "importance_note": note,
    }


def _norms(norms: list[np.ndarray] | None) -> list | None:
    """‖v_j W_O^h‖ per layer, head and key ([L][H][T], 4 significant digits): the page's
    value-norm-weighted maps (Kobayashi et al. 2020) multiply a row's weights by them."""
    if norms is None:
        return None
    # a layer without an output projection (NaN norms) has none: the page says so and shows raw weights
    return [None if not np.isfinite(n).all() else [[float(f"{x:.4g}") for x in row] for row in n] for n in norms]


def _readable(tokens: list[str]) -> list[str]:
    return [t.replace("Ġ", " ").replace("▁", " ").replace("Ċ", "\\n") for t in tokens]


def script_safe_json(data: dict) -> str:
    """JSON that cannot close its <script> element or open a comment: <, >, & become \\u escapes."""
    return (
        json.dumps(strict(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def asset(name: str) -> str:
    """A file of the page shipped in the package (show/components.js, page.css, …)."""
    return resources.files("attnroute.show").joinpath(name).read_text(encoding="utf-8")


def page(template: str, data: dict, parts: dict | None = None) -> str:
    """``template`` with the shared style and components and its own ``parts`` ({mark: asset}) inlined,
    then ``data`` in its data element — last, so no text in the data is ever taken for a mark."""
    out = (
        asset(template)
        .replace("/*__STYLE__*/", asset("page.css"))
        .replace("/*__COMPONENTS__*/", asset("components.js"))
    )
    for mark, name in (parts or {}).items():
        out = out.replace(mark, asset(name))
    page_data = {**data, "role_info": [r.to_dict() for r in ROLES]}  # names and colours: one home, read/roles.py
    return out.replace("/*__DATA__*/null", script_safe_json(page_data), 1)


def render(data: dict) -> str:
    return page("report.html", data, {"/*__REPORT__*/": "report.js"})


def build(view: RoutingView, sections: list[str] = (), kv: dict | None = None, heads=()) -> Report:
    """The page for a RoutingView (read.capture.routing_view gathers one), with extra ``sections``
    (show.sections.load_all: learn and experiment results) below its cards, opening on ``heads`` ([layer,
    head]: the ones the added results name, show.sections.opening) when there are any."""
    data = report_data(view, kv)
    if heads:
        data["open"] = {"heads": [list(h) for h in heads]}
    page = render(data)
    return Report(insert(page, list(sections)) if sections else page, data)


__all__ = [
    "Report",
    "WEIGHT_BUDGET",
    "asset",
    "build",
    "page",
    "pack_weights",
    "render",
    "report_data",
    "script_safe_json",
]
