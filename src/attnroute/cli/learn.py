"""`attnroute learn EXPERIMENT`: train TinyTransformers from scratch and watch routes form."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from ..settings.learn import POSITIONS, CrossSettings, FFSettings, InductionSettings, PruneSettings, ScaleSettings
from .common import STDOUT, console, deliver, emit_json, json_flag, option, outputs, tables

EXPERIMENTS = {  # name -> (settings, help, its flags beside --seed and --steps)
    "induction": (
        InductionSettings,
        "an induction circuit forms: phase change, heads, ablation",
        ("--layers", "--heads", "--width", "--ff", "--every"),
    ),
    "scale": (ScaleSettings, "with and without 1/√d_k at head dims 16…256", ("--head-dims", "--every")),
    "pruning": (PruneSettings, "1, 2, 4, 8 heads on a mixture of routes, then pruning", ("--head-counts", "--width")),
    "ff": (FFSettings, "attention-only versus feed-forward stacks at the same budget", ("--vocab",)),
    "crossattn": (
        CrossSettings,
        "an encoder-decoder: prune heads per attention mode, swap cross maps",
        ("--length", "--heads"),
    ),
}


def add(sub) -> None:
    learn = sub.add_parser("learn", help="train TinyTransformers from scratch and watch routes form")
    lsub = learn.add_subparsers(dest="experiment", required=True)
    for name, (cls, help_, flags) in EXPERIMENTS.items():
        p = lsub.add_parser(name, help=help_)
        p.add_argument("--out", help="folder for the PNG, JSON and HTML (none written without it)")
        json_flag(p, "the result")
        for flag in ("--seed", "--steps", *flags):
            field = flag[2:].replace("-", "_")
            nargs = "+" if isinstance(cls.default(field), tuple) else None
            option(p, flag, cls, type=int, nargs=nargs)
        if name == "induction":
            option(p, "--positions", cls, choices=POSITIONS)
            option(
                p,
                "--fixed-offset",
                cls,
                type=int,
                nargs="?",
                const=24,
                metavar="D",
                help="the shortcut contrast: the repeat always D positions after the first copy (D: default 24)",
            )
    learn.set_defaults(fn=run)


def run(args) -> int:
    from ..learn import run_experiment

    Settings = EXPERIMENTS[args.experiment][0]
    settings = Settings(**options(args, Settings))
    name = args.experiment + ("-fixed-offset" if getattr(args, "fixed_offset", None) else "")
    outputs({}, {"json": args.json}, dirs={"out": args.out})
    out = Path(args.out) if args.out else None
    if args.experiment == "induction" and out is not None and settings.positions == "rope":
        settings = settings.replace(save=str(out / f"{name}-model"))  # where `--model` reads it, with prompt pairs
    with steps_bar(name) as progress:
        result = run_experiment(args.experiment, settings, progress=progress).to_dict()
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
