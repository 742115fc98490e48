"""attnroute's command line: parse flags, call one function, hand the result to show/.

Exit status: 0 success, 1 a check failed, 2 bad input or a target that cannot be loaded.
Every refusal is an InputError raised below this floor; main() maps it once to one line on
stderr (with the field named as its flag), never a traceback.

Output conventions, the same on every command:
    --json [PATH]   write the result as JSON to PATH; `--json` alone or `--json -` means stdout
                    (then stdout carries only the JSON and tables go to stderr)
    --plot PATH, --png-dir DIR, --out PATH   files are written only where the user names them
                    (`report` writes routing-report.html when --out is left out: the page is the product)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .engine import InputError
from .engine.jsonable import strict

console = Console(stderr=True)
STDOUT = "-"


# ------------------------------------------------------------------------------------ shared plumbing


def output_path(path: str | None, field: str, *, suffixes: tuple[str, ...] = ()) -> Path | None:
    """Validate a file the command will write, before any work: its folder exists, it is no folder."""
    if not path or path == STDOUT:  # None or '' : nothing will be written
        return None
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{field} {path} is a directory; give a file name", field=field)
    if not p.parent.is_dir():
        raise InputError(f"{field} {path}: the folder {p.parent} does not exist", field=field)
    if suffixes and p.suffix.lower() not in suffixes:
        raise InputError(f"{field} {path} must end in {' or '.join(suffixes)}", field=field)
    return p


def emit_json(data, path: str | None) -> None:
    """Print JSON to stdout for '-', else write it to ``path`` and say so on stderr. NaN and inf are
    written as null: bare NaN is not JSON, and strict parsers refuse it."""
    text = json.dumps(strict(data), indent=2, allow_nan=False)
    if path == STDOUT:
        print(text)
        return
    Path(path).write_text(text)
    say(f"wrote {path}")


def say(message: str) -> None:
    """A line on stderr, printed as it is (a file name like [bold].png is not Rich markup)."""
    console.print(message, markup=False, highlight=False)


def distinct(inputs: dict[str, str | None], outputs: dict[str, str | None]) -> None:
    """No output may be an input or another output: nothing the user gave is overwritten."""
    seen: dict[Path, str] = {}
    for role, group in (("input", inputs), ("output", outputs)):
        for field, path in group.items():
            if not path or path == STDOUT:
                continue
            key = Path(path).resolve()
            if key in seen:
                raise InputError(
                    f"{field} {path} is also the {seen[key]}; give a different file so that nothing "
                    "you gave is overwritten",
                    field=field,
                )
            seen[key] = f"{role} of {flag_name(field)}"


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def output_dir(path: str | None, field: str) -> Path | None:
    """A folder the command will create or fill: it may exist as a folder, never as a file."""
    if not path:
        return None
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"{field} {path} is a file; give a folder", field=field)
    return p


def int_in(value: int | None, field: str, lo: int, hi: int | None = None) -> None:
    if value is not None and (value < lo or (hi is not None and value > hi)):
        bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise InputError(f"{field} must be {bound}, got {value}", field=field)


def tables_console(json_path: str | None) -> Console:
    """Human tables go to stdout, unless stdout carries the JSON."""
    return console if json_path == STDOUT else Console()


def read_text_arg(text: str | None, file: str | None) -> str | None:
    if text is not None and file:
        raise InputError("text and file were both given; give one", field="file")
    if file:
        path = Path(file)
        if not path.is_file():
            raise InputError(f"file {file}: no such file", field="file")
        try:
            return path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise InputError(f"file {file}: not UTF-8 text", field="file") from None
    return text


def read_progress():
    """Rich progress bars for loading and the per-layer sweeps."""
    from .show.terminal import ReadProgress

    return ReadProgress(console)


def say_routing_check(meta: dict) -> None:
    """One line on stderr: how far routed attention was from the model's own (or that it was skipped)."""
    check = meta.get("routing_check")
    if check is None:
        console.print("note: routing check skipped (--no-verify): numbers are not verified", soft_wrap=True)
        return
    console.print(
        f"routing check: max |Δ {check['compared']}| = {check['max_abs_diff']:.2g} against the model's own eager "
        f"attention (tolerance {check['tolerance']:.2g})",
        soft_wrap=True,
    )


MODEL_HELP = "smollm2 (default), minilm, a model directory, a .gguf file or a hub id org/name"

# ------------------------------------------------------------------------------------ commands


