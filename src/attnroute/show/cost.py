"""`attnroute cost` shown: the KV bill, the serving simulation and the long-context bill as terminal tables
and markdown, and their figures (memory over time; time and memory against length). They take the dicts
cost/ and bench/ return and print nothing themselves."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from ..cost.long_context import VARIANTS
from .plotting import pyplot
from .units import fmt_bytes

BILL_TITLE = "the bill of long context: one call, B=1, H=8, D=64, fp32 (window W=256, ProbSparse c=5)"
BILL_COLUMNS = ("T", "variant", "FLOPs (formula)", "time", "GFLOP/s", "extra memory: formula", "measured")


def kv_table(result: dict) -> Table:
    """`attnroute cost kv`: bytes per layer per token, per token, for the batch, and the weights."""
    sliding = result.get("sliding_layers", 0)
    windows = {w for w in result.get("layer_windows", []) if w}
    window = (
        f", window {result['window']}"
        if result["window"]
        else f", {sliding} of {result['layers']} layers slide over {', '.join(map(str, sorted(windows)))} tokens"
        if sliding
        else ""
    )
    t = Table(
        title=f"KV cache: {result['source']}, {result['layers']} layers × {result['kv_heads']} kv heads × "
        f"{result['head_dim']} dims, {result['dtype']}{window}"
    )
    t.add_column("quantity")
    t.add_column("bytes", justify="right")
    t.add_row("per layer per token (2 · Hkv · D · bytes)", fmt_bytes(result["bytes_per_layer_per_token"], exact=True))
    t.add_row("per token (× layers)", fmt_bytes(result["bytes_per_token"], exact=True))
    t.add_row(f"batch {result['batch']} × {result['context']:,} tokens", fmt_bytes(result["cache_bytes"], exact=True))
    t.add_row("weights", fmt_bytes(result["weight_bytes"], exact=True))
    return t


def fit_table(result: dict) -> Table:
    """`attnroute cost fit`: each verb's predicted peak, its parts, and whether it fits."""
    memory = result["device_memory"]
    where = f"{fmt_bytes(memory)} of {result['device']} memory" if memory else f"{result['device']} memory unknown"
    tokens = f"{result['tokens']:,} tokens" if result["tokens"] else "the measured lengths"
    t = Table(title=f"Will it fit: {result['model']} in {result['dtype']}, {tokens}, {where}")
    for name in ("verb", "weights", "runtime", "working", "predicted peak", "verdict"):
        t.add_column(name, justify="left" if name in ("verb", "verdict") else "right")
    for r in result["rows"]:
        cells = [fmt_bytes(r[k]) for k in ("weights", "runtime", "working", "peak")]
        on = f" (at {r['calibrated_on']}: more prompts hold more)" if r.get("calibrated_on") else ""
        t.add_row(r["verb"], *cells, r["verdict"] + on)
    return t


def simulate_table(data: dict, budget_gb: float) -> Table:
    """`attnroute cost simulate`: one row per policy."""
    t = Table(
        title=f"{data['requests']}; {data['model']}, {data['bytes_per_token']:,} B/token → "
        f"{data['capacity_tokens']:,} token slots in {budget_gb} GB; max_len {data['max_len']}, "
        f"block {data['block_size']}"
    )
    for col in ("policy", "KV memory holding real tokens", "waste", "largest batch", "steps", "preemptions"):
        t.add_column(col, justify="right")
    for r in data["policies"]:
        t.add_row(
            r["policy"],
            f"{r['real_share']:.1%}",
            f"{r['waste']:.1%}",
            str(r["max_batch"]),
            str(r["steps"]),
            str(r["preemptions"]),
        )
    return t


def _bill_cells(r: dict) -> list[str]:
    return [
        str(r["T"]),
        r["variant"],
        f"{r['flops'] / 1e9:.2f} G",
        f"{r['seconds'] * 1e3:.1f} ms",
        f"{r['gflops_per_s']:.1f}",
        fmt_bytes(r["predicted_bytes"]),
        fmt_bytes(r["peak_extra_bytes"]),
    ]


def bill_table(data: list[dict]) -> Table:
    """`attnroute cost bill`: formula beside measurement for every variant and length."""
    t = Table(title=BILL_TITLE)
    for col in BILL_COLUMNS:
        t.add_column(col, justify="right")
    for r in data:
        t.add_row(*_bill_cells(r))
    return t


def bill_markdown(data: list[dict]) -> str:
    lines = [
        "| T | variant | FLOPs (formula) | time | GFLOP/s | extra memory (formula) | measured |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    lines += ["| " + " | ".join(_bill_cells(r)) + " |" for r in data]
    return "\n".join(lines)


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


__all__ = ["bill_markdown", "bill_png", "bill_table", "kv_table", "serving_png", "simulate_table"]
