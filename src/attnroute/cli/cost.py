"""`attnroute cost kv | simulate | bill`: what routing costs — KV-cache bytes, paged versus contiguous
serving, and the FLOPs and memory of long context."""

from __future__ import annotations

from ..settings import FitSettings, KVSettings, SimulateSettings
from .common import STDOUT, deliver, emit_json, json_flag, option, outputs, settings_from, tables

KV, SIM = KVSettings, SimulateSettings
KV_FIELDS = ("model", "dtype", "window")  # the KV cache simulate serves


def add(sub) -> None:
    cost = sub.add_parser("cost", help="what routing costs: KV-cache bytes, serving memory, the long-context bill")
    csub = cost.add_subparsers(dest="cost_command", required=True)
    kv = csub.add_parser("kv", help="KV-cache footprint of a model or of given sizes")
    kv_flags(kv)
    for flag in ("--layers", "--heads", "--kv-heads", "--head-dim", "--context", "--batch"):
        option(kv, flag, KV, type=int)
    json_flag(kv, "exact integer bytes")
    kv.set_defaults(fn=run_kv)

    fit = csub.add_parser("fit", help="will a model fit a device for a verb: predicted from its config alone")
    option(fit, "--model", FitSettings, help="a bundled name, a model directory, a .gguf, a hub id or a config.json")
    option(fit, "--dtype", FitSettings)
    option(fit, "--tokens", FitSettings, type=int)
    option(fit, "--verb", FitSettings)
    option(fit, "--device-memory", FitSettings)
    option(fit, "--device", FitSettings)
    json_flag(fit, "the prediction, in bytes")
    fit.set_defaults(fn=run_fit)

    sim = csub.add_parser("simulate", help="serve a request stream with contiguous reservation and with paging")
    option(sim, "--requests", SIM)
    option(sim, "--dist", SIM)
    for flag in ("--n", "--seed", "--block-size", "--max-len"):
        option(sim, flag, SIM, type=int)
    option(sim, "--budget-gb", SIM, type=float)
    kv_flags(sim, "whose KV bytes per token (default smollm2)")
    sim.add_argument("--plot", help="PNG of memory use over time (none without it)")
    json_flag(sim, "the figures")
    sim.set_defaults(fn=run_simulate)

    bl = csub.add_parser("bill", help="FLOPs and memory of full, causal, window and ProbSparse attention vs length")
    bl.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    json_flag(bl, "the measurements")
    bl.add_argument("--plot", help="PNG: time and memory against length (none without it)")
    bl.add_argument("--markdown", action="store_true", help="also print the table as markdown")
    bl.set_defaults(fn=run_bill)


def kv_flags(p, model_help: str | None = None) -> None:
    """The flags of a KV cache that kv and simulate share."""
    option(p, "--model", KV, help=model_help)
    option(p, "--dtype", KV)
    option(p, "--window", KV, type=int)


def run_kv(args) -> int:
    outputs({"model": args.model}, {"json": args.json})
    settings = settings_from(KV, args)
    from ..cost import kv
    from ..show.cost import kv_table

    result = kv(settings)
    emit_json(result, args.json)
    if args.json != STDOUT:
        tables(None).print(kv_table(result))
    return 0


def run_fit(args) -> int:
    outputs({}, {"json": args.json})
    settings = settings_from(FitSettings, args)
    from ..cost import fit
    from ..show.cost import fit_table

    result = fit(settings=settings)
    emit_json(result, args.json)
    if args.json != STDOUT:
        tables(None).print(fit_table(result))
    return 0


def run_simulate(args) -> int:
    outputs(
        {"requests": args.requests, "model": args.model}, {"json": args.json, "plot": args.plot}, {"plot": (".png",)}
    )
    kv = settings_from(KV, args, only=KV_FIELDS, model=args.model or "smollm2")
    settings = settings_from(SIM, args, skip=KV_FIELDS, kv=kv)
    from ..cost.serving import serve_stream
    from ..show.cost import serving_png, simulate_table
    from ..show.plotting import png

    with console_status("serving the stream…") as status:  # a long CSV takes a while: show where it is
        data, results = serve_stream(settings, progress=status.update)
    emit_json(data, args.json)
    if args.json != STDOUT:
        tables(None).print(simulate_table(data, settings.budget_gb))
    if args.plot:
        deliver(args.plot, "plot", png(lambda f: serving_png(results, f, data["capacity_tokens"])))
    return 0


def run_bill(args) -> int:
    outputs({}, {"json": args.json, "plot": args.plot}, {"plot": (".png",)})
    from ..bench import bill
    from ..show.cost import bill_markdown, bill_png, bill_table
    from ..show.plotting import png

    with console_status("measuring…") as status:
        data = bill.rows(tuple(args.lengths), progress=status.update)
    emit_json(data, args.json)
    if args.plot:
        deliver(args.plot, "plot", png(lambda f: bill_png(data, f)))
    tables(args.json).print(bill_table(data))
    if args.markdown:
        tables(args.json).print(bill_markdown(data), markup=False, highlight=False)
    return 0


def console_status(text: str):
    from .common import console

    return console().status(text)
