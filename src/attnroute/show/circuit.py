"""`attnroute circuit` shown: the top edges, the faithfulness curve, and the circuit drawn as a graph —
layers left to right, each head a node at its height, the embedding at the left and the logits at the
right, edges coloured by the channel they enter (q, k, v, MLP, logits), their width the effect's size."""

from __future__ import annotations

import numpy as np
from rich.table import Table

from ..read.circuits import CircuitResult
from ..read.circuits.evaluate import zero_points_said
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
LABELLED = 12  # the strongest drawn edges whose two ends are named on the figure


def edge_rows(result: CircuitResult) -> list[dict]:
    """The edges as flat rows (the CSV)."""
    out = []
    for r in result.edges:
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


def circuit_tables(result: CircuitResult, rows: int = 15) -> list[Table]:
    m, c = result.meta, result.circuit
    t = Table(title=f"top edges by |exact| ({m['direction']}, {m['metric']}; estimate: {m['estimate']})")
    for col in ("edge", "exact Δ", "normalized", "estimate", "composition (weights)"):
        t.add_column(col)
    measured = sorted((r for r in result.edges if r["exact"] is not None), key=lambda r: -abs(r["exact"]))
    for r in measured[:rows]:
        comp = r.get("composition")
        cells = (plus_minus(r["exact"], r["exact_ci"]), signed(r["normalized"]), signed(r["estimate"]))
        t.add_row(r["label"], *cells, "" if comp is None else f"{comp:.3f}")
    t.caption = settle_said(m["exact"], m["top"], "edges", "raise --limit, or name edges with --edges")
    areas = "no gap: CPR, CMD undefined" if c["cpr"] is None else f"CPR {c['cpr']:.3f}, CMD {c['cmd']:.3f}"
    curve = Table(title=f"faithfulness of the top k edges (ablation: {c['ablation']}; {areas})")
    for col in ("k", "share of edges", "faithfulness", "M"):
        curve.add_column(col, justify="right")
    for p in c["curve"]:
        curve.add_row(
            f"{p['k']:,}", f"{p['fraction']:.1%}", plus_minus(p["faithfulness"], p["faithfulness_ci"]), f"{p['m']:.3f}"
        )
    curve.caption = _checks_said(c) + (f"; {zeros}" if (zeros := zero_points_said(c["curve"])) else "")
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


def circuit_png(result: CircuitResult, path):
    """The chosen circuit (its DRAWN strongest edges) as a graph over layers × heads; an encoder–decoder's
    encoder blocks first, then its decoder's, each decoder block's cross-attention beside its self-attention."""
    plt = pyplot()
    m, c = result.meta, result.circuit
    rows = result.edges
    idx = c["chosen"].get("edges") or list(range(min(DRAWN, len(rows))))
    shown = sorted((rows[i] for i in idx), key=lambda r: -abs(_value(r)))[:DRAWN]
    place = Places(m)
    fig, ax = plt.subplots(figsize=(min(16.0, 4 + 0.35 * place.L), 5.2))
    big = max([abs(_value(r)) for r in shown] + [1e-9])
    for r in shown:
        (x0, y0), (x1, y1) = place.of(r["sender"]), place.of(r["receiver"])
        colour = CHANNEL_COLOURS[r["receiver"]["channel"] or r["receiver"]["kind"]]
        ax.plot([x0, x1], [y0, y1], color=colour, lw=0.4 + 4 * abs(_value(r)) / big, alpha=0.7)
    ax.scatter(*zip(*place.grid()), s=6, color="#bbbbbb", zorder=0)
    for (x, y), name in node_labels(shown, place).items():  # the strongest edges' ends, named
        ax.annotate(name, (x, y), xytext=(3, 3), textcoords="offset points", fontsize=6.5, color="#222222")
    if place.n_enc:
        ax.axvline(place.n_enc - 0.75, color="#999999", lw=0.6, ls="--")
        ax.text(place.n_enc - 0.75, -1.4, "encoder | decoder", ha="center", fontsize=7, color="#666666")
    for name, colour in CHANNEL_COLOURS.items():
        ax.plot([], [], color=colour, label=name)
    ax.legend(fontsize=7, loc="upper left", ncol=5, frameon=False)
    ax.set_xlim(-1.6, place.L + 0.6)
    ax.set_ylim(-1.5, place.H + 0.5)
    ax.set_xlabel(place.xlabel, fontsize=8)
    ax.set_ylabel("head (MLPs below)", fontsize=8)
    k = c["chosen"].get("k")
    what = f"the smallest circuit reaching {c['target']:.2f}: {k:,} edges" if k is not None else "the top edges"
    ax.set_title(f"{what} ({len(shown)} strongest drawn) — {m['metric']}, {m['n_prompts']} prompts", fontsize=9)
    fig.savefig(path, dpi=110, format="png", bbox_inches="tight")
    plt.close(fig)
    return path


