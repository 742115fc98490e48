"""Terminal tables and markdown of the cost floor: the KV bill, the serving simulation, the
long-context bill. They take the dicts cost/ and bench/ return and print nothing themselves."""

from __future__ import annotations

from rich.table import Table

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


__all__ = ["bill_markdown", "bill_table", "kv_table", "simulate_table"]
