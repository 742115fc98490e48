"""`attnroute patch | routes`: your question, your metric — activation patching and route attribution."""

from __future__ import annotations

from ..promptset import METRIC_FIELDS, bundled_prompts
from ..settings import PATCH_SITES, PatchSettings, RoutesSettings
from .common import (
    deliver,
    emit_json,
    int_list,
    json_flag,
    later_rank,
    model_flag,
    names,
    outputs,
    read_progress,
    say,
    tables,
)

METRICS_HELP = (
    f"the metric, one value per prompt: {', '.join(METRIC_FIELDS)} (default logit-diff: logit(answer) − "
    "logit(wrong) at the last position; cosine is the encoders')"
)


def pair_flags(p, prompts_help: str) -> None:
    p.add_argument("--prompts", help=prompts_help)
    p.add_argument("--clean", help="one clean prompt (with --corrupt), instead of --prompts")
    p.add_argument("--corrupt", help="its corrupted twin: the same number of tokens")
    p.add_argument("--metric", default="logit-diff", help=METRICS_HELP)
    p.add_argument("--answer", help="the answer token (e.g. ' Mary'), for rows that do not name their own")
    p.add_argument("--wrong", help="the wrong answer token, likewise")
    model_flag(p)


def add(sub) -> None:
    pa = sub.add_parser("patch", help="activation patching between clean and corrupted prompts, with your metric")
    pair_flags(pa, "a .jsonl of {clean, corrupt, answer, wrong} rows, or 'ioi' for the bundled IOI templates")
    pa.add_argument(
        "--direction",
        default="denoising",
        help="denoising: run corrupt, patch in clean (default); noising: the reverse",
    )
    pa.add_argument("--sites", default="head", help=f"what is patched, comma-separated: {', '.join(PATCH_SITES)}")
    pa.add_argument(
        "--positions",
        default="all",
        help="all (default), each (every position: [L, H, T]), token indices or a word of the prompt",
    )
    pa.add_argument(
        "--exact",
        default="settle",
        help="settle (default: the estimate's top until the exact top 10 holds), all, or a number",
    )
    pa.add_argument("--checkpoint", help="save the per-prompt results here after every round; rerun to resume")
    json_flag(pa, "the result")
    pa.add_argument("--csv", help="write one row per component as CSV")
    pa.add_argument("--plot", help="write the layers × heads heatmaps (PNG)")
    pa.set_defaults(fn=patch)

    ro = sub.add_parser("routes", help="route attribution: each query→key route's effect on your metric")
    ro.add_argument("text", nargs="?", help="the text (or --prompts / --clean and --corrupt)")
    pair_flags(ro, "a .jsonl of prompt pairs of one length (the gradient taken on the clean runs)")
    ro.add_argument("--top", type=int, default=20, help="routes kept (default 20)")
    ro.add_argument("--verify", type=int, default=10, help="of those, knocked out exactly (default 10)")
    ro.add_argument("--layers", help="only these layers, comma-separated (default all)")
    json_flag(ro, "the result")
    ro.add_argument("--csv", help="write one row per kept route as CSV")
    ro.add_argument("--plot", help="write the top routes drawn on the tokens (PNG)")
    ro.set_defaults(fn=routes)


def _files(args) -> dict:
    return {"json": args.json, "csv": args.csv, "plot": args.plot}


def patch(args) -> int:
    files = {**_files(args), "checkpoint": args.checkpoint}
    outputs({"model": args.model, "prompts": args.prompts}, files, {"plot": (".png",), "csv": (".csv",)})
    fields = {
        f: getattr(args, f)
        for f in (
            "model",
            "clean",
            "corrupt",
            "answer",
            "wrong",
            "metric",
            "direction",
            "positions",
            "exact",
            "checkpoint",
        )
    }
    settings = PatchSettings(**fields, prompts=bundled_prompts(args.prompts), sites=names(args.sites) or ())
    from ..read.patching import patch as run

    with read_progress() as progress:
        result = run(settings=settings, progress=progress).to_dict()
    from ..show.patching_tables import PATCH_COLUMNS, patch_tables

    return show(result, patch_tables(result), args, result["rows"], PATCH_COLUMNS)


def routes(args) -> int:
    outputs({"model": args.model, "prompts": args.prompts}, _files(args), {"plot": (".png",), "csv": (".csv",)})
    fields = {
        f: getattr(args, f) for f in ("model", "text", "clean", "corrupt", "answer", "wrong", "metric", "top", "verify")
    }
    settings = RoutesSettings(**fields, prompts=bundled_prompts(args.prompts), layers=int_list(args.layers, "layers"))
    from ..read.patching.route_attribution import route_attribution

    with read_progress() as progress:
        result = route_attribution(settings=settings, progress=progress).to_dict()
    from ..show.patching_tables import ROUTE_COLUMNS, routes_table

    return show(result, [routes_table(result)], args, result["routes"], ROUTE_COLUMNS)


def show(result: dict, shown: list, args, rows: list, columns: tuple) -> int:
    """The tokens that ran, the tables; then the JSON and CSV (the work is kept), then the figure. Under
    torchrun every rank holds the same result and rank 0 alone shows and writes it."""
    from ..show.patching_tables import csv_text, tokens_line

    if later_rank():
        return 0
    first = result["meta"]["prompts"][0]
    say(f"tokens (row {first['row']}, clean): {tokens_line(first['clean'])}")
    if first["corrupt"] != first["clean"]:
        say(f"tokens (row {first['row']}, corrupt): {tokens_line(first['corrupt'])}")
    positions = result["meta"].get("positions", {})
    if "resolved" in positions:
        say(f"positions {positions['positions']!r} resolved to {positions['resolved']}")
    out = tables(args.json)
    for t in shown:
        out.print(t)
    emit_json(result, args.json)
    if args.csv:
        deliver(args.csv, "csv", csv_text(rows, columns).encode("utf-8"))
    if args.plot:
        from ..show.findings import png_bytes

        deliver(args.plot, "plot", png_bytes(result))
    return 0