def _bench(args) -> int:
    from .show.terminal import bench_markdown, bench_tables, read_bench_markdown

    if args.from_json:
        print(_bench_markdown_of(args.from_json, bench_markdown, read_bench_markdown))
        return 0
    for T in args.sizes:
        int_in(T, "sizes", 16)
    out_dir = output_dir(args.out, "out")
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
        _write_bench(out_dir, "engine.json", result, args.markdown and bench_markdown(result))
    if args.suite in ("read", "all", "effects", "long-context"):
        from .bench import reading

        parts = {
            "read": ("effects", "long_context"),
            "all": ("effects", "long_context"),
            "effects": ("effects",),
            "long-context": ("long_context",),
        }[args.suite]
        previous = None
        if out_dir and (out_dir / "read.json").exists() and len(parts) == 1:
            previous = json.loads((out_dir / "read.json").read_text())
        with console.status("read benchmark (SmolLM2; minutes)…") as status:
            result = reading.run(progress=status.update, quick=args.quick, parts=parts, previous=previous)
        print(read_bench_markdown(result))
        _write_bench(out_dir, "read.json", result, None)
    return 0


def _bench_markdown_of(path: str, bench_markdown, read_bench_markdown) -> str:
    """The markdown tables of an earlier run's JSON, or a one-line refusal naming what is wrong."""
    p = Path(path)
    if not p.is_file():
        raise InputError(
            f"from_json {path}: no such file (write one with `attnroute bench --out DIR`)", field="from_json"
        )
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        is_read = "effects" in data or "long_context" in data  # read.json may hold one of its two parts
        return read_bench_markdown(data) if is_read else bench_markdown(data)
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, IndexError) as e:
        raise InputError(
            f"from_json {path}: not the JSON of `attnroute bench` ({type(e).__name__}: {e})", field="from_json"
        ) from None


def _write_bench(out_dir, name, result, markdown):
    if markdown:
        print(markdown)
    if out_dir:
        (out_dir / name).write_text(json.dumps(strict(result), indent=2, allow_nan=False))
        say(f"wrote {out_dir / name}")


def _heads(args) -> int:
    if args.corpus:
        return _heads_corpus(args)
    from .read.heads import read_heads

    output_path(args.json, "json")
    output_path(args.csv, "csv")
    distinct({"file": args.file}, {"json": args.json, "csv": args.csv})
    int_in(args.seed, "seed", 0, 2**32 - 3)  # three probe seeds: seed, seed + 1, seed + 2
    text = read_text_arg(args.text, args.file)
    if text is not None and not text.strip():
        raise InputError(
            "text is empty: give a non-empty --text or --file, or neither for the built-in text", field="text"
        )
    int_in(args.max_tokens, "max_tokens", 2)
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    with read_progress() as progress:
        table = read_heads(
            args.model,
            text,
            max_tokens=args.max_tokens,
            seeds=(args.seed, args.seed + 1, args.seed + 2),
            ablation=not args.no_ablation,
            max_weight=args.max_weight,
            modes=modes,
            exact=args.exact,
            verify=not args.no_verify,
            progress=progress,
        )
    say_routing_check(table.meta)
    if table.meta.get("ablation"):
        console.print(f"ablation: {table.meta['ablation']['statement']}", soft_wrap=True)
    if table.meta.get("tokens_cut"):
        console.print(
            f"[yellow]note:[/yellow] the text was cut to its first {table.meta['text_tokens']} tokens "
            f"({table.meta['tokens_cut']} dropped; --max-tokens or the model's context)"
        )
    return write_headtable(table, args)


def write_headtable(table, args) -> int:
    """The HeadTable's terminal tables, and the JSON/CSV the user named (heads on a text or a corpus)."""
    from .show.terminal import headtable_tables

    for t in headtable_tables(table):
        tables_console(args.json).print(t)
    if args.json:
        emit_json(table.to_dict(), args.json)
    if args.csv:
        table.to_csv(args.csv)
        say(f"wrote {args.csv}")
    return 0


