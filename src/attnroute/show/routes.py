"""`attnroute routes` shown: the table of the top routes, and its figure — the routes drawn on the tokens,
an arc from the key up to the query, its width the estimate's size, red where removing the route lowers
the metric, blue where it raises it."""

from __future__ import annotations

import numpy as np
from rich.table import Table

from ..read.patching import RoutesResult
from .plotting import pyplot
from .text import agreement_text, signed, token_text

TITLE = "Route attribution: single query→key routes, estimated and verified"
ROUTE_COLUMNS = (
    "layer",
    "head",
    "query",
    "key",
    "query_token",
    "key_token",
    "weight",
    "norm_weight",
    "estimate",
    "exact",
)


def routes_tables(result: RoutesResult, rows: int = 20) -> list[Table]:
    """The top routes; when they end on an attention sink, the content routes after them (patching/sinks.py)."""
    tables = [routes_table(result, rows)]
    if result.content_routes:
        sink = ", ".join(f"{j} {token_text(t)}" for j, t in zip(result.sink["keys"], result.sink["tokens"]))
        title = f"content routes: the top routes to keys other than the sink ({sink}), by |estimate|"
        tables.append(routes_table(result, rows, key="content_routes", title=title))
    return tables


def routes_table(result: RoutesResult, rows: int = 20, key: str = "routes", title: str | None = None) -> Table:
    a, m = result.agreement["estimate_vs_exact"], result.meta
    if title is None:
        title = f"top routes by |estimate| of {m['metric']} = {m['m']:.3f}"
        if a["spearman"] is not None:
            title += f" — estimate vs exact over {a['n']}: {agreement_text(a)}"
    t = Table(title=title)
    shown = getattr(result, key)[:rows]
    widest = max([len(token_text(r[k])) for r in shown for k in ("query_token", "key_token")] + [5])
    for col in ("layer", "head", "query → key", "weight", "norm-weighted", "estimate", "exact"):
        t.add_column(col, min_width=min(widest, 32) if col == "query → key" else None)  # a token is never cut
    for r in shown:
        t.add_row(
            str(r["layer"]),
            str(r["head"]),
            f"{r['query']} {token_text(r['query_token'])} → {r['key']} {token_text(r['key_token'])}",
            f"{r['weight']:.3f}",
            signed(r["norm_weight"], "{:.2f}"),
            f"{r['estimate']:+.3f}",
            signed(r["exact"]),
        )
    return t


MAX_INCHES = 16.0  # the figure's width at most (1,760 px at 110 dpi), however long the text


def routes_png(result: RoutesResult, path):
    """The top routes as arcs from the key up to the query, each labelled with its head; the text is shown
    over the span the routes cover (a long text's untouched stretches are left out), at most MAX_INCHES wide."""
    plt = pyplot()
    tokens = result.meta["tokens"]
    routes = [r for r in result.routes if r.get("stream") is None][:20]
    shown = _span(routes, len(tokens))
    x_of = {t: n for n, t in enumerate(shown)}  # token position -> x
    fig, ax = plt.subplots(figsize=(min(MAX_INCHES, max(6.0, 0.42 * len(shown))), 3.8))
    big = max([abs(r["estimate"]) for r in routes] + [1e-9])
    for rank, r in enumerate(routes):
        a, b = x_of[r["key"]], x_of[r["query"]]
        xs = np.linspace(a, b, 40)
        h = 0.15 + 0.5 * abs(b - a) / max(1, len(shown))
        color = "#c0392b" if r["estimate"] < 0 else "#2e6fb7"
        ax.plot(
            xs, h * np.sin(np.linspace(0, np.pi, 40)), color=color, lw=0.5 + 4 * abs(r["estimate"]) / big, alpha=0.75
        )
        if rank < 8:  # the strongest routes say whose they are
            ax.text(
                (a + b) / 2, h + 0.01, f"L{r['layer']}.H{r['head']}", ha="center", va="bottom", fontsize=6, color=color
            )
    step = max(1, len(shown) // 60)
    ax.set_xticks(range(0, len(shown), step))
    ax.set_xticklabels(
        [f"{shown[n]}:{tokens[shown[n]]!r}"[:18] for n in range(0, len(shown), step)], rotation=70, fontsize=6
    )
    ax.set_yticks([])
    ax.set_xlim(-0.5, len(shown) - 0.5)
    ax.set_ylim(-0.02, 0.85)
    ax.set_title(
        f"top routes by |estimate| of {result.meta['metric']} (red: removing it lowers the metric; label: layer.head)",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path


def _span(routes: list[dict], T: int, context: int = 3) -> list[int]:
    """The token positions drawn: every route's key and query with ``context`` tokens around each, merged."""
    keep = set()
    for r in routes:
        for p in (r["key"], r["query"]):
            keep.update(range(max(0, p - context), min(T, p + context + 1)))
    return sorted(keep) or list(range(min(T, 40)))


__all__ = ["routes_tables", "ROUTE_COLUMNS", "TITLE", "routes_png", "routes_table"]
