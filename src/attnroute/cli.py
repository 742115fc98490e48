"""attnroute's command line: a thin layer over the rooms.

Exit status: 0 success, 1 a check failed, 2 bad input or a target that cannot be loaded.
Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

console = Console(stderr=True)


class CliError(Exception):
    """Bad input: printed as one line, exit status 2."""


def _bench(args) -> int:
    from .show.terminal import bench_markdown, bench_tables, read_bench_markdown

    if args.from_json:
        data = json.loads(Path(args.from_json).read_text())
        print(read_bench_markdown(data) if "effects" in data else bench_markdown(data))
        return 0
    out_dir = Path(args.out) if args.out else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    if args.suite in ("engine", "all"):
        from .bench import engine

        sizes = (256, 512) if args.quick else tuple(args.sizes)
        ps = (256, 512) if args.quick else (1024, 4096)
        with console.status("engine benchmark (figures, not pass/fail)…") as status:
            result = engine.run(sizes, ps, new_tokens=32 if args.quick else 512, progress=status.update)
        for table in bench_tables(result):
            Console().print(table)
        _write(out_dir, "engine.json", result, args.markdown and bench_markdown(result))
    if args.suite in ("read", "all", "effects", "long-context"):
        from .bench import reading

        parts = {"read": ("effects", "long_context"), "all": ("effects", "long_context"), "effects": ("effects",),
                 "long-context": ("long_context",)}[args.suite]
        previous = None
        if out_dir and (out_dir / "read.json").exists() and len(parts) == 1:
            previous = json.loads((out_dir / "read.json").read_text())
        with console.status("read benchmark (SmolLM2; minutes)…") as status:
            result = reading.run(progress=status.update, quick=args.quick, parts=parts, previous=previous)
        print(read_bench_markdown(result))
        _write(out_dir, "read.json", result, None)
    return 0


def _write(out_dir, name, result, markdown):
    if markdown:
        print(markdown)
    if out_dir:
        (out_dir / name).write_text(json.dumps(result, indent=2))
        console.print(f"wrote {out_dir / name}")


def _read_text(args) -> str | None:
    if args.text is not None and args.file:
        raise CliError("give the text with --text or --file, not both")
    if args.file:
        path = Path(args.file)
        if not path.is_file():
            raise CliError(f"--file {args.file}: no such file")
        try:
            return path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise CliError(f"--file {args.file}: not UTF-8 text") from None
    return args.text


def _heads(args) -> int:
    from .read.heads import ReadError, read
    from .read.models import ModelLoadError
    from .show.terminal import headtable_tables

    text = _read_text(args)
    if text is not None and not text.strip():
        raise CliError("the text is empty: give a non-empty --text or --file, or neither for the built-in text")
    if args.max_tokens is not None and args.max_tokens < 2:
        raise CliError(f"--max-tokens must be at least 2, got {args.max_tokens}")
    try:
        with read_progress() as progress:
            table = read(args.model, text, max_tokens=args.max_tokens, seeds=(args.seed, args.seed + 1, args.seed + 2),
                         ablation=not args.no_ablation, progress=progress)
    except (ModelLoadError, ReadError) as e:
        raise CliError(str(e)) from None
    if table.meta.get("tokens_cut"):
        console.print(f"[yellow]note:[/yellow] the text was cut to its first {table.meta['text_tokens']} tokens "
                      f"({table.meta['tokens_cut']} dropped; --max-tokens or the model's context)")
    for t in headtable_tables(table):
        Console().print(t)
    if args.json:
        table.to_json(args.json)
        console.print(f"wrote {args.json}")
    if args.csv:
        table.to_csv(args.csv)
        console.print(f"wrote {args.csv}")
    return 0


def read_progress():
    """Rich progress bars for loading and the per-layer sweeps."""
    from .show.terminal import ReadProgress

    return ReadProgress(console)


def _check(args) -> int:
    from .check.report import check, select
    from .check.targets import TargetError, resolve

    try:
        only = args.only.split(",") if args.only else None
        skip = args.skip.split(",") if args.skip else None
        select(only, skip)
        targets = resolve(args.target, args.convention)
    except (TargetError, ValueError) as e:
        raise CliError(str(e)) from None
    reports = []
    for t in targets:
        try:
            reports.append(check(t.fn, t.convention, only=only, skip=skip, name=t.name))
        except Exception as e:  # noqa: BLE001  (a target that cannot be called at all)
            raise CliError(f"cannot call {t.name}: {type(e).__name__}: {e}") from None
    callable_at_all = any(not c.skipped for r in reports for c in r.checks)
    if not callable_at_all:
        first = reports[0].checks[0].detail if reports and reports[0].checks else "no checks ran"
        raise CliError(f"cannot call {args.target} with [B, H, Tq, D] tensors: {first}")
    if args.json:
        data = reports[0].to_dict() if len(reports) == 1 else {"target": args.target,
                                                               "passed": all(r.passed for r in reports),
                                                               "targets": [r.to_dict() for r in reports],
                                                               "checks": [c for r in reports for c in r.to_dict()["checks"]]}
        print(json.dumps(data, indent=2))
    else:
        for r in reports:
            print(r.summary())
    return 0 if all(r.passed for r in reports) else 1


def _report(args) -> int:
    from .read.heads import ReadError
    from .read.models import ModelLoadError
    from .show import report as report_mod
    from .show.figures import write_pngs

    text = _read_text(argparse.Namespace(text=args.text, file=args.file))
    if text is not None and not text.strip():
        raise CliError("the text is empty: give a non-empty text, or none for the built-in one")
    learned = [_learn_result(p) for p in args.learn or []]  # bad files fail before minutes of reading
    try:
        with read_progress() as progress:
            rep = report_mod.build(args.model, text, ablation=not args.no_ablation, max_tokens=args.max_tokens,
                                   progress=progress)
    except (ModelLoadError, ReadError) as e:
        raise CliError(str(e)) from None
    if learned:
        from .show.learn_section import insert

        rep.html = insert(rep.html, learned)
    path = rep.save(args.out)
    print(f"wrote {path.resolve()} ({path.stat().st_size / 1e6:.2f} MB, built in {rep.data['seconds']} s)")
    if args.png_dir:
        for p in write_pngs(rep.data, args.png_dir):
            print(f"wrote {p}")
    if args.json:
        Path(args.json).write_text(json.dumps(rep.data))
        print(f"wrote {args.json}")
    return 0


def _learn(args) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .learn import EXPERIMENTS
    from .show import learn_figures, learn_section
    from .show.terminal import learn_tables

    run, Settings = EXPERIMENTS[args.experiment]
    try:
        settings = Settings(**_learn_options(args, Settings))
    except (TypeError, ValueError) as e:
        raise CliError(f"learn {args.experiment}: {e}") from None
    name = args.experiment + ("-fixed-offset" if getattr(args, "fixed_offset", None) else "")
    out = Path(args.out)
    columns = (TextColumn(f"learn {name}"), BarColumn(), TextColumn("{task.completed}/{task.total} steps"),
               TimeElapsedColumn())
    try:
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task(name, total=None)
            result = run(settings, progress=lambda step, total: bar.update(task, completed=step, total=total))
    except ValueError as e:
        raise CliError(f"learn {args.experiment}: {e}") from None
    out.mkdir(parents=True, exist_ok=True)
    for table in learn_tables(result):
        Console().print(table)
    for line in result["verdict"]["lines"]:
        print(line)
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))
    png = learn_figures.png(result)
    (out / f"{name}.png").write_bytes(png)
    (out / f"{name}.html").write_text(learn_section.page([result], [png]), encoding="utf-8")
    print(f"wrote {out / name}.png, .json and .html")
    return 0


def _learn_options(args, Settings) -> dict:
    """The settings fields given on the command line (an option left out keeps its default)."""
    from dataclasses import fields

    opts = {f.name: getattr(args, f.name) for f in fields(Settings) if getattr(args, f.name, None) is not None}
    for k in ("head_dims", "head_counts"):
        if k in opts:
            opts[k] = tuple(opts[k])
    if args.experiment == "induction" and opts.get("fixed_offset") and "positions" not in opts:
        opts["positions"] = "learned"  # the shortcut needs absolute positions to exist
    for k, v in opts.items():
        if isinstance(v, int) and not isinstance(v, bool) and v <= 0 and k != "seed":
            raise CliError(f"--{k.replace('_', '-')} must be positive, got {v}")
    return opts


def _learn_result(path) -> dict:
    from .learn import EXPERIMENTS

    p = Path(path)
    if not p.is_file():
        raise CliError(f"--learn {path}: no such file (write one with `attnroute learn … --out DIR`)")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CliError(f"--learn {path}: not a JSON file ({e})") from None
    if not isinstance(data, dict) or data.get("experiment") not in EXPERIMENTS:
        raise CliError(f"--learn {path}: not an `attnroute learn` result (no experiment field)")
    return data


def _cost_kv(args) -> int:
    from rich.table import Table

    from .cost.footprint import CostInputError, bill, resolve_spec, units
    from .read.models import ModelLoadError

    try:
        spec, weights, what = resolve_spec(args)
        result = bill(spec, args.context, args.batch, weights)
    except (CostInputError, ModelLoadError, ValueError) as e:
        raise CliError(str(e)) from None
    result["source"] = what
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    window = f", window {spec.window}" if spec.window else ""
    t = Table(title=f"KV cache: {what}, {spec.layers} layers × {spec.kv_heads} kv heads × {spec.head_dim} dims, "
                    f"{spec.dtype}{window}")
    t.add_column("quantity")
    t.add_column("bytes", justify="right")
    t.add_row("per layer per token (2 · Hkv · D · bytes)", units(result["bytes_per_layer_per_token"]))
    t.add_row("per token (× layers)", units(result["bytes_per_token"]))
    t.add_row(f"batch {args.batch} × {args.context:,} tokens", units(result["cache_bytes"]))
    t.add_row("weights", units(weights))
    Console().print(t)
    return 0


def _cost_simulate(args) -> int:
    from rich.table import Table

    from .cost import serving
    from .cost.footprint import CostInputError, resolve_spec
    from .read.models import ModelLoadError

    try:
        if args.budget_gb <= 0 or args.block_size < 1 or args.max_len < 2 or args.n < 1:
            raise CostInputError("--budget-gb, --block-size, --max-len and --n must be positive")
        spec, _, what = resolve_spec(args)
        capacity = int(args.budget_gb * 1e9) // spec.bytes_per_token
        reqs = (serving.from_csv(Path(args.requests), args.max_len) if args.requests
                else serving.synthetic(args.dist, args.n, args.max_len, args.seed))
        results = serving.run_all(reqs, capacity, args.block_size, args.max_len)
    except (CostInputError, serving.ServingInputError, ModelLoadError, ValueError) as e:
        raise CliError(str(e)) from None
    source = args.requests or f"{args.n} synthetic '{args.dist}' requests (seed {args.seed})"
    data = {"model": what, "bytes_per_token": spec.bytes_per_token, "budget_bytes": int(args.budget_gb * 1e9),
            "capacity_tokens": capacity, "block_size": args.block_size, "max_len": args.max_len, "requests": source,
            "policies": [{"policy": r.policy, "real_share": r.real_share, "waste": r.waste, "max_batch": r.max_batch,
                          "steps": r.steps, "preemptions": r.preemptions} for r in results]}
    if args.plot:
        serving.plot(results, args.plot, capacity)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    t = Table(title=f"{source}; {what}, {spec.bytes_per_token:,} B/token → {capacity:,} token slots in "
                    f"{args.budget_gb} GB; max_len {args.max_len}, block {args.block_size}")
    for col in ("policy", "KV memory holding real tokens", "waste", "largest batch", "steps", "preemptions"):
        t.add_column(col, justify="right")
    for r in results:
        t.add_row(r.policy, f"{r.real_share:.1%}", f"{r.waste:.1%}", str(r.max_batch), str(r.steps), str(r.preemptions))
    Console().print(t)
    if args.plot:
        console.print(f"wrote {args.plot}")
    return 0


def _cost_bill(args) -> int:
    from rich.table import Table

    from .cost import bill
    from .show.terminal import fmt_bytes

    if any(T < 16 for T in args.lengths):
        raise CliError(f"--lengths must be at least 16 tokens each, got {args.lengths}")
    with console.status("measuring…") as status:
        data = bill.rows(tuple(args.lengths), progress=status.update)
    if args.plot:
        bill.plot(data, args.plot)
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=2))
    t = Table(title="the bill of long context: one call, B=1, H=8, D=64, fp32 (window W=256, ProbSparse c=5)")
    for col in ("T", "variant", "FLOPs (formula)", "time", "GFLOP/s", "extra memory: formula", "measured"):
        t.add_column(col, justify="right")
    for r in data:
        t.add_row(str(r["T"]), r["variant"], f"{r['flops'] / 1e9:.2f} G", f"{r['seconds'] * 1e3:.1f} ms",
                  f"{r['gflops_per_s']:.1f}", fmt_bytes(r["predicted_bytes"]), fmt_bytes(r["peak_extra_bytes"]))
    Console().print(t)
    if args.markdown:
        print("| T | variant | FLOPs (formula) | time | GFLOP/s | extra memory (formula) | measured |")
        print("|---:|---|---:|---:|---:|---:|---:|")
        for r in data:
            print(f"| {r['T']} | {r['variant']} | {r['flops'] / 1e9:.2f} G | {r['seconds'] * 1e3:.1f} ms | "
                  f"{r['gflops_per_s']:.1f} | {fmt_bytes(r['predicted_bytes'])} | {fmt_bytes(r['peak_extra_bytes'])} |")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnroute", description="Transformer attention as routing.")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench", help="time and memory of every backend beside torch SDPA")
    b.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 8192], help="sequence lengths Tq = Tk")
    b.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke run")
    b.add_argument("--suite", choices=("all", "engine", "read", "effects", "long-context"), default="all",
                   help="which benchmarks to run (effects / long-context: one half of read, the other kept)")
    b.add_argument("--out", help="write engine.json / read.json into this directory")
    b.add_argument("--markdown", action="store_true", help="also print the tables as markdown")
    b.add_argument("--from-json", help="print the markdown tables of an earlier run's JSON and exit")
    b.set_defaults(fn=_bench)

    h = sub.add_parser("heads", help="per-head routing statistics, roles and ablation effects of a real model")
    h.add_argument("--model", default="smollm2", help="smollm2 (default), minilm, a model directory or a .gguf file")
    h.add_argument("--text", help="the text to read (default: a built-in paragraph)")
    h.add_argument("--file", help="read the text from this UTF-8 file")
    h.add_argument("--max-tokens", type=int, help="cut the text to this many tokens (default: the model's context)")
    h.add_argument("--seed", type=int, default=0, help="first probe seed (three are used)")
    h.add_argument("--json", help="write the HeadTable as JSON")
    h.add_argument("--csv", help="write the HeadTable as CSV")
    h.add_argument("--no-ablation", action="store_true", help="skip the ablation sweep and gradient estimate")
    h.set_defaults(fn=_heads)

    c = sub.add_parser("check", help="audit an attention implementation for mask, scale and precision bugs")
    c.add_argument("target", help="module:function, torch.sdpa, torch.mha, attnroute.{eager,blocked,sdpa,probsparse}, "
                                  "hf:smollm2, hf:minilm or hf:PATH")
    c.add_argument("--convention", default="sdpa", choices=("sdpa", "mha", "additive", "hf"),
                   help="how the target takes its mask (default sdpa: bool, True = may attend)")
    c.add_argument("--json", action="store_true", help="print the report as JSON")
    c.add_argument("--only", help="comma-separated check names to run")
    c.add_argument("--skip", help="comma-separated check names to skip")
    c.set_defaults(fn=_check)

    r = sub.add_parser("report", help="the routing report: one self-contained interactive HTML page")
    r.add_argument("text", nargs="?", help="the text to read (default: a built-in paragraph)")
    r.add_argument("--file", help="read the text from this UTF-8 file")
    r.add_argument("--model", default="smollm2", help="smollm2 (default), minilm, a model directory or a .gguf file")
    r.add_argument("--out", default="routing-report.html", help="the HTML file to write")
    r.add_argument("--png-dir", help="also write the main charts as PNG files here")
    r.add_argument("--json", help="write the data behind the page")
    r.add_argument("--max-tokens", type=int, default=256, help="cut the text to this many tokens (default 256)")
    r.add_argument("--no-ablation", action="store_true", help="skip the ablation sweep")
    r.add_argument("--learn", nargs="+", metavar="JSON", help="add sections from `attnroute learn` result files")
    r.set_defaults(fn=_report)

    learn = sub.add_parser("learn", help="train TinyTransformers from scratch and watch routes form")
    lsub = learn.add_subparsers(dest="experiment", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", default="learn-out", help="folder for the PNG, JSON and HTML (default learn-out)")
    common.add_argument("--seed", type=int, help="seed of the init and the batches (default 0)")
    common.add_argument("--steps", type=int, help="training steps per model")
    ind = lsub.add_parser("induction", parents=[common], help="an induction circuit forms: phase change, heads, ablation")
    ind.add_argument("--layers", type=int, help="default 2")
    ind.add_argument("--heads", type=int, help="heads per layer (default 4)")
    ind.add_argument("--width", type=int, help="d_model (default 64)")
    ind.add_argument("--ff", type=int, help="d_ff of feed-forward layers; 0 = attention-only (default)")
    ind.add_argument("--positions", choices=("learned", "sinusoidal", "rope"),
                     help="default rope (learned with --fixed-offset)")
    ind.add_argument("--every", type=int, help="evaluate every K steps (default 25)")
    ind.add_argument("--fixed-offset", type=int, nargs="?", const=24, metavar="D",
                     help="the shortcut contrast: the repeat always D positions after the first copy (default 24)")
    sc = lsub.add_parser("scale", parents=[common], help="with and without 1/√d_k at head dims 16…256")
    sc.add_argument("--head-dims", type=int, nargs="+", help="default 16 32 64 128 256")
    sc.add_argument("--every", type=int, help="evaluate every K steps (default 50)")
    hd = lsub.add_parser("heads", parents=[common], help="1, 2, 4, 8 heads on a mixture of routes, then pruning")
    hd.add_argument("--head-counts", type=int, nargs="+", help="default 1 2 4 8")
    hd.add_argument("--width", type=int, help="d_model, fixed across head counts (default 128)")
    fl = lsub.add_parser("ff", parents=[common], help="attention-only versus feed-forward stacks at the same budget")
    fl.add_argument("--vocab", type=int, help="tokens in the table task (default 128)")
    learn.set_defaults(fn=_learn)

    cost = sub.add_parser("cost", help="what routing costs: KV-cache bytes")
    csub = cost.add_subparsers(dest="cost_command", required=True)
    kv = csub.add_parser("kv", help="KV-cache footprint of a model or of given sizes")
    kv.add_argument("--model", help="smollm2, minilm, a model directory, a .gguf file or a config.json")
    kv.add_argument("--layers", type=int)
    kv.add_argument("--heads", type=int)
    kv.add_argument("--kv-heads", type=int, help="default: --heads (MHA); 1 = MQA")
    kv.add_argument("--head-dim", type=int)
    kv.add_argument("--dtype", default="fp16", help="fp32, fp16, bf16, fp8 or int8 (default fp16)")
    kv.add_argument("--context", type=int, default=4096, help="tokens per sequence (default 4096)")
    kv.add_argument("--batch", type=int, default=1)
    kv.add_argument("--window", type=int, help="sliding window: at most W tokens are held")
    kv.add_argument("--json", action="store_true", help="exact integer bytes as JSON")
    kv.set_defaults(fn=_cost_kv)

    sim = csub.add_parser("simulate", help="serve a request stream with contiguous reservation and with paging")
    sim.add_argument("--requests", help="CSV with prompt_tokens, output_tokens[, prefix_tokens, prefix_group]")
    sim.add_argument("--dist", default="chat", help="synthetic lengths: chat (default) or short")
    sim.add_argument("--n", type=int, default=300, help="synthetic requests (default 300)")
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--budget-gb", type=float, default=1.0, help="KV-cache memory budget in GB (default 1)")
    sim.add_argument("--block-size", type=int, default=16, help="tokens per block (default 16)")
    sim.add_argument("--max-len", type=int, default=2048, help="longest sequence a request may reach (default 2048)")
    sim.add_argument("--model", default="smollm2", help="whose KV bytes per token (default smollm2)")
    sim.add_argument("--dtype", default="fp16")
    sim.add_argument("--window", type=int)
    sim.add_argument("--plot", default="serving-simulation.png", help="PNG of memory use over time ('' for none)")
    sim.add_argument("--json", action="store_true")
    sim.set_defaults(fn=_cost_simulate, layers=None, heads=None, kv_heads=None, head_dim=None)

    bl = csub.add_parser("bill", help="FLOPs and memory of full, causal, window and ProbSparse attention vs length")
    bl.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    bl.add_argument("--json", help="write the measurements here")
    bl.add_argument("--plot", default="long-context-bill.png", help="PNG: time and memory against length")
    bl.add_argument("--markdown", action="store_true", help="also print the table as markdown")
    bl.set_defaults(fn=_cost_bill)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except CliError as e:
        print(f"error: {e}", file=sys.stderr)  # one line, never wrapped or a traceback
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