def _heads_corpus(args) -> int:
    """`heads --corpus`: one process, or one rank of `torchrun -m attnroute heads …` (rank 0 writes)."""
    import os

    import torch.distributed as dist

    from .read.corpus_read import read_corpus

    output_path(args.json, "json")
    output_path(args.csv, "csv")
    output_path(args.checkpoint, "checkpoint")
    if args.text or args.file:
        raise InputError("give --corpus or --text/--file, not both", field="corpus")
    distinct({"corpus": args.corpus}, {"json": args.json, "csv": args.csv, "checkpoint": args.checkpoint})
    int_in(args.limit, "limit", 1)
    int_in(args.max_tokens, "max_tokens", 2)
    int_in(args.checkpoint_every, "checkpoint_every", 1)
    int_in(args.importance_tokens, "importance_tokens", 2)
    if args.modes != "zero":
        raise InputError("a corpus read measures zero ablation per document; --modes is for one text", field="modes")
    started_here = False
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():  # launched by torchrun
        import torch

        if torch.cuda.is_available():  # nccl collectives need each rank on its own device
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        started_here = True
    try:
        with read_progress() as progress:
            table = read_corpus(
                args.model,
                args.corpus,
                field=args.field,
                per_line=args.per_line,
                limit=args.limit,
                max_tokens=args.max_tokens,
                exact=args.exact,
                importance_tokens=args.importance_tokens,
                seeds=(args.seed, args.seed + 1, args.seed + 2),
                max_weight=args.max_weight,
                checkpoint=args.checkpoint,
                checkpoint_every=args.checkpoint_every,
                verify=not args.no_verify,
                progress=progress,
            )
    finally:
        if started_here:
            dist.destroy_process_group()
    if table is None:  # not rank 0: rank 0 writes
        return 0
    say_routing_check(table.meta)
    imp = table.meta["importance"]
    if "n_significant" in imp:
        console.print(
            f"importance: {imp['n_significant']} of {len(imp['candidates'])} candidate heads change the loss "
            f"significantly over {imp['documents']} documents ({imp['correction']})",
            soft_wrap=True,
        )
    return write_headtable(table, args)


def _knockout(args) -> int:
    from .read.knockout import knockout
    from .show.knockout_figure import knockout_png

    output_path(args.json, "json")
    output_path(args.plot, "plot", suffixes=(".png",))
    distinct({}, {"json": args.json, "plot": args.plot})
    int_in(args.window, "window", 1)
    heads = _int_list(args.heads, "heads") if args.heads else None
    with read_progress() as progress:
        from .read.models import load

        loaded = load(args.model, progress=lambda m: progress("load", m))
        progress("stage", f"knocking out {args.source!r} → {args.target!r} in every {args.window}-layer window")
        result = knockout(
            loaded,
            args.text,
            source=args.source,
            target=args.target,
            window=args.window,
            heads=heads,
            target_token=args.token,
        ).to_dict()
    table = _windows_table(
        f"p({result['target']['token']!r}) = {result['p_target_clean']:.4f} clean",
        result["windows"],
        {
            "Δp route": "{delta_p_route:+.4f}",
            "Δp control": "{delta_p_control:+.4f}",
            "Δ−log p route": "{delta_nll_route:+.4f}",
            "Δ−log p control": "{delta_nll_control:+.4f}",
        },
    )
    tables_console(args.json).print(table)
    if args.plot:
        knockout_png(result, args.plot)
        say(f"wrote {args.plot}")
    if args.json:
        emit_json(result, args.json)
    return 0


def _windows_table(title: str, rows: list[dict], columns: dict[str, str]) -> Table:
    """One row per window of layers ("first–last"), then a column per format string over the row."""
    table = Table(title=title)
    for col in ("layers", *columns):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(f"{r['layers'][0]}–{r['layers'][1]}", *(fmt.format(**r) for fmt in columns.values()))
    return table


def _swap(args) -> int:
    from .read.mapswap import map_swap

    output_path(args.json, "json")
    int_in(args.window, "window", 1)
    heads = _int_list(args.heads, "heads") if args.heads else None
    with read_progress() as progress:
        from .read.models import load

        loaded = load(args.model, progress=lambda m: progress("load", m))
        progress("stage", f"running B with A's maps in every {args.window}-layer window")
        result = map_swap(loaded, args.prompt_a, args.prompt_b, window=args.window, heads=heads).to_dict()
    table = _windows_table(
        f"top token: A {result['top_a']!r}, B {result['top_b']!r}",
        result["layers"],
        {
            "KL(swapped ‖ B)": "{kl_from_b:.4f}",
            "KL(swapped ‖ A)": "{kl_from_a:.4f}",
            "p(A's top)": "{p_top_a:.4f}",
            "p(B's top)": "{p_top_b:.4f}",
        },
    )
    tables_console(args.json).print(table)
    if args.json:
        emit_json(result, args.json)
    return 0


def _needle(args) -> int:
    from .read.needle import dilution
    from .show.knockout_figure import needle_png

    output_path(args.json, "json")
    output_path(args.plot, "plot", suffixes=(".png",))
    distinct({}, {"json": args.json, "plot": args.plot})
    lengths = _int_list(args.lengths, "lengths")
    for n in lengths:
        int_in(n, "lengths", 32)
    with read_progress() as progress:
        from .read.models import load

        loaded = load(args.model, progress=lambda m: progress("load", m))
        result = dilution(loaded, lengths, seed=args.seed, progress=progress)
    table = Table(title=f"needle retrieval, retrieval heads {result['retrieval_heads']}")
    for col in ("tokens", "answered", "answer", "weight on needle (retrieval heads)", "entropy", "best head"):
        table.add_column(col)
    for r in result["lengths"]:
        table.add_row(
            str(r["length"]),
            "yes" if r["answered"] else "no",
            repr(r["answer"]),
            " ".join(f"{h['needle_weight']:.3f}" for h in r["retrieval_heads"]),
            " ".join(f"{h['entropy']:.2f}" for h in r["retrieval_heads"]),
            f"L{r['best_head']['layer']}.H{r['best_head']['head']} {r['best_head']['needle_weight']:.3f}",
        )
    tables_console(args.json).print(table)
    if args.plot:
        needle_png(result, args.plot)
        say(f"wrote {args.plot}")
    if args.json:
        emit_json(result, args.json)
    return 0


