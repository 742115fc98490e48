"""`attnroute needle` shown: the table per context length and its figure — the last query's weight on the
needle per length (the retrieval heads, the best head), whether the model still answered."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from ..read.experiments import NeedleResult
from .plotting import pyplot

TITLE = "Dilution: a needle in growing context"


def needle_table(result: NeedleResult) -> Table:
    heads = [list(h) for h in result.retrieval_heads]  # written as the JSON writes them
    table = Table(title=f"needle retrieval, retrieval heads {heads}")
    for col in ("tokens", "answered", "answer", "weight on needle (retrieval heads)", "entropy", "best head"):
        table.add_column(col)
    for r in result.lengths:
        best = r["best_head"]
        table.add_row(
            str(r["length"]),
            "yes" if r["answered"] else "no",
            repr(r["answer"]),
            " ".join(f"{h['needle_weight']:.3f}" for h in r["retrieval_heads"]),
            " ".join(f"{h['entropy']:.2f}" for h in r["retrieval_heads"]),
            f"L{best['layer']}.H{best['head']} {best['needle_weight']:.3f}",
        )
    return table


def needle_png(result: NeedleResult, path) -> Path:
    """Weight of the last query on the needle per context length: the retrieval heads, the best head,
    and whether the model still answered (filled = answered)."""
    plt = pyplot()
    rows = result.lengths
    x = [r["length"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    for i, (layer, head) in enumerate(result.retrieval_heads):
        a.plot(x, [r["retrieval_heads"][i]["needle_weight"] for r in rows], marker="o", ms=3, label=f"L{layer}.H{head}")
        b.plot(x, [r["retrieval_heads"][i]["entropy"] for r in rows], marker="o", ms=3, label=f"L{layer}.H{head}")
    a.plot(x, [r["best_head"]["needle_weight"] for r in rows], ls="--", color="#999", label="best head at each length")
    for r in rows:
        a.scatter(
            [r["length"]], [0.02], marker="o" if r["answered"] else "x", color="green" if r["answered"] else "red"
        )
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context length (tokens)")
    a.set_ylabel("last query's weight on the needle")
    a.set_ylim(0, 1.02)
    b.set_ylabel("entropy of that row (nats)")
    a.legend(fontsize=7)
    fig.suptitle(f"{result.model}: needle retrieval (markers at the bottom: answered o / missed x)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path if hasattr(path, "write") else Path(path)


__all__ = ["TITLE", "needle_png", "needle_table"]
