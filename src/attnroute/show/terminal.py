"""Terminal tables (rich)."""

from __future__ import annotations

from rich.table import Table


def fmt_bytes(n) -> str:
    if n is None:
        return "n/a"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def bench_tables(result: dict) -> list[Table]:
    s = result["settings"]
    t = Table(title=f"attention backends: B={s['B']}, H={s['H']}, D={s['D']}, {s['mask']}, {s['dtype']}, "
                    f"{s['threads']} threads")
    for col in ("T", "impl", "time", "× sdpa time", "peak extra memory", "× eager memory"):
        t.add_column(col, justify="right")
    for r in result["backends"]:
        mem = "" if r["memory_vs_eager"] is None else f"{r['memory_vs_eager']:.3f}"
        t.add_row(str(r["T"]), r["impl"], f"{r['seconds'] * 1e3:.1f} ms", f"{r['time_vs_sdpa']:.2f}",
                  fmt_bytes(r["peak_extra_bytes"]), mem)
    p = Table(title="ProbSparse (factor 5, no mask) against full attention (torch SDPA)")
    for col in ("T", "full", "ProbSparse", "speed-up", "relative error ‖Δ‖/‖full‖"):
        p.add_column(col, justify="right")
    for r in result["probsparse"]:
        p.add_row(str(r["T"]), f"{r['full_seconds'] * 1e3:.1f} ms", f"{r['probsparse_seconds'] * 1e3:.1f} ms",
                  f"{r['speedup']:.2f}×", f"{r['relative_error']:.3f}")
    g = result["generation"]
    d = Table(title=f"TinyTransformer decoding of {g['new_tokens']} tokens after a {g['prompt']}-token prompt")
    for col in ("KV cache", "recompute", "speed-up", "same tokens"):
        d.add_column(col, justify="right")
    d.add_row(f"{g['cached_seconds']:.2f} s", f"{g['recompute_seconds']:.2f} s", f"{g['speedup']:.1f}×",
              str(g["same_tokens"]))
    return [t, p, d]


def bench_markdown(result: dict) -> str:
    """The same figures as markdown, for the README."""
    s = result["settings"]
    lines = [f"B={s['B']}, H={s['H']}, D={s['D']}, {s['mask']}, {s['dtype']}, {s['threads']} threads, torch {s['torch']}",
             "", "| T | impl | time | × SDPA time | peak extra memory | × eager memory |", "|---:|---|---:|---:|---:|---:|"]
    for r in result["backends"]:
        mem = "" if r["memory_vs_eager"] is None else f"{r['memory_vs_eager']:.3f}"
        lines.append(f"| {r['T']} | {r['impl']} | {r['seconds'] * 1e3:.1f} ms | {r['time_vs_sdpa']:.2f} | "
                     f"{fmt_bytes(r['peak_extra_bytes'])} | {mem} |")
    lines += ["", "| T | full (SDPA) | ProbSparse (c=5) | speed-up | relative error ‖Δ‖/‖full‖ |",
              "|---:|---:|---:|---:|---:|"]
    for r in result["probsparse"]:
        lines.append(f"| {r['T']} | {r['full_seconds'] * 1e3:.1f} ms | {r['probsparse_seconds'] * 1e3:.1f} ms | "
                     f"{r['speedup']:.2f}× | {r['relative_error']:.3f} |")
    g = result["generation"]
    lines += ["", f"| decoding {g['new_tokens']} tokens after {g['prompt']} ({g.get('model', '')}) | KV cache | "
              "recompute | speed-up | same tokens |", "|---|---:|---:|---:|---|",
              f"| greedy | {g['cached_seconds']:.2f} s | {g['recompute_seconds']:.2f} s | {g['speedup']:.1f}× | "
              f"{g['same_tokens']} |"]
    return "\n".join(lines)
