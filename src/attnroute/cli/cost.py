"""`attnroute cost kv | simulate | bill`: what routing costs — KV-cache bytes, paged versus contiguous
serving, and the FLOPs and memory of long context."""

from __future__ import annotations

from ..settings import KV_DTYPES, KVSettings, SimulateSettings
from .common import STDOUT, deliver, emit_json, json_flag, outputs, tables

KV_FIELDS = ("model", "layers", "heads", "kv_heads", "head_dim", "dtype", "window")


def add(sub) -> None:
    cost = sub.add_parser("cost", help="what routing costs: KV-cache bytes, serving memory, the long-context bill")
    csub = cost.add_subparsers(dest="cost_command", required=True)
    kv = csub.add_parser("kv", help="KV-cache footprint of a model or of given sizes")
    kv.add_argument("--model", help="smollm2, minilm, a model directory, a .gguf file or a config.json")
    kv.add_argument("--layers", type=int)
    kv.add_argument("--heads", type=int)
    kv.add_argument("--kv-heads", type=int, help="default: --heads (MHA); 1 = MQA")
    kv.add_argument("--head-dim", type=int)
    kv.add_argument("--dtype", default="fp16", help=f"{', '.join(KV_DTYPES)} (default fp16)")
    kv.add_argument("--context", type=int, default=4096, help="tokens per sequence (default 4096)")
    kv.add_argument("--batch", type=int, default=1)
    kv.add_argument("--window", type=int, help="sliding window: at most W tokens are held")
    json_flag(kv, "exact integer bytes")
    kv.set_defaults(fn=run_kv)

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
    json_flag(sim, "the figures")
    sim.set_defaults(fn=run_simulate, layers=None, heads=None, kv_heads=None, head_dim=None)

    bl = csub.add_parser("bill", help="FLOPs and memory of full, causal, window and ProbSparse attention vs length")
    bl.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    json_flag(bl, "the measurements")
    bl.add_argument("--plot", help="PNG: time and memory against length (none without it)")
    bl.add_argument("--markdown", action="store_true", help="also print the table as markdown")
    bl.set_defaults(fn=run_bill)


def run_kv(args) -> int:
    outputs({"model": args.model}, {"json": args.json})
    settings = KVSettings(**{f: getattr(args, f) for f in KV_FIELDS}, context=args.context, batch=args.batch)
    from ..cost import kv
    from ..show.cost_tables import kv_table

    result = kv(settings)
    emit_json(result, args.json)
    if args.json != STDOUT:
        tables(None).print(kv_table(result))
    return 0


def run_simulate(args) -> int:
    outputs(
        {"requests": args.requests, "model": args.model}, {"json": args.json, "plot": args.plot}, {"plot": (".png",)}
    )
    fields = {f: getattr(args, f) for f in ("requests", "dist", "n", "seed", "budget_gb", "block_size", "max_len")}
    settings = SimulateSettings(kv=KVSettings(**{f: getattr(args, f) for f in KV_FIELDS}), **fields)
    from ..cost.serving import serve_stream
    from ..show.cost_figures import serving_png
    from ..show.cost_tables import simulate_table
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
    from ..show.cost_figures import bill_png
    from ..show.cost_tables import bill_markdown, bill_table
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
