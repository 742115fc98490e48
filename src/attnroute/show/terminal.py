"""Terminal tables (rich)."""

from __future__ import annotations

import statistics

from rich.table import Table

from ..read.roles import ROLES
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


ROLE_COLUMNS = {r.name: r.column for r in ROLES}  # the column that ranks heads of each role


def headtable_tables(table) -> list[Table]:
    """Top heads per role, then weight versus effect."""
    tokens = getattr(table.meta, "text_tokens", None)
    t = Table(title=f"{table.model}: {table.layers} layers × {table.heads} heads, {tokens} text tokens")
    for col in ("role", "heads", "top heads (layer.head: score)"):
        t.add_column(col)
    for role, col in ROLE_COLUMNS.items():
        heads = table.with_role(role)
        ranked = sorted(heads, key=lambda lh: -float(table[col][lh]))[:5]
        t.add_row(role, str(len(heads)), ", ".join(f"L{l}.H{h}: {table[col][l, h]:.2f}" for l, h in ranked))
    out = [t]
    agreement = getattr(table.meta, "grad_vs_ablation", None)
    if agreement is not None:
        e = Table(title="weight versus effect: top heads by zero-ablation Δ")
        for col in (
            "head",
            "role",
            "sink mass",
            "norm-weighted sink",
            "grad estimate",
            "Δ zero",
            "Δ mean",
            "Δ uniform",
        ):
            e.add_column(col, justify="right")
        for l, h, _ in table.top("ablation_delta", 8):
            e.add_row(
                f"L{l}.H{h}",
                table.roles[l][h],
                *(
                    f"{table[c][l, h]:.3f}"
                    for c in (
                        "sink_mass",
                        "norm_mass",
                        "grad_attr",
                        "ablation_delta",
                        "ablation_mean",
                        "ablation_uniform",
                    )
                ),
            )
        a = agreement
        k = a["k"]
        e.caption = (
            f"gradient estimate vs exact zero-ablation: Spearman {a['spearman']:.2f}, "
            f"top-{k} overlap {a[f'top{k}_overlap']}/{k}"
        )
        out.append(e)
    return out


def windows_table(title: str, rows: list[dict], columns: dict[str, str]) -> Table:
    """One row per window of layers ("first–last"), then a column per format string over the row."""
    table = Table(title=title)
    for col in ("layers", *columns):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(f"{r['layers'][0]}–{r['layers'][1]}", *(fmt.format(**r) for fmt in columns.values()))
    return table


def knockout_table(result: dict) -> Table:
    columns = {
        "Δp route": "{delta_p_route:+.4f}",
        "Δp control": "{delta_p_control:+.4f}",
        "Δ−log p route": "{delta_nll_route:+.4f}",
        "Δ−log p control": "{delta_nll_control:+.4f}",
    }
    title = f"p({result['target']['token']!r}) = {result['p_target_clean']:.4f} clean"
    m = result.get("metric")
    if m:  # your metric beside the built-in ones
        name = m["name"]
        columns.update(
            {f"Δ {name} route": "{delta_metric_route:+.4f}", f"Δ {name} control": "{delta_metric_control:+.4f}"}
        )
        title += f", {name} = {m['clean']:.4f} clean"
    return windows_table(title, result["windows"], columns)


def swap_table(result: dict) -> Table:
    columns = {
        "KL(swapped ‖ B)": "{kl_from_b:.4f}",
        "KL(swapped ‖ A)": "{kl_from_a:.4f}",
        "p(A's top)": "{p_top_a:.4f}",
        "p(B's top)": "{p_top_b:.4f}",
    }
    title = f"top token: A {result['top_a']!r}, B {result['top_b']!r}"
    m = result.get("metric")
    if m:
        columns[f"Δ {m['name']}"] = "{delta_metric:+.4f}"
        title += f"; {m['name']}: B {m['b']:.4f}, A {m['a']:.4f}"
    return windows_table(title, result["layers"], columns)


def needle_table(result: dict) -> Table:
    table = Table(title=f"needle retrieval, retrieval heads {result['retrieval_heads']}")
    for col in ("tokens", "answered", "answer", "weight on needle (retrieval heads)", "entropy", "best head"):
        table.add_column(col)
    for r in result["lengths"]:
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


def read_notes(meta) -> list[str]:
    """The lines a read prints on stderr beside its tables (``meta``: a HeadTable's ReadMeta): the routing
    check (or that it was skipped), the ablation statement, a cut text, a corpus read's significance."""
    check = meta.routing_check
    if check is None:
        lines = ["note: routing check skipped (--no-verify): numbers are not verified"]
    else:
        lines = [
            f"routing check: max |Δ {check['compared']}| = {check['max_abs_diff']:.2g} against the model's own eager "
            f"attention (tolerance {check['tolerance']:.2g})"
        ]
    if getattr(meta, "ablation", None):
        lines.append(f"ablation: {meta.ablation['statement']}")
    if getattr(meta, "metric", None):
        lines.append(f"effect: {meta.effect_batch}")
    tokens = getattr(meta, "tokens", None)
    if tokens:
        shown = " ".join(f"[{i}]{t!r}" for i, t in enumerate(tokens[:12]))
        lines.append(f"tokens ({len(tokens)}, as they ran): {shown}{' …' if len(tokens) > 12 else ''}")
    if getattr(meta, "tokens_cut", 0):
        lines.append(
            f"note: the text was cut to its first {meta.text_tokens} tokens ({meta.tokens_cut} dropped; "
            "--max-tokens or the model's context)"
        )
    imp = getattr(meta, "importance", {})
    if imp.get("note"):
        lines.append(f"importance: {imp['note']}")
    elif imp.get("n_significant") is not None:
        lines.append(
            f"importance: {imp['n_significant']} of {len(imp['candidates'])} candidate heads change the loss "
            f"significantly over {imp['documents']} documents ({imp['correction']})"
        )
    return lines


