"""`attnroute knockout` shown: the table per window of layers and its figure — Δ p(target) and Δ loss per
window (the window's first layer on x), the route and its control side by side."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from ..read.experiments import KnockoutResult
from .plotting import pyplot

TITLE = "Route knockout: cut one route, layer window by layer window"


def windows_table(title: str, rows: list[dict], columns: dict[str, str]) -> Table:
    """One row per window of layers ("first–last"), then a column per format string over the row."""
    table = Table(title=title)
    for col in ("layers", *columns):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(f"{r['layers'][0]}–{r['layers'][1]}", *(fmt.format(**r) for fmt in columns.values()))
    return table


def knockout_table(result: KnockoutResult) -> Table:
    columns = {
        "Δp route": "{delta_p_route:+.4f}",
        "Δp control": "{delta_p_control:+.4f}",
        "Δ−log p route": "{delta_nll_route:+.4f}",
        "Δ−log p control": "{delta_nll_control:+.4f}",
    }
    title = f"p({result.target_token!r}) = {result.p_clean:.4f} clean"
    m = result.metric
    if m:  # your metric beside the built-in ones
        name = m["name"]
        columns.update(
            {f"Δ {name} route": "{delta_metric_route:+.4f}", f"Δ {name} control": "{delta_metric_control:+.4f}"}
        )
        title += f", {name} = {m['clean']:.4f} clean"
    return windows_table(title, result.table(), columns)


def knockout_png(result: KnockoutResult, path) -> Path:
    """Δ p(target) and Δ loss per window of layers (window start on x), route and control side by side."""
    plt = pyplot()
    rows = result.table()
    x = [r["layers"][0] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    a.plot(x, [r["delta_p_route"] for r in rows], marker="o", ms=3, label="route")
    a.plot(x, [r["delta_p_control"] for r in rows], marker="o", ms=3, color="#999", label="control (same length)")
    a.axhline(0, color="#ccc", lw=0.8)
    a.set_xlabel(f"first layer of the {result.window}-layer window")
    a.set_ylabel(f"Δ p({result.target_token!r})")
    a.legend(fontsize=8)
    b.plot(x, [r["delta_nll_route"] for r in rows], marker="o", ms=3, label="route")
    b.plot(x, [r["delta_nll_control"] for r in rows], marker="o", ms=3, color="#999", label="control")
    b.axhline(0, color="#ccc", lw=0.8)
    b.set_xlabel(f"first layer of the {result.window}-layer window")
    b.set_ylabel("Δ loss of the target, −log p (nats)")
    toks = result.tokens
    src = " ".join(toks[i] for i in result.queries)
    dst = " ".join(toks[i] for i in result.keys)
    fig.suptitle(f"{result.model}: knocking out {src!r} → {dst!r} (p clean {result.p_clean:.3f})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path if hasattr(path, "write") else Path(path)


__all__ = ["TITLE", "knockout_png", "knockout_table", "windows_table"]
