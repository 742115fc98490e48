"""`attnroute why` shown: the top (query side, key side) pairs and each side's totals, the sum checked; and
`attnroute composition`: the strongest head pairs by Q-, K- and V-composition."""

from __future__ import annotations

from rich.table import Table

from ..read.circuits import WhyResult
from ..read.circuits.composition import CompositionResult
from ..read.circuits.why_core import weights_said
from .plotting import pyplot
from .text import shortened, signed

TITLE = "Why a head attends where it does: its score split into query-side × key-side components"
DRAWN = 20  # pairs drawn at most

SIDE_ROWS = 8  # components listed per side


def _name(c: dict) -> str:
    at = f" @{c['position']}" if c.get("position") is not None else ""
    return f"{c['label']}{at}"


def why_tables(result: WhyResult) -> list[Table]:
    m = result.meta
    t = Table(title=f"why {m['head']} attends where it does")
    for col in ("query side", "key side", "term"):
        t.add_column(col, justify="right" if col == "term" else "left")
    for p in result.pairs:
        t.add_row(_name(p["query_side"]), _name(p["key_side"]), signed(p["term"]))
    cap = f" (soft-cap {m['softcap']:g}: terms scaled by the capped score over the raw)" if m["softcap"] else ""
    t.caption = (
        f"score {result.score:+.4f} (scale {m['scale']:.4g}{cap}) = Σ of every pair {result.total:+.4f}; "
        f"difference {result.score - result.total:+.2e}"
    )
    sides = Table(title="each component summed over the other side")
    for col in ("query side", "total", "key side", "total "):
        sides.add_column(col, justify="right" if col.startswith("total") else "left")
    q, k = result.totals["query_side"], result.totals["key_side"]
    for a, b in zip(q[:SIDE_ROWS], k[:SIDE_ROWS], strict=False):
        sides.add_row(a["component"]["label"], signed(a["total"]), b["component"]["label"], signed(b["total"]))
    tables = [t, sides]
    if result.weights is not None:  # the grouped view comes with the route's weight
        tables.append(_grouped(result))
    return tables


def _grouped(result: WhyResult) -> Table:
    """The score as a few lines per side: the largest components and the rest, summing to it exactly; under
    it the weight the route carries against its row."""
    g = result.grouped()
    t = Table(title=f"{result.meta.head}'s score {result.score:+.4f}, grouped: the largest components, then the rest")
    for col in ("query side", "sum", "key side", "sum "):
        t.add_column(col, justify="right" if col.startswith("sum") else "left")
    for a, b in zip(g["query_side"], g["key_side"], strict=False):
        t.add_row(a["label"], signed(a["total"]), b["label"], signed(b["total"]))
    t.caption = weights_said(result.weights) + f"; pairs not listed above sum to {g['pairs_rest']:+.4f}"
    return t


def why_png(result: WhyResult, path) -> None:
    """The top pairs as a graph: query-side components on the left, key-side on the right (each side's
    largest totals, top first), a line per pair coloured by sign (red +, blue −), its width |term|."""
    plt = pyplot()
    pairs = result.pairs[:DRAWN]
    left = list(dict.fromkeys(p["query_side"]["label"] for p in pairs))
    right = list(dict.fromkeys(p["key_side"]["label"] for p in pairs))
    n = max(len(left), len(right), 1)
    fig, ax = plt.subplots(figsize=(7.5, 1.2 + 0.32 * n))
    big = max([abs(p["term"]) for p in pairs] + [1e-12])
    for p in pairs:
        y0, y1 = left.index(p["query_side"]["label"]), right.index(p["key_side"]["label"])
        colour = "#d62728" if p["term"] > 0 else "#1f77b4"
        ax.plot([0, 1], [-y0, -y1], color=colour, lw=0.5 + 5 * abs(p["term"]) / big, alpha=0.75)
    for y, label in enumerate(left):
        ax.text(-0.03, -y, shortened(label), ha="right", va="center", fontsize=8)
    for y, label in enumerate(right):
        ax.text(1.03, -y, shortened(label), ha="left", va="center", fontsize=8)
    m = result.meta
    ax.set_title(
        f"{m['head']}: score {result.score:+.3f} = Σ pairs {result.total:+.3f} over {m['routes']} route(s)\n"
        "query side (left) × key side (right); red adds to the score, blue takes away",
        fontsize=9,
    )
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylim(-n + 0.5, 0.8)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def composition_table(result: CompositionResult, rows: int = 12) -> Table:
    """The strongest Q-, K- and V-composition pairs side by side."""
    t = Table(title=f"composition from the weights ({result.meta.definition})")
    for kind in ("Q", "K", "V"):
        t.add_column(f"{kind}: sender → receiver")
        t.add_column("score", justify="right")
    strongest = result.strongest()
    top = [strongest[k] for k in ("q", "k", "v")]
    for i in range(min(rows, max(len(x) for x in top))):
        cells = []
        for x in top:
            cells += [f"{x[i]['sender']} → {x[i]['receiver']}", f"{x[i]['score']:.3f}"] if i < len(x) else ["", ""]
        t.add_row(*cells)
    return t


__all__ = ["TITLE", "composition_table", "why_png", "why_tables"]
