"""`attnroute knockout | swap | needle`: questions asked by intervening on routes of a causal LM."""

from __future__ import annotations

from ..settings import KnockoutSettings, NeedleSettings, SwapSettings
from .common import deliver, emit_json, int_list, json_flag, model_flag, outputs, read_progress, say, tables


def add(sub) -> None:
    ko = sub.add_parser("knockout", help="cut one route (query → key edges) in a window of layers, slid over depth")
    ko.add_argument("text", help="the prompt")
    ko.add_argument("--from", dest="source", required=True, help="query positions: a word of the text or indices 3,4")
    ko.add_argument("--to", dest="target", required=True, help="key positions: a word of the text or indices")
    ko.add_argument("--window", type=int, default=5, help="layers per window (default 5)")
    ko.add_argument("--heads", help="only these heads, comma-separated (default all)")
    ko.add_argument("--token", dest="target_token", help="the target token (default: the model's own top prediction)")
    metric_flags(ko)
    model_flag(ko)
    ko.add_argument("--plot", help="write the figure (PNG) here")
    json_flag(ko, "the result")
    ko.set_defaults(fn=knockout)

    sw = sub.add_parser("swap", help="run prompt B with prompt A's attention maps, layer by layer (prompt-to-prompt)")
    sw.add_argument("prompt_a", help="the prompt whose maps are used")
    sw.add_argument("prompt_b", help="the prompt that runs (same number of tokens)")
    sw.add_argument("--window", type=int, default=1, help="layers swapped together (default 1)")
    sw.add_argument("--heads", help="only these heads, comma-separated (default all)")
    metric_flags(sw)
    model_flag(sw)
    json_flag(sw, "the result")
    sw.set_defaults(fn=swap)

    nd = sub.add_parser("needle", help="a needle at a random depth in growing context; does it dilute retrieval?")
    nd.add_argument("--lengths", default="256,512,1024,2048,4096,8192", help="context lengths, comma-separated")
    nd.add_argument("--seed", type=int, default=0, help="the needle's depth (default 0)")
    model_flag(nd)
    nd.add_argument("--plot", help="write the figure (PNG) here")
    json_flag(nd, "the result")
    nd.set_defaults(fn=needle)


def metric_flags(p) -> None:
    p.add_argument("--metric", help="also your metric at the last position: logit-diff, prob, logprob or kl")
    p.add_argument("--answer", help="the metric's answer token (e.g. ' Mary')")
    p.add_argument("--wrong", help="the metric's wrong token")


def knockout(args) -> int:
    outputs({"model": args.model}, {"json": args.json, "plot": args.plot}, {"plot": (".png",)})
    fields = {f: getattr(args, f) for f in ("model", "text", "source", "target", "window", "target_token", "metric",
                                            "answer", "wrong")}  # fmt: skip
    settings = KnockoutSettings(**fields, heads=int_list(args.heads, "heads"))
    from ..read.experiments import knockout as run

    with read_progress() as progress:
        result = run(settings=settings, progress=progress).to_dict()
    from ..show.terminal import knockout_table

    return show(result, knockout_table(result), args)


def swap(args) -> int:
    outputs({"model": args.model}, {"json": args.json})
    fields = {f: getattr(args, f) for f in ("model", "prompt_a", "prompt_b", "window", "metric", "answer", "wrong")}
    settings = SwapSettings(**fields, heads=int_list(args.heads, "heads"))
    from ..read.experiments import swap as run

    with read_progress() as progress:
        result = run(settings=settings, progress=progress).to_dict()
    from ..show.terminal import swap_table

    return show(result, swap_table(result), args)


def needle(args) -> int:
    outputs({"model": args.model}, {"json": args.json, "plot": args.plot}, {"plot": (".png",)})
    settings = NeedleSettings(model=args.model, lengths=int_list(args.lengths, "lengths"), seed=args.seed)
    from ..read.experiments import needle as run

    with read_progress() as progress:
        result = run(settings=settings, progress=progress).to_dict()
    from ..show.terminal import needle_table

    return show(result, needle_table(result), args)


def show(result: dict, table, args) -> int:
    """The tokens that ran and what words resolved to; the table; the JSON first (minutes of work are kept
    even if drawing fails), then the figure."""
    from ..show.patching_tables import tokens_line

    for key, label in (("tokens", "tokens"), ("tokens_a", "tokens (A)"), ("tokens_b", "tokens (B)")):
        if key in result:
            say(f"{label}: {tokens_line(result[key])}")
    for r in result.get("resolved", {}).values():
        say(r["said"])
    tables(args.json).print(table)
    emit_json(result, args.json)
    if getattr(args, "plot", None):
        from ..show.findings import png_bytes

        deliver(args.plot, "plot", png_bytes(result))
    return 0