LABELS = {"load": "loading: ", "warn": "note: ", "stage": "stage: ", "checkpoint": "checkpoint: "}


class ReadProgress:
    """Progress of `attnroute heads` / `report` on stderr: loading, stages, text layers and the exact
    ablation (layer, heads done, ETA). On a terminal: rich bars. Otherwise (stderr redirected to a
    file or a CI log): one line per stage and one line per ablated layer, each with elapsed time and,
    for the ablation, an ETA — never a bar that turns into megabytes of carriage returns."""

    def __init__(self, console):
        import time

        self.console, self.live, self.clock = console, console.is_terminal, time.perf_counter
        self.t0 = self.clock()
        self.progress, self.tasks, self._last_line = None, {}, -1e9
        if self.live:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
                transient=True,
            )

    def __enter__(self):
        if self.progress:
            self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc) if self.progress else None

    def _line(self, text: str) -> None:
        # soft_wrap: a log line stays one line (rich would wrap at 80 columns when stderr is a file)
        self.console.print(f"[{self.clock() - self.t0:6.1f} s] {text}", highlight=False, soft_wrap=True, markup=False)

    def __call__(self, event) -> None:
        """One progress.Event: a line for load/warn/stage/rank, a bar (or a line every few seconds when
        not on a terminal) for the counters."""
        kind, text = event.stage, event.message
        if kind in ("load", "warn", "stage", "checkpoint", "rank"):
            label = {"load": "loading: ", "warn": "note: ", "stage": "stage: ", "checkpoint": "checkpoint: "}.get(
                kind, ""
            )
            (self.progress.console.print if self.progress else self._line)(f"{label}{text}")
        elif kind == "layer":  # text statistics, one event per layer
            if self.progress:
                self._advance("text statistics (layers)", event.total, completed=event.done)
        elif kind == "corpus":  # documents of this rank
            line = f"{text}, ETA {event.eta:.0f} s"
            if self.progress:
                self._advance("corpus", event.total, key="corpus", completed=event.done)
                self.progress.update(self.tasks["corpus"], description=line)
            elif self.clock() - self._last_line >= 5 or event.done == event.total:
                self._last_line = self.clock()
                self._line(line)
        elif kind == "ablate":  # exact ablation: heads done of the sweep
            if self.progress:
                self._advance(f"exact ablation ({text})", event.total, key="ablate", completed=event.done)
            else:
                self._line(f"ablation {text}: {event.done}/{event.total} heads, ETA {event.eta:.0f} s")

    def _advance(self, desc, total, key=None, completed=None):
        key = key or desc
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task(desc, total=total)
        if completed is None:
            self.progress.advance(self.tasks[key])
        else:
            self.progress.update(self.tasks[key], completed=completed, description=desc)


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


SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values, lo: float | None = None, hi: float | None = None, width: int = 48) -> str:
    """A curve as one line of block characters (resampled to ``width``), for the terminal."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    if len(v) > width:
        v = v[np.linspace(0, len(v) - 1, width).round().astype(int)]
    lo = float(np.nanmin(v)) if lo is None else lo
    hi = float(np.nanmax(v)) if hi is None else hi
    span = hi - lo or 1.0
    return "".join(SPARK[int(np.clip((x - lo) / span, 0, 1) * (len(SPARK) - 1))] for x in v)


def learn_tables(result: dict) -> list[Table]:
    """A learn experiment in the terminal: its curves as sparklines, then the numbers behind the verdict."""
    curves = Table(title=f"learn {result['experiment']}: curves (left = step 0)", show_header=True)
    for col, j in (("curve", "left"), ("start", "right"), ("shape", "left"), ("end", "right")):
        curves.add_column(col, justify=j)
    for name, values in _curves(result):
        curves.add_row(name, f"{values[0]:.2f}", sparkline(values), f"{values[-1]:.2f}")
    numbers = Table(title="numbers", show_header=False)
    numbers.add_column("what")
    numbers.add_column("value", justify="right")
    for k, v in result.get("summary", {}).items():
        numbers.add_row(str(k), v if isinstance(v, str) else f"{v:.4g}" if isinstance(v, float) else str(v))
    return [curves, numbers]


def _curves(result: dict):
    kind = result["experiment"]
    if kind == "crossattn":
        yield "held-out loss", [r["loss"] for r in result["train"]]
        yield "held-out token accuracy", [r["accuracy"] for r in result["train"]]
        for mode, rows in result["prune"].items():
            yield f"{mode}: loss as heads are removed", [r["loss"] for r in rows]
        return
    if kind == "induction":
        c, h = result["curves"], result["heads"]
        yield "first-occurrence loss", c["loss_first"]
        yield "repeat loss", c["loss_repeat"]
        yield (
            f"previous-token score L{h['previous_token']['layer']}H{h['previous_token']['head']}",
            h["previous_token"]["curve"],
        )
        yield f"induction score L{h['induction']['layer']}H{h['induction']['head']}", h["induction"]["curve"]
    elif kind == "scale":
        for r in result["runs"]:
            yield (
                f"repeat loss d_k={r['head_dim']} {'1/√d_k' if r['scaled'] else 'no scale'}",
                r["curves"]["loss_repeat"],
            )
    elif kind == "pruning":
        for r in result["runs"]:
            yield f"loss vs heads pruned, {r['heads']} head(s)/layer", [p["loss"] for p in r["prune"]]
    elif kind == "ff":
        for r in result["runs"]:
            yield f"{r['task']}: {r['model']}", r["curves"]["loss"]