def _int_list(text: str, field: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{field} must be comma-separated integers, got {text!r}", field=field) from None


def _check(args) -> int:
    from .check.report import check, select
    from .check.targets import resolve

    output_path(args.json, "json")
    only = args.only.split(",") if args.only else None
    skip = args.skip.split(",") if args.skip else None
    targets = resolve(args.target, args.convention)
    select(only, skip, {n for t in targets for n in t.extras})
    reports = [
        check(
            t.fn,
            t.convention,
            only=only,
            skip=skip,
            name=t.name,
            scale=args.scale if args.scale is not None else t.scale,
            strict=args.strict,
            timeout=args.timeout,
            head_dim=t.head_dim,
            mask_family=t.mask_family,
            mask_source=t.mask_source,
            extras=t.extras,
        )
        for t in targets
    ]
    if not any(r.called_at_all for r in reports):
        first = next((c.detail for r in reports for c in r.checks), "no checks ran")
        raise InputError(f"cannot call {args.target} with [B, H, Tq, D] tensors: {first}", field="target")
    if args.json:
        data = (
            reports[0].to_dict()
            if len(reports) == 1
            else {
                "target": args.target,
                "passed": all(r.passed for r in reports),
                "strict": args.strict,
                "targets": [r.to_dict() for r in reports],
                "checks": [c for r in reports for c in r.to_dict()["checks"]],
            }
        )
        emit_json(data, args.json)
    if args.json != STDOUT:
        for r in reports:
            print(r.summary())
    return 0 if all(r.passed for r in reports) else 1


def _report(args) -> int:
    from .read.capture import routing_view
    from .show import report as report_page
    from .show.figures import write_pngs

    output_path(args.out, "out")
    output_path(args.json, "json")
    output_dir(args.png_dir, "png_dir")
    distinct({"file": args.file, **{f"learn {p}": p for p in args.learn or []}}, {"out": args.out, "json": args.json})
    int_in(args.max_tokens, "max_tokens", 2)
    text = read_text_arg(args.text, args.file)
    if text is not None and not text.strip():
        raise InputError("text is empty: give a non-empty text, or none for the built-in one", field="text")
    learned = [_learn_result(p) for p in args.learn or []]  # bad files fail before minutes of reading
    from .show.findings import read_result

    added = [read_result(p) for p in args.add or []]
    int_in(args.limit, "limit", 1)
    int_in(args.generate, "generate", 0, 512)
    if args.corpus:
        from .read.corpus import corpus_kind

        corpus_kind(Path(args.corpus))  # a bad corpus fails before the model loads
    with read_progress() as progress:
        from .read.models import load

        loaded = load(args.model, progress=lambda m: progress("load", m))
        view = routing_view(
            loaded,
            text,
            ablation=not args.no_ablation,
            max_tokens=args.max_tokens,
            verify=not args.no_verify,
            generate=args.generate,
            progress=progress,
        )
        if args.corpus:
            from .read.corpus_read import read_corpus

            view.corpus = read_corpus(
                loaded,
                args.corpus,
                field=args.field,
                per_line=args.per_line,
                limit=args.limit,
                exact=0 if args.no_ablation else 20,
                verify=False,  # checked above, on the same model
                progress=progress,
            )
    say_routing_check(view.table.meta)
    rep = report_page.build(view)
    if learned:
        from .show.learn_section import insert

        rep.html = insert(rep.html, learned)
    if added:
        from .show.findings import insert as insert_findings

        rep.html = insert_findings(rep.html, added)
    path = rep.save(args.out)
    say(f"wrote {path.resolve()} ({path.stat().st_size / 1e6:.2f} MB, built in {rep.data['seconds']} s)")
    if args.png_dir:
        for p in write_pngs(rep.data, args.png_dir):
            say(f"wrote {p}")
    if args.json:
        emit_json(rep.data, args.json)
    return 0


def _learn(args) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .learn import EXPERIMENTS
    from .show import learn_figures, learn_section
    from .show.terminal import learn_tables

    run, Settings = EXPERIMENTS[args.experiment]
    settings = Settings(**_learn_options(args, Settings))
    name = args.experiment + ("-fixed-offset" if getattr(args, "fixed_offset", None) else "")
    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not out.is_dir():
        raise InputError(f"out {args.out} is a file; give a folder for the PNG, JSON and HTML", field="out")
    columns = (
        TextColumn(f"learn {name}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} steps"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(name, total=None)
        result = run(settings, progress=lambda step, total: bar.update(task, completed=step, total=total))
    for table in learn_tables(result):
        Console().print(table)
    for line in result["verdict"]["lines"]:
        print(line)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.json").write_text(json.dumps(strict(result), indent=1, allow_nan=False))
        png = learn_figures.png(result)
        (out / f"{name}.png").write_bytes(png)
        (out / f"{name}.html").write_text(learn_section.page([result], [png]), encoding="utf-8")
        say(f"wrote {out / name}.png, .json and .html")
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
    may_be_zero = {"seed", "ff"}  # ff = 0 is the attention-only model the help documents
    for k, v in opts.items():
        values = v if isinstance(v, tuple) else (v,)
        for x in values:
            if isinstance(x, int) and not isinstance(x, bool) and (x < 0 or (x == 0 and k not in may_be_zero)):
                raise InputError(f"{k} must be {'>= 0' if k in may_be_zero else 'positive'}, got {x}", field=k)
    return opts


def _learn_result(path) -> dict:
    from .learn import EXPERIMENTS

    p = Path(path)
    if not p.is_file():
        raise InputError(f"learn {path}: no such file (write one with `attnroute learn … --out DIR`)", field="learn")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"learn {path}: not a JSON file ({e})", field="learn") from None
    if not isinstance(data, dict) or data.get("experiment") not in EXPERIMENTS:
        raise InputError(f"learn {path}: not an `attnroute learn` result (no experiment field)", field="learn")
    from .show.learn_section import section

    try:  # render it now: a result missing a field fails here, not after minutes of reading
        section(data)
    except (KeyError, TypeError, IndexError, ValueError) as e:
        raise InputError(
            f"learn {path}: an `attnroute learn` result with a missing or malformed field ({type(e).__name__}: {e})",
            field="learn",
        ) from None
    return data


def _kv_spec(args):
    """(KVSpec, weight bytes or None, what was costed) from --model or the explicit sizes."""
    from .cost.footprint import read_config_json
    from .cost.kv import DTYPE_BYTES, spec_from_config, spec_from_sizes

    if args.model:
        given = [
            f"--{n.replace('_', '-')}"
            for n in ("layers", "heads", "kv_heads", "head_dim")
            if getattr(args, n, None) is not None
        ]
        if given:
            raise InputError(
                f"give --model or explicit sizes, not both: {', '.join(given)} would be ignored for "
                f"--model {args.model}"
            )
        if Path(args.model).suffix == ".json":
            cfg = read_config_json(Path(args.model))
            return spec_from_config(cfg, args.dtype, args.window, source=args.model), None, args.model
        from .read.models import load

        lm = load(args.model)
        spec = spec_from_config(lm.model.config, args.dtype, args.window)
        params = sum(p.numel() for p in lm.model.parameters())
        return spec, params * DTYPE_BYTES[args.dtype], lm.name
    if args.layers is None or args.heads is None or args.head_dim is None:
        raise InputError("give --model NAME|PATH|config.json, or --layers, --heads and --head-dim")
    return (
        spec_from_sizes(args.layers, args.heads, args.kv_heads, args.head_dim, args.dtype, args.window),
        None,
        "explicit sizes",
    )


def _cost_kv(args) -> int:
    from .cost.footprint import kv_bill
    from .show.cost_tables import kv_table

    output_path(args.json, "json")
    spec, weights, what = _kv_spec(args)
    result = kv_bill(spec, args.context, args.batch, weights)
    result["source"] = what
    if args.json:
        emit_json(result, args.json)
    if args.json != STDOUT:
        Console().print(kv_table(result))
    return 0


def _cost_simulate(args) -> int:
    from .cost import serving
    from .show.cost_figures import serving_png
    from .show.cost_tables import simulate_table

    output_path(args.json, "json")
    output_path(args.plot, "plot", suffixes=(".png",))
    distinct({"requests": args.requests}, {"json": args.json, "plot": args.plot})
    serving.validate_settings(args.budget_gb, args.block_size, args.max_len, args.n)
    spec, _, what = _kv_spec(args)
    reqs = (
        serving.from_csv(Path(args.requests), args.max_len)
        if args.requests
        else serving.synthetic(args.dist, args.n, args.max_len, args.seed)
    )
    with console.status("serving the stream…") as status:  # a long CSV takes a while: show where it is
        figures, results = serving.serve(
            reqs, spec.bytes_per_token, args.budget_gb, args.block_size, args.max_len, progress=status.update
        )
    source = args.requests or f"{args.n} synthetic '{args.dist}' requests (seed {args.seed})"
    data = {"model": what, **figures, "requests": source}
    if args.plot:
        serving_png(results, args.plot, data["capacity_tokens"])
    if args.json:
        emit_json(data, args.json)
    if args.json != STDOUT:
        Console().print(simulate_table(data, args.budget_gb))
    if args.plot:
        say(f"wrote {args.plot}")
    return 0


def _cost_bill(args) -> int:
    from .bench import bill
    from .show.cost_figures import bill_png
    from .show.cost_tables import bill_markdown, bill_table

    output_path(args.json, "json")
    output_path(args.plot, "plot", suffixes=(".png",))
    distinct({}, {"json": args.json, "plot": args.plot})
    with console.status("measuring…") as status:
        data = bill.rows(tuple(args.lengths), progress=status.update)
    if args.plot:
        bill_png(data, args.plot)
    if args.json:
        emit_json(data, args.json)
    tables_console(args.json).print(bill_table(data))
    if args.markdown:
        tables_console(args.json).print(bill_markdown(data), markup=False, highlight=False)
    return 0


# ------------------------------------------------------------------------------------ the parser


def _json_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--json",
        nargs="?",
        const=STDOUT,
        metavar="PATH",
        help=f"write {what} as JSON to PATH (`--json` alone or `-`: stdout)",
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnroute", description="Transformer attention as routing.")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench", help="time and memory of every backend beside torch SDPA")
    b.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 8192], help="sequence lengths Tq = Tk")
    b.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke run")
    b.add_argument(
        "--suite",
        choices=("all", "engine", "read", "effects", "long-context"),
        default="all",
        help="which benchmarks to run (effects / long-context: one half of read, the other kept)",
    )
    b.add_argument("--out", help="write engine.json / read.json into this directory")
    b.add_argument("--markdown", action="store_true", help="also print the tables as markdown")
    b.add_argument("--from-json", help="print the markdown tables of an earlier run's JSON and exit")
    b.set_defaults(fn=_bench)

    h = sub.add_parser("heads", help="per-head routing statistics, roles and ablation effects of a real model")
    h.add_argument(
        "--model",
        default="smollm2",
        help=MODEL_HELP,
    )
    h.add_argument("--text", help="the text to read (default: a built-in paragraph)")
    h.add_argument("--file", help="read the text from this UTF-8 file")
    h.add_argument("--max-tokens", type=int, help="cut the text to this many tokens (default: the model's context)")
    h.add_argument("--seed", type=int, default=0, help="first probe seed (three are used)")
    _json_flag(h, "the HeadTable")
    h.add_argument("--csv", help="write the HeadTable as CSV")
    h.add_argument("--no-ablation", action="store_true", help="skip the ablation sweep and gradient estimate")
    h.add_argument(
        "--exact",
        default="20",
        help="heads to ablate exactly: the top N of the gradient estimate (default 20), or 'all' for the full sweep",
    )
    h.add_argument(
        "--modes", default="zero", help="exact ablation modes, comma-separated: zero (default), mean, uniform"
    )
    h.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the run-time check of routed attention against the model's own eager attention",
    )
    h.add_argument(
        "--corpus",
        help="read a corpus instead of one text: a .txt (blank-line-separated documents), a .jsonl, a directory "
        "of .txt files, a .parquet file or a saved Hugging Face dataset; streamed",
    )
    h.add_argument("--field", default="text", help="the .jsonl field / dataset column holding the text (default text)")
    h.add_argument("--per-line", action="store_true", help="a .txt corpus holds one document per line")
    h.add_argument("--limit", type=int, help="read at most this many documents")
    h.add_argument(
        "--importance-tokens",
        type=int,
        default=256,
        help="per-document ablation effect on each document's first N tokens (default 256)",
    )
    h.add_argument(
        "--checkpoint", help="write the corpus accumulator here every --checkpoint-every documents; rerun to resume"
    )
    h.add_argument("--checkpoint-every", type=int, default=10, help="documents between checkpoints (default 10)")
    h.add_argument(
        "--max-weight",
        action="store_true",
        help="also the row maximum and argmax offsets (a second, blocked pass over the weights)",
    )
    h.set_defaults(fn=_heads)

    ko = sub.add_parser("knockout", help="cut one route (query → key edges) in a window of layers, slid over depth")
    ko.add_argument("text", help="the prompt")
    ko.add_argument("--from", dest="source", required=True, help="query positions: a word of the text or indices 3,4")
    ko.add_argument("--to", dest="target", required=True, help="key positions: a word of the text or indices")
    ko.add_argument("--window", type=int, default=5, help="layers per window (default 5)")
    ko.add_argument("--heads", help="only these heads, comma-separated (default all)")
    ko.add_argument("--token", help="the target token (default: the model's own top prediction)")
    ko.add_argument("--model", default="smollm2", help=MODEL_HELP)
    ko.add_argument("--plot", help="write the figure (PNG) here")
    _json_flag(ko, "the result")
    ko.set_defaults(fn=_knockout)

    sw = sub.add_parser("swap", help="run prompt B with prompt A's attention maps, layer by layer (prompt-to-prompt)")
    sw.add_argument("prompt_a", help="the prompt whose maps are used")
    sw.add_argument("prompt_b", help="the prompt that runs (same number of tokens)")
    sw.add_argument("--window", type=int, default=1, help="layers swapped together (default 1)")
    sw.add_argument("--heads", help="only these heads, comma-separated (default all)")
    sw.add_argument("--model", default="smollm2", help=MODEL_HELP)
    _json_flag(sw, "the result")
    sw.set_defaults(fn=_swap)

    nd = sub.add_parser("needle", help="dilution: a needle at a random depth in growing context; retrieval heads")
    nd.add_argument("--lengths", default="256,512,1024,2048,4096,8192", help="context lengths, comma-separated")
    nd.add_argument("--seed", type=int, default=0, help="the needle's depth (default 0)")
    nd.add_argument("--model", default="smollm2", help=MODEL_HELP)
    nd.add_argument("--plot", help="write the figure (PNG) here")
    _json_flag(nd, "the result")
    nd.set_defaults(fn=_needle)

    c = sub.add_parser("check", help="audit an attention implementation for mask, scale and precision bugs")
    c.add_argument(
        "target",
        help="module:function, torch.sdpa, torch.mha, attnroute.{eager,blocked,sdpa,probsparse}, "
        "hf:smollm2, hf:minilm or hf:PATH",
    )
    c.add_argument(
        "--convention",
        default="sdpa",
        choices=("sdpa", "mha", "additive", "hf"),
        help="how the target takes its mask (default sdpa: bool, True = may attend)",
    )
    _json_flag(c, "the report")
    c.add_argument("--only", help="comma-separated check names to run")
    c.add_argument("--skip", help="comma-separated check names to mark not applicable")
    c.add_argument("--scale", type=float, help="the temperature the target means to use (e.g. 1 for T5); default 1/√d")
    c.add_argument("--strict", action="store_true", help="hazards fail too (exit 1)")
    c.add_argument("--timeout", type=float, default=10.0, help="seconds per call before the target counts as hung")
    c.set_defaults(fn=_check)

    r = sub.add_parser("report", help="the routing report: one self-contained interactive HTML page")
    r.add_argument("text", nargs="?", help="the text to read (default: a built-in paragraph)")
    r.add_argument("--file", help="read the text from this UTF-8 file")
    r.add_argument(
        "--model",
        default="smollm2",
        help=MODEL_HELP,
    )
    r.add_argument("--out", default="routing-report.html", help="the HTML file to write (default routing-report.html)")
    r.add_argument("--png-dir", help="also write the main charts as PNG files here")
    _json_flag(r, "the data behind the page")
    r.add_argument("--max-tokens", type=int, default=256, help="cut the text to this many tokens (default 256)")
    r.add_argument("--no-ablation", action="store_true", help="skip the ablation sweep")
    r.add_argument(
        "--add",
        action="append",
        help="add a section from a `knockout`, `swap` or `needle` --json result (repeatable)",
    )
    r.add_argument(
        "--generate", type=int, default=0, help="also decode N tokens (greedy, KV cache) and show their routes"
    )
    r.add_argument("--corpus", help="add a corpus read: means with 95 %% intervals and significant heads (see heads)")
    r.add_argument("--field", default="text", help="the corpus's .jsonl field / dataset column (default text)")
    r.add_argument("--per-line", action="store_true", help="a .txt corpus holds one document per line")
    r.add_argument("--limit", type=int, help="read at most this many corpus documents")
    r.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the run-time check of routed attention against the model's own eager attention",
    )
    r.add_argument("--learn", nargs="+", metavar="JSON", help="add sections from `attnroute learn` result files")
    r.set_defaults(fn=_report)

    _learn_parser(sub)
    _cost_parser(sub)
    return p


