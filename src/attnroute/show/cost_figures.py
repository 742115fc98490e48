"""Figures of the cost floor (matplotlib, headless): the serving simulation and the long-context bill.

Each takes the data the cost/bench floors computed and writes one PNG where the caller says.
"""

from __future__ import annotations

from pathlib import Path

from ..cost.long_context import VARIANTS
from .plotting import pyplot


def serving_png(results, path, capacity_tokens: int) -> Path:
    """Share of reserved KV memory holding real tokens, and the concurrent batch, per decode step."""
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    for r in results:
        t = [x[0] for x in r.timeline]
        a.plot(t, [x[2] / x[1] for x in r.timeline], label=f"{r.policy} (mean {r.real_share:.0%})")
        b.plot(t, [x[3] for x in r.timeline], label=r.policy)
    a.set_xlabel("decode step")
    a.set_ylabel("reserved KV memory holding real tokens")
    a.set_ylim(0, 1.05)
    a.legend(fontsize=8)
    b.set_xlabel("decode step")
    b.set_ylabel("concurrent requests")
    b.legend(fontsize=8)
    fig.suptitle(f"serving under a budget of {capacity_tokens:,} token slots")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path if hasattr(path, "write") else Path(path)


def bill_png(data: list[dict], path) -> Path:
    """Time and peak extra memory against length, each measurement beside its formula."""
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for v in VARIANTS:
        r = [x for x in data if x["variant"] == v]
        T = [x["T"] for x in r]
        (line,) = a.loglog(T, [x["seconds"] for x in r], "o-", label=f"{v} measured")
        scale = r[-1]["seconds"] / r[-1]["flops"]  # the formula, pinned to the longest measurement
        a.loglog(T, [x["flops"] * scale for x in r], "--", color=line.get_color(), alpha=0.6, label=f"{v} ∝ FLOPs")
        # measurements under 0.1 MiB (allocator reuse) are drawn at 0.1 MiB
        b.loglog(
            T,
            [max(0.1, (x["peak_extra_bytes"] or 0) / 2**20) for x in r],
            "o-",
            color=line.get_color(),
            label=f"{v} measured",
        )
        b.loglog(
            T, [x["predicted_bytes"] / 2**20 for x in r], "--", color=line.get_color(), alpha=0.6, label=f"{v} formula"
        )
    a.set_xlabel("sequence length T (tokens)")
    a.set_ylabel("time per call (s)")
    a.legend(fontsize=7)
    b.set_xlabel("sequence length T (tokens)")
    b.set_ylabel("peak extra memory (MiB)")
    b.legend(fontsize=7)
    fig.suptitle("the bill of long context: B=1, H=8, D=64, fp32, W=256, ProbSparse c=5")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path if hasattr(path, "write") else Path(path)
