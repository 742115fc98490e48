"""`attnroute bench` shown: the engine's backends beside torch SDPA, ProbSparse, decoding with the KV cache,
and the read benchmark's tables — in the terminal and as the README's markdown."""

from __future__ import annotations

import statistics

from rich.table import Table

from .units import fmt_bytes


def bench_tables(result: dict) -> list[Table]:
    s = result["settings"]
    t = Table(
        title=f"attention backends: B={s['B']}, H={s['H']}, D={s['D']}, {s['mask']}, {s['dtype']}, "
        f"{s['threads']} threads"
    )
    for col in ("T", "impl", "time", "× sdpa time", "peak extra memory", "× eager memory"):
        t.add_column(col, justify="right")
    for r in result["backends"]:
        mem = "" if r["memory_vs_eager"] is None else f"{r['memory_vs_eager']:.3f}"
        t.add_row(
            str(r["T"]),
            r["impl"],
            f"{r['seconds'] * 1e3:.1f} ms",
            f"{r['time_vs_sdpa']:.2f}",
            fmt_bytes(r["peak_extra_bytes"]),
            mem,
        )
    p = Table(title="ProbSparse (factor 5, no mask) against full attention (torch SDPA)")
    for col in ("T", "full", "ProbSparse", "speed-up", "relative error ‖Δ‖/‖full‖"):
        p.add_column(col, justify="right")
    for r in result["probsparse"]:
        p.add_row(
            str(r["T"]),
            f"{r['full_seconds'] * 1e3:.1f} ms",
            f"{r['probsparse_seconds'] * 1e3:.1f} ms",
            f"{r['speedup']:.2f}×",
            f"{r['relative_error']:.3f}",
        )
    g = result["generation"]
    d = Table(title=f"TinyTransformer decoding of {g['new_tokens']} tokens after a {g['prompt']}-token prompt")
    for col in ("KV cache", "recompute", "speed-up", "same tokens"):
        d.add_column(col, justify="right")
    d.add_row(
        f"{g['cached_seconds']:.2f} s", f"{g['recompute_seconds']:.2f} s", f"{g['speedup']:.1f}×", str(g["same_tokens"])
    )
    return [t, p, d]


def bench_markdown(result: dict) -> str:
    """The same figures as markdown, for the README."""
    s = result["settings"]
    lines = [
        f"B={s['B']}, H={s['H']}, D={s['D']}, {s['mask']}, {s['dtype']}, {s['threads']} threads, torch {s['torch']}",
        "",
        "| T | impl | time | × SDPA time | peak extra memory | × eager memory |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for r in result["backends"]:
        mem = "" if r["memory_vs_eager"] is None else f"{r['memory_vs_eager']:.3f}"
        lines.append(
            f"| {r['T']} | {r['impl']} | {r['seconds'] * 1e3:.1f} ms | {r['time_vs_sdpa']:.2f} | "
            f"{fmt_bytes(r['peak_extra_bytes'])} | {mem} |"
        )
    lines += [
        "",
        "| T | full (SDPA) | ProbSparse (c=5) | speed-up | relative error ‖Δ‖/‖full‖ |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in result["probsparse"]:
        lines.append(
            f"| {r['T']} | {r['full_seconds'] * 1e3:.1f} ms | {r['probsparse_seconds'] * 1e3:.1f} ms | "
            f"{r['speedup']:.2f}× | {r['relative_error']:.3f} |"
        )
    g = result["generation"]
    lines += [
        "",
        f"| decoding {g['new_tokens']} tokens after {g['prompt']} ({g.get('model', '')}) | KV cache | "
        "recompute | speed-up | same tokens |",
        "|---|---:|---:|---:|---|",
        f"| greedy | {g['cached_seconds']:.2f} s | {g['recompute_seconds']:.2f} s | {g['speedup']:.1f}× | "
        f"{g['same_tokens']} |",
    ]
    return "\n".join(lines)


def read_bench_markdown(result: dict) -> str:
    """The read benchmark's tables; a part that was not run (``--suite effects`` / ``long-context``
    without an earlier read.json) is left out."""
    lines = _effects_lines(result["effects"]) if "effects" in result else []
    if "long_context" in result:
        lines += _long_context_lines(result)
    return "\n".join(lines)


def _effects_lines(e: dict) -> list[str]:
    return [
        f"Ablation effects on SmolLM2 ({e['heads']} heads; {e['stimulus']}):",
        "",
        "| method | time | speed-up vs plain | agreement with exact |",
        "|---|---:|---:|---|",
        f"| plain: one forward per head (timed on {e['plain_heads_timed']} heads, scaled) | "
        f"{e['plain_seconds_all_heads']:.0f} s | 1.0× | — |",
        f"| attnroute exact sweep (residual reuse, batched copies) | {e['exact_seconds']:.0f} s | "
        f"{e['exact_speedup']:.1f}× | max abs diff {e['exact_vs_plain_max_abs_diff']:.1e} on the timed heads |",
        f"| attnroute gradient estimate (1 forward + 1 backward) | {e['estimate_seconds']:.1f} s | "
        f"{e['estimate_speedup']:.0f}× | top-10 overlap {e['top10_overlap']}/10, Spearman {e['spearman']:.2f} |",
        "",
    ]


def _long_context_lines(result: dict) -> list[str]:
    lines = ["| T | what | time | peak RSS |", "|---:|---|---:|---:|"]
    names = {
        "sdpa": "transformers SDPA forward (no weights)",
        "sdpa-body": "transformers SDPA forward of the model body (no LM head)",
        "sdpa-body-nocache": "the same with use_cache=False (as attnroute's statistics pass)",
        "eager": "transformers eager + output_attentions",
        "headtable": "attnroute HeadTable text statistics (fused)",
        "headtable-masses": "the same without entropy: masses, band, diagonals (fused)",
        "headtable-max": "attnroute HeadTable text statistics with max weight (blocked)",
    }
    for r in result["long_context"]:
        if "error" in r:
            lines.append(f"| {r['T']} | {names[r['mode']]} | failed: {r['error']} | |")
        else:
            lines.append(f"| {r['T']} | {names[r['mode']]} | {r['seconds']:.1f} s | {fmt_bytes(r['peak_rss_bytes'])} |")
    if result.get("ratios"):
        lines += [
            "",
            "Time against the SDPA forward of the body, alternating rounds in one process (median ÷ median):",
            "",
            "| T | what | rounds | attnroute | SDPA body | ratio |",
            "|---:|---|---:|---:|---:|---:|",
        ]
        for r in result["ratios"]:
            if "error" in r:
                lines.append(f"| {r['T']} | {names[r['mode']]} | | failed: {r['error']} | | |")
                continue
            own, base = _span(r["seconds"]), _span(r["baseline_seconds"])
            lines.append(f"| {r['T']} | {names[r['mode']]} | {r['rounds']} | {own} | {base} | {r['ratio']:.2f}× |")
    if rep := result.get("repeated"):
        lines += [
            "",
            f"Repeated-token probe (prev / duplicate / induction, seeds {rep['seeds']}; {rep['stimulus']}): "
            f"fused {rep['fused_seconds']:.2f} s, eager weights {rep['eager_seconds']:.2f} s, "
            f"largest difference {rep['max_abs_diff']:.1e}.",
        ]
    return lines


def _span(times: list[float]) -> str:
    """Median seconds, with the range when there are several rounds."""
    med = statistics.median(times)
    return f"{med:.1f} s" if len(times) == 1 else f"{med:.1f} s ({min(times):.1f}–{max(times):.1f})"


__all__ = ["bench_markdown", "bench_tables", "read_bench_markdown"]