def _learn_parser(sub) -> None:
    learn = sub.add_parser("learn", help="train TinyTransformers from scratch and watch routes form")
    lsub = learn.add_subparsers(dest="experiment", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", help="folder for the PNG, JSON and HTML (none written without it)")
    common.add_argument("--seed", type=int, help="seed of the init and the batches (default 0)")
    common.add_argument("--steps", type=int, help="training steps per model")
    ind = lsub.add_parser(
        "induction", parents=[common], help="an induction circuit forms: phase change, heads, ablation"
    )
    ind.add_argument("--layers", type=int, help="default 2")
    ind.add_argument("--heads", type=int, help="heads per layer (default 4)")
    ind.add_argument("--width", type=int, help="d_model (default 64)")
    ind.add_argument("--ff", type=int, help="d_ff of feed-forward layers; 0 = attention-only (default)")
    ind.add_argument(
        "--positions", choices=("learned", "sinusoidal", "rope"), help="default rope (learned with --fixed-offset)"
    )
    ind.add_argument("--every", type=int, help="evaluate every K steps (default 25)")
    ind.add_argument(
        "--fixed-offset",
        type=int,
        nargs="?",
        const=24,
        metavar="D",
        help="the shortcut contrast: the repeat always D positions after the first copy (default 24)",
    )
    sc = lsub.add_parser("scale", parents=[common], help="with and without 1/√d_k at head dims 16…256")
    sc.add_argument("--head-dims", type=int, nargs="+", help="default 16 32 64 128 256")
    sc.add_argument("--every", type=int, help="evaluate every K steps (default 50)")
    hd = lsub.add_parser("heads", parents=[common], help="1, 2, 4, 8 heads on a mixture of routes, then pruning")
    hd.add_argument("--head-counts", type=int, nargs="+", help="default 1 2 4 8")
    hd.add_argument("--width", type=int, help="d_model, fixed across head counts (default 128)")
    fl = lsub.add_parser("ff", parents=[common], help="attention-only versus feed-forward stacks at the same budget")
    fl.add_argument("--vocab", type=int, help="tokens in the table task (default 128)")
    ca = lsub.add_parser(
        "crossattn", parents=[common], help="an encoder-decoder: prune heads per attention mode, swap cross maps"
    )
    ca.add_argument("--length", type=int, help="content tokens in a source (default 6)")
    ca.add_argument("--heads", type=int, help="heads per attention layer (default 4)")
    learn.set_defaults(fn=_learn)


def _cost_parser(sub) -> None:
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
    _json_flag(kv, "exact integer bytes")
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
    sim.add_argument("--plot", help="PNG of memory use over time (none without it)")
    _json_flag(sim, "the figures")
    sim.set_defaults(fn=_cost_simulate, layers=None, heads=None, kv_heads=None, head_dim=None)

    bl = csub.add_parser("bill", help="FLOPs and memory of full, causal, window and ProbSparse attention vs length")
    bl.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    _json_flag(bl, "the measurements")
    bl.add_argument("--plot", help="PNG: time and memory against length (none without it)")
    bl.add_argument("--markdown", action="store_true", help="also print the table as markdown")
    bl.set_defaults(fn=_cost_bill)


# ------------------------------------------------------------------------------------ main


def refusal_line(e: InputError, command: argparse.ArgumentParser) -> str:
    """The one line for a refusal, with fields named as the flags the user typed.

    The library names fields (``kv_heads``); here each becomes its flag (``--kv-heads``) where it
    stands as a name: at the start of the message, before a value (``dtype 'fp4'``), or spelled
    with an underscore. A message that does not name its field gets the flag in front.
    """
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    flags = {a.dest: max(a.option_strings, key=len) for a in command._actions if a.option_strings}
    named = False
    for field, flag in flags.items():
        pattern = rf"(?<![\w-]){re.escape(field)}(?=[ :,]|$)"
        if "_" in field:
            msg, n = re.subn(pattern, flag, msg)
        else:  # a plain word: only where it names the field, first in the line or before its value
            msg, n = re.subn(
                rf"^{re.escape(field)}(?=[ :])|(?<![\w-]){re.escape(field)}(?= ['\"\d\[-])", flag, msg, count=1
            )
        named |= bool(n) and field == e.field
    if e.field in flags and not named:
        msg = f"{flags[e.field]}: {msg}"
    return msg


def command_parser(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The (sub)subparser that parsed this command line: its options are the flags to name."""
    p = parser
    while True:
        sub = next((a for a in p._actions if isinstance(a, argparse._SubParsersAction)), None)
        name = getattr(args, sub.dest, None) if sub else None
        if name not in (sub.choices if sub else {}):
            return p
        p = sub.choices[name]


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except InputError as e:
        from .read.corpus_read import CorpusInterrupted

        if isinstance(e, CorpusInterrupted):  # Ctrl-C: where it stopped, how to resume
            print(f"interrupted: {e}", file=sys.stderr)
            return 130
        print(f"error: {refusal_line(e, command_parser(parser, args))}", file=sys.stderr)  # one line, never a traceback
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `attnroute … | head`: the reader left; nothing more to say
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
