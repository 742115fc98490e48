"""`attnroute circuit` shown: the top edges, the faithfulness curve, and the circuit drawn as a graph —
layers left to right, each head a node at its height, the embedding at the left and the logits at the
right, edges coloured by the channel they enter (q, k, v, MLP, logits), their width the effect's size."""

from __future__ import annotations

import numpy as np
from rich.table import Table

from ..read.ground.settle import settle_said
from .plotting import pyplot
from .text import plus_minus, signed

TITLE = "Circuit: which head feeds which, and the smallest set of edges that carries the behaviour"
CHANNEL_COLOURS = {"q": "#2e6fb7", "k": "#e08a1e", "v": "#2e9d57", "mlp": "#7f7f7f", "logits": "#8e44ad"}
EDGE_COLUMNS = (
    "label",
    "sender_kind",
    "sender_layer",
    "sender_head",
    "receiver_kind",
    "receiver_layer",
    "receiver_head",
    "channel",
    "estimate",
    "estimate_ci",
    "exact",
    "exact_ci",
    "normalized",
    "composition",
)
DRAWN = 60  # edges drawn at most (the strongest of the chosen circuit)


def edge_rows(result: dict) -> list[dict]:
    """The edges as flat rows (the CSV)."""
    out = []
    for r in result["edges"]:
        s, c = r["sender"], r["receiver"]
        out.append(
            {
                "label": r["label"],
                **{f"sender_{k}": s[k] for k in ("kind", "layer", "head")},
                **{f"receiver_{k}": c[k] for k in ("kind", "layer", "head")},
                "channel": c["channel"],
                **{k: r[k] for k in ("estimate", "estimate_ci", "exact", "exact_ci", "normalized")},
                "composition": r.get("composition"),
            }
        )
    return out


def circuit_tables(result: dict, rows: int = 15) -> list[Table]:
    m, c = result["meta"], result["circuit"]
    t = Table(title=f"top edges by |exact| ({m['direction']}, {m['metric']}; estimate: {m['estimate']})")
    for col in ("edge", "exact Δ", "normalized", "estimate", "composition (weights)"):
        t.add_column(col)
    measured = sorted((r for r in result["edges"] if r["exact"] is not None), key=lambda r: -abs(r["exact"]))
    for r in measured[:rows]:
        comp = r.get("composition")
        cells = (plus_minus(r["exact"], r["exact_ci"]), signed(r["normalized"]), signed(r["estimate"]))
        t.add_row(r["label"], *cells, "" if comp is None else f"{comp:.3f}")
    t.caption = settle_said(m["exact"], m["top"], "edges", "raise --limit, or name edges with --edges")
    curve = Table(
        title=f"faithfulness of the top k edges (ablation: {c['ablation']}; CPR {c['cpr']:.3f}, CMD {c['cmd']:.3f})"
    )
    for col in ("k", "share of edges", "faithfulness", "M"):
        curve.add_column(col, justify="right")
    for p in c["curve"]:
        curve.add_row(
            f"{p['k']:,}", f"{p['fraction']:.1%}", plus_minus(p["faithfulness"], p["faithfulness_ci"]), f"{p['m']:.3f}"
        )
    curve.caption = _checks_said(c)
    return [t, curve]


def _checks_said(c: dict) -> str:
    full, empty, ch = c["checks"]["full"], c["checks"]["empty"], c["chosen"]
    said = f"full set {full['m']:.4f} (clean {full['clean']:.4f})"
    said += f", empty set {empty['m']:.4f}" + (f" (corrupt {empty['corrupt']:.4f})" if "corrupt" in empty else "")
    if ch.get("k") is not None:
        spread = ch["per_prompt"]
        said += (
            f"; smallest reaching {c['target']:.2f}: {ch['k']:,} edges (faithfulness {ch['faithfulness']:.2f}; per "
            f"prompt median {spread.get('median', float('nan')):.2f}, {spread.get('below_0', 0):.0%} below 0)"
        )
    return said


def circuit_png(result: dict, path):
    """The chosen circuit (its DRAWN strongest edges) as a graph over layers × heads."""
    plt = pyplot()
    m, c = result["meta"], result["circuit"]
    rows = result["edges"]
    idx = c["chosen"].get("edges") or list(range(min(DRAWN, len(rows))))
    shown = sorted((rows[i] for i in idx), key=lambda r: -abs(_value(r)))[:DRAWN]
    L, H, G = m["layers"], m["heads"], m["heads"] // max(1, m["kv_heads"])
    fig, ax = plt.subplots(figsize=(min(16.0, 4 + 0.35 * L), 5.2))
    big = max([abs(_value(r)) for r in shown] + [1e-9])
    for r in shown:
        (x0, y0), (x1, y1) = _where(r["sender"], L, H), _where(r["receiver"], L, H, G)
        colour = CHANNEL_COLOURS[r["receiver"]["channel"] or r["receiver"]["kind"]]
        ax.plot([x0, x1], [y0, y1], color=colour, lw=0.4 + 4 * abs(_value(r)) / big, alpha=0.7)
    ax.scatter(
        *zip(*[_where({"kind": "head", "layer": l, "head": h}, L, H) for l in range(L) for h in range(H)]),
        s=6,
        color="#bbbbbb",
        zorder=0,
    )
    for name, colour in CHANNEL_COLOURS.items():
        ax.plot([], [], color=colour, label=name)
    ax.legend(fontsize=7, loc="upper left", ncol=5, frameon=False)
    ax.set_xlim(-1.6, L + 0.6)
    ax.set_ylim(-1.5, H + 0.5)
    ax.set_xlabel("layer (embedding at the left, logits at the right)", fontsize=8)
    ax.set_ylabel("head (MLPs below)", fontsize=8)
    k = c["chosen"].get("k")
    what = f"the smallest circuit reaching {c['target']:.2f}: {k:,} edges" if k is not None else "the top edges"
    ax.set_title(f"{what} ({len(shown)} strongest drawn) — {m['metric']}, {m['n_prompts']} prompts", fontsize=9)
    fig.savefig(path, dpi=110, format="png", bbox_inches="tight")
    plt.close(fig)
    return path


def _value(r: dict) -> float:
    return r["exact"] if r["exact"] is not None else r["estimate"]


def _where(node: dict, L: int, H: int, G: int = 1) -> tuple[float, float]:
    """(x, y) of a node: x its layer (a receiver reads at the layer's start, a sender writes at its end)."""
    kind = node["kind"]
    if kind == "embed":
        return -1.0, H / 2
    if kind == "logits":
        return float(L), H / 2
    if kind == "mlp":
        return node["layer"] + 0.3, -1.0
    head = (
        node["head"] if node.get("channel") in (None, "q") else node["head"] * G + (G - 1) / 2
    )  # a kv head: its group
    return node["layer"] + (0.3 if "channel" not in node else -0.1), float(np.clip(head, 0, H - 1))


__all__ = ["EDGE_COLUMNS", "TITLE", "circuit_png", "circuit_tables", "edge_rows"]
