"""The routing report: one self-contained HTML page (no network), its data as JSON, PNG charts.

Size bound: attention weights are stored as 8-bit (weight·255, rounded). When all heads' full
matrices would exceed WEIGHT_BUDGET bytes, each row keeps only its top-k keys (k chosen to fit),
and the page states the mean and largest weight mass so dropped. Everything else is [L, H]
statistics, so the page stays under ~WEIGHT_BUDGET + 200 KB plus the text itself.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from html import escape
from importlib import resources
from pathlib import Path

import numpy as np

from ..engine.jsonable import strict
from ..read.capture import RoutingView
from ..read.roles import ROLES
from .jsonout import write_text
from .sections import insert

WEIGHT_BUDGET = 3_000_000  # bytes of attention weights embedded in the page


@dataclass
class Report:
    html: str
    data: dict

    def save(self, path) -> Path:
        return write_text(path, self.html)  # atomic: an earlier page at the path stays whole if this fails

    def _repr_html_(self) -> str:  # Jupyter: the page inline, in a sandboxed iframe (its scripts stay in it)
        return (
            f'<iframe srcdoc="{escape(self.html, quote=True)}" style="width:100%;height:900px;border:0" '
            'sandbox="allow-scripts"></iframe>'
        )


def pack_weights(weights: list[np.ndarray], budget: int = WEIGHT_BUDGET) -> dict:
    """8-bit weights, full or top-k per row, base64 per layer (all heads of the layer in one blob)."""
    L = len(weights)
    H, T, _ = weights[0].shape
    full_bytes = L * H * T * T
    if full_bytes <= budget:
        blobs = [base64.b64encode(np.round(w * 255).clip(0, 255).astype(np.uint8).tobytes()).decode() for w in weights]
        return {"format": "full", "T": T, "k": T, "layers": blobs, "dropped_mean": 0.0, "dropped_max": 0.0}
    k = max(1, min(T, budget // (L * H * T * 3)))  # 2 bytes index + 1 byte weight per kept entry
    blobs, dropped = [], []
    for w in weights:
        idx = np.argsort(-w, axis=-1)[..., :k]  # (H, T, k)
        val = np.take_along_axis(w, idx, -1)
        dropped.append(1 - val.sum(-1))
        rec = np.concatenate(
            [
                idx.astype("<u2").view(np.uint8).reshape(H, T, k, 2),
                np.round(val * 255).clip(0, 255).astype(np.uint8)[..., None],
            ],
            -1,
        )
        blobs.append(base64.b64encode(rec.tobytes()).decode())
    d = np.stack(dropped)
    return {
        "format": "topk",
        "T": T,
        "k": int(k),
        "layers": blobs,
        "dropped_mean": float(d.mean()),
        "dropped_max": float(d.max()),
    }


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
        "weights": pack_weights(view.weights),
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


def _readable(tokens: list[str]) -> list[str]:
    return [t.replace("Ġ", " ").replace("▁", " ").replace("Ċ", "\\n") for t in tokens]


def script_safe_json(data: dict) -> str:
    """JSON that cannot close its <script> element or open a comment: <, >, & become \\u escapes."""
    return (
        json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def render(data: dict) -> str:
    template = resources.files("attnroute.show").joinpath("report.html").read_text(encoding="utf-8")
    page_data = {**data, "role_info": [r.to_dict() for r in ROLES]}  # names and colours: one home, read/roles.py
    return template.replace("/*__DATA__*/null", script_safe_json(page_data))


def build(view: RoutingView, sections: list[str] = (), kv: dict | None = None) -> Report:
    """The page for a RoutingView (read.capture.routing_view gathers one), with extra ``sections``
    (show.sections.load_all: learn and experiment results) below its cards."""
    data = report_data(view, kv)
    page = render(data)
    return Report(insert(page, list(sections)) if sections else page, data)


__all__ = ["Report", "WEIGHT_BUDGET", "build", "pack_weights", "render", "report_data", "script_safe_json"]
