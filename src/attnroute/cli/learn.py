"""`attnroute learn EXPERIMENT`: train TinyTransformers from scratch and watch routes form."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

from ..errors import InputError
from .common import STDOUT, console, deliver, emit_json, json_flag, outputs, tables

MAY_BE_ZERO = {"seed", "ff"}  # ff = 0 is the attention-only model the help documents


def add(sub) -> None:
    learn = sub.add_parser("learn", help="train TinyTransformers from scratch and watch routes form")
    lsub = learn.add_subparsers(dest="experiment", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", help="folder for the PNG, JSON and HTML (none written without it)")
    json_flag(common, "the result")
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
    hd = lsub.add_parser("pruning", parents=[common], help="1, 2, 4, 8 heads on a mixture of routes, then pruning")
    hd.add_argument("--head-counts", type=int, nargs="+", help="default 1 2 4 8")
    hd.add_argument("--width", type=int, help="d_model, fixed across head counts (default 128)")
    fl = lsub.add_parser("ff", parents=[common], help="attention-only versus feed-forward stacks at the same budget")
    fl.add_argument("--vocab", type=int, help="tokens in the table task (default 128)")
    ca = lsub.add_parser(
        "crossattn", parents=[common], help="an encoder-decoder: prune heads per attention mode, swap cross maps"
    )
    ca.add_argument("--length", type=int, help="content tokens in a source (default 6)")
    ca.add_argument("--heads", type=int, help="heads per attention layer (default 4)")
    learn.set_defaults(fn=run)


def run(args) -> int:
    from ..learn import EXPERIMENTS

    run_experiment, Settings = EXPERIMENTS[args.experiment]
    settings = Settings(**options(args, Settings))
    name = args.experiment + ("-fixed-offset" if getattr(args, "fixed_offset", None) else "")
    outputs({}, {"json": args.json}, dirs={"out": args.out})
    out = Path(args.out) if args.out else None
    with steps_bar(name) as progress:
        result = run_experiment(settings, progress=progress)
    show(result, name, out, args.json)
    return 0


def options(args, Settings) -> dict:
    """The settings fields given on the command line (an option left out keeps its default)."""
    opts = {f.name: getattr(args, f.name) for f in fields(Settings) if getattr(args, f.name, None) is not None}
    for k in ("head_dims", "head_counts"):
        if k in opts:
            opts[k] = tuple(opts[k])
    if args.experiment == "induction" and opts.get("fixed_offset") and "positions" not in opts:
        opts["positions"] = "learned"  # the shortcut needs absolute positions to exist
    for k, v in opts.items():
        for x in v if isinstance(v, tuple) else (v,):
            if isinstance(x, int) and not isinstance(x, bool) and (x < 0 or (x == 0 and k not in MAY_BE_ZERO)):
                raise InputError(f"{k} must be {'>= 0' if k in MAY_BE_ZERO else 'positive'}, got {x}", field=k)
    return opts


def steps_bar(name: str):
    """A rich bar of training steps; the experiment calls ``progress(step, total)``."""
    from contextlib import contextmanager

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    @contextmanager
    def bar():
        columns = (TextColumn(f"learn {name}"), BarColumn(), TextColumn("{task.completed}/{task.total} steps"))
        with Progress(*columns, TimeElapsedColumn(), console=console(), transient=True) as p:
            task = p.add_task(name, total=None)
            yield lambda step, total: p.update(task, completed=step, total=total)

    return bar()


def show(result: dict, name: str, out: Path | None, json_path: str | None) -> None:
    """Tables and verdict lines; the JSON, PNG and one-page HTML in ``out``; the JSON where --json says."""
    from ..show import learn as learn_page
    from ..show import learn_figures
    from ..show.jsonout import json_text
    from ..show.learn import learn_tables

    for table in learn_tables(result):
        tables(json_path).print(table)
    if json_path != STDOUT:
        print("\n".join(result["verdict"]["lines"]))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        png = learn_figures.png(result)
        deliver(out / f"{name}.json", "out", json_text(result, indent=1).encode("utf-8"))
        deliver(out / f"{name}.png", "out", png)
        deliver(out / f"{name}.html", "out", learn_page.page([result], [png]).encode("utf-8"))
    emit_json(result, json_path)
