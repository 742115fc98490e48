"""`attnroute routes` shown: the table of the top routes, and its figure — the routes drawn on the tokens,
an arc from the key up to the query, its width the estimate's size, red where removing the route lowers
the metric, blue where it raises it."""

from __future__ import annotations

import numpy as np
from rich.table import Table

from .plotting import pyplot
from .text import agreement_text, signed

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


def routes_table(result: dict, rows: int = 20) -> Table:
    a = result["agreement"]["estimate_vs_exact"]
    title = f"top routes by |estimate| of {result['meta']['metric']} = {result['meta']['m']:.3f}"
    if a["spearman"] is not None:
        title += f" — estimate vs exact over {a['n']}: {agreement_text(a)}"
    t = Table(title=title)
    for col in ("layer", "head", "query → key", "weight", "norm-weighted", "estimate", "exact"):
        t.add_column(col)
    for r in result["routes"][:rows]:
        t.add_row(
            str(r["layer"]),
            str(r["head"]),
            f"{r['query']} {r['query_token']!r} → {r['key']} {r['key_token']!r}",
            f"{r['weight']:.3f}",
            signed(r["norm_weight"], "{:.2f}"),
            f"{r['estimate']:+.3f}",
            signed(r["exact"]),
        )
    return t


def routes_png(result: dict, path):
    plt = pyplot()
    tokens = result["meta"]["tokens"]
    routes = [r for r in result["routes"] if r.get("stream") is None][:20]
    T = len(tokens)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.42 * T), 3.6))
    big = max([abs(r["estimate"]) for r in routes] + [1e-9])
    for r in routes:
        i, j = r["query"], r["key"]
        xs = np.linspace(j, i, 40)
        h = 0.15 + 0.5 * abs(i - j) / max(1, T)
        ys = h * np.sin(np.linspace(0, np.pi, 40))
        ax.plot(
            xs,
            ys,
            color="#c0392b" if r["estimate"] < 0 else "#2e6fb7",
            lw=0.5 + 4 * abs(r["estimate"]) / big,
            alpha=0.75,
        )
    ax.set_xticks(range(T))
    ax.set_xticklabels([repr(t)[1:-1] for t in tokens], rotation=70, fontsize=7)
    ax.set_yticks([])
    ax.set_xlim(-0.5, T - 0.5)
    ax.set_ylim(-0.02, 0.8)
    ax.set_title(
        f"top routes by |estimate| of {result['meta']['metric']} (red: removing it lowers the metric)", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path


__all__ = ["ROUTE_COLUMNS", "TITLE", "routes_png", "routes_table"]
