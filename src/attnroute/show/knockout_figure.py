"""The route-knockout figure: effect per window of layers, the route against its control."""

from __future__ import annotations

from pathlib import Path

from .plotting import pyplot


def knockout_png(result: dict, path) -> Path:
    """Δ p(target) and Δ loss per window of layers (window start on x), route and control side by side."""
    plt = pyplot()
    rows = result["windows"]
    x = [r["layers"][0] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    a.plot(x, [r["delta_p_route"] for r in rows], marker="o", ms=3, label="route")
    a.plot(x, [r["delta_p_control"] for r in rows], marker="o", ms=3, color="#999", label="control (same length)")
    a.axhline(0, color="#ccc", lw=0.8)
    a.set_xlabel(f"first layer of the {result['window']}-layer window")
    a.set_ylabel(f"Δ p({result['target']['token']!r})")
    a.legend(fontsize=8)
    b.plot(x, [r["delta_nll_route"] for r in rows], marker="o", ms=3, label="route")
    b.plot(x, [r["delta_nll_control"] for r in rows], marker="o", ms=3, color="#999", label="control")
    b.axhline(0, color="#ccc", lw=0.8)
    b.set_xlabel(f"first layer of the {result['window']}-layer window")
    b.set_ylabel("Δ loss of the target, −log p (nats)")
    toks = result["tokens"]
    route = result["route"]
    src = " ".join(toks[i] for i in route["queries"])
    dst = " ".join(toks[i] for i in route["keys"])
    fig.suptitle(f"{result['model']}: knocking out {src!r} → {dst!r} (p clean {result['p_target_clean']:.3f})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path if hasattr(path, "write") else Path(path)


def needle_png(result: dict, path) -> Path:
    """Weight of the last query on the needle per context length: the retrieval heads, the best head,
    and whether the model still answered (filled = answered)."""
    plt = pyplot()
    rows = result["lengths"]
    x = [r["length"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    for i, (layer, head) in enumerate(result["retrieval_heads"]):
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
    fig.suptitle(f"{result['model']}: needle retrieval (markers at the bottom: answered o / missed x)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path if hasattr(path, "write") else Path(path)


__all__ = ["knockout_png", "needle_png"]
