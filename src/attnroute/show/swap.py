"""`attnroute swap` shown: the table per window of layers and its figure — KL of the swapped output from
B's own and from A's, per window."""

from __future__ import annotations

from rich.table import Table

from ..read.experiments import SwapResult
from .knockout import windows_table
from .plotting import pyplot

TITLE = "Map swap: prompt B run with prompt A's attention maps"


def swap_table(result: SwapResult) -> Table:
    columns = {
        "KL(swapped ‖ B)": "{kl_from_b:.4f}",
        "KL(swapped ‖ A)": "{kl_from_a:.4f}",
        "p(A's top)": "{p_top_a:.4f}",
        "p(B's top)": "{p_top_b:.4f}",
    }
    title = f"top token: A {result.top_a!r}, B {result.top_b!r}"
    m = result.metric
    if m:
        columns[f"Δ {m['name']}"] = "{delta_metric:+.4f}"
        title += f"; {m['name']}: B {m['b']:.4f}, A {m['a']:.4f}"
    return windows_table(title, result.rows, columns)


def swap_png(result: SwapResult, path):
    """KL of the swapped output from B's own and from A's, per window of layers."""
    plt = pyplot()
    rows = result.rows
    x = [r["layers"][0] for r in rows]
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    ax.plot(x, [r["kl_from_b"] for r in rows], marker="o", ms=3, label="KL(swapped ‖ B)")
    ax.plot(x, [r["kl_from_a"] for r in rows], marker="o", ms=3, color="#999", label="KL(swapped ‖ A)")
    ax.set_xlabel(f"first layer of the {result.window}-layer window")
    ax.set_ylabel("nats")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path


__all__ = ["TITLE", "swap_png", "swap_table"]