def node_labels(shown: list[dict], place: Places, n: int = LABELLED) -> dict[tuple[float, float], str]:
    """Where each end of the ``n`` strongest drawn edges sits -> its name as the edge labels say it (a receiver
    without its channel: one name per node, however many of its channels the edges enter)."""
    names: dict[tuple[float, float], str] = {}
    for r in sorted(shown, key=lambda r: -abs(_value(r)))[:n]:
        sender, receiver = r["label"].split(">", 1)
        for node, name in (
            (r["sender"], sender),
            (r["receiver"], receiver.rsplit(".", 1)[0] if r["receiver"].get("channel") else receiver),
        ):
            names.setdefault(place.of(node), name)
    return names


def _value(r: dict) -> float:
    return r["exact"] if r["exact"] is not None else r["estimate"]


class Places:
    """(x, y) of every node: x its block (a receiver reads at the block's start, a sender writes later in it),
    y its head (a kv head at the middle of its group; MLPs below). One stream: block i at x = i. Two: the
    encoder's blocks at 0 … E − 1, the decoder's at E …, its cross-attention read and written right of its
    self-attention (a cross key/value receiver sits in the decoder block that reads it)."""

    def __init__(self, meta):  # CircuitMeta (read like its JSON)
        self.L, self.H = meta["layers"], meta["heads"]
        self.G = self.H // max(1, meta["kv_heads"])
        self.n_enc = int((meta.get("stream_layers") or {}).get("encoder", 0)) if len(meta["streams"]) > 1 else 0
        self.xlabel = (
            "block: encoder, then decoder (embeddings at each stack's left, logits at the right)"
            if self.n_enc
            else "layer (embedding at the left, logits at the right)"
        )

    def _x0(self, node: dict) -> float:
        decoder = node.get("stream") == "decoder" or node.get("attention") == "cross"
        return float(node["layer"]) + (self.n_enc if decoder else 0)

    def of(self, node: dict) -> tuple[float, float]:
        kind = node["kind"]
        if kind == "embed":
            return (self.n_enc - 0.55 if node.get("stream") == "decoder" and self.n_enc else -1.0), self.H / 2
        if kind == "logits":
            return float(self.L), self.H / 2
        x0 = self._x0(node)
        if kind == "mlp":
            return x0 + (0.75 if self.n_enc else 0.3), -1.0
        cross = node.get("attention") == "cross"
        head = node["head"] if node.get("channel") in (None, "q") else node["head"] * self.G + (self.G - 1) / 2
        step = (0.35, 0.55) if cross else (-0.1, 0.3)  # (read, write) within the block
        return x0 + step["channel" not in node], float(np.clip(head, 0, self.H - 1))

    def grid(self) -> list[tuple[float, float]]:
        """Every head's writing place (self-attention; a decoder block's cross-attention too)."""
        nodes = [{"kind": "head", "layer": i, "head": h} for i in range(self.L) for h in range(self.H)]
        if self.n_enc:
            dec = self.L - self.n_enc
            nodes = [{**n, "stream": "encoder"} for n in nodes if n["layer"] < self.n_enc] + [
                {"kind": "head", "layer": i, "head": h, "stream": "decoder", "attention": a}
                for i in range(dec)
                for h in range(self.H)
                for a in ("self", "cross")
            ]
        return [self.of(n) for n in nodes]


__all__ = ["EDGE_COLUMNS", "TITLE", "circuit_png", "circuit_tables", "edge_rows", "node_labels"]
