"""`attnroute knockout | swap | needle`: questions asked by intervening on routes of a causal LM."""

from __future__ import annotations

from ..errors import InputError
from ..settings import CrossKnockoutSettings, CrossSwapSettings, KnockoutSettings, NeedleSettings, SwapSettings
from .common import (
    deliver,
    emit_json,
    int_list,
    json_flag,
    model_flag,
    option,
    outputs,
    read_progress,
    read_text_arg,
    say,
    settings_from,
    tables,
)

K, S, N = KnockoutSettings, SwapSettings, NeedleSettings
CK, CS = CrossKnockoutSettings, CrossSwapSettings
HEADS = {"heads": ("heads", lambda v: int_list(v, "heads"))}


def add(sub) -> None:
    ko = sub.add_parser("knockout", help="cut one route (query → key edges) in a window of layers, slid over depth")
    ko.add_argument("text", nargs="?", help="the prompt (or --file)")
    ko.add_argument("--file", help="read the prompt from this UTF-8 file ('-': standard input)")
    option(ko, "--from", K, "source", required=True)
    option(ko, "--to", K, "target", required=True)
    option(ko, "--window", K, type=int)
    option(ko, "--heads", K, help="only these heads, comma-separated (default all)")
    option(ko, "--token", K, "target_token")
    metric_flags(ko, K)
    model_flag(ko)
    ko.add_argument(
        "--audio",
        help="a speech model's clip (.wav or a bundled clip): cut --from (a word of the transcript, which the "
        "positional text gives, else greedy decoding) → --to (word: its own frames; another word; or seconds a-b) "
        "in cross-attention",
    )
    option(ko, "--seed", K, type=int)
    ko.add_argument("--plot", help="write the figure (PNG) here")
    json_flag(ko, "the result")
    ko.set_defaults(fn=knockout)

    sw = sub.add_parser("swap", help="run prompt B with prompt A's attention maps, layer by layer (prompt-to-prompt)")
    sw.add_argument("prompt_a", nargs="?", help="the prompt whose maps are used (or --file-a)")
    sw.add_argument("prompt_b", nargs="?", help="the prompt that runs, of as many tokens (or --file-b)")
    sw.add_argument("--file-a", help="read prompt A from this UTF-8 file ('-': standard input)")
    sw.add_argument("--file-b", help="read prompt B from this UTF-8 file")
    option(sw, "--window", S, type=int)
    option(sw, "--heads", S, help="only these heads, comma-separated (default all)")
    metric_flags(sw, S)
    model_flag(sw)
    option(sw, "--audio-a", CS, help="a speech model: the clip whose cross-attention maps are used")
    option(sw, "--audio-b", CS, help="the clip transcribed with them")
    json_flag(sw, "the result")
    sw.set_defaults(fn=swap)

    nd = sub.add_parser("needle", help="a needle at a random depth in growing context; does it dilute retrieval?")
    option(nd, "--lengths", N, help="context lengths, comma-separated")
    option(nd, "--seed", N, type=int)
    model_flag(nd)
    nd.add_argument("--plot", help="write the figure (PNG) here")
    json_flag(nd, "the result")
    nd.set_defaults(fn=needle)


def metric_flags(p, cls) -> None:
    option(p, "--metric", cls, help="also your metric at the last position: logit-diff, prob, logprob or kl")
    option(p, "--answer", cls)
    option(p, "--wrong", cls)


def knockout(args) -> int:
    if args.audio is not None:
        return cross_knockout(args)
    outputs({"model": args.model, "file": args.file}, {"json": args.json, "plot": args.plot}, {"plot": (".png",)})
    settings = settings_from(K, args, convert=HEADS, text=read_text_arg(args.text, args.file, required=True))
    from ..read.experiments import knockout as run

    with read_progress() as progress:
        result = run(settings=settings, progress=progress)
    from ..show.knockout import knockout_table

    return show(result, knockout_table(result), args)


def cross_knockout(args) -> int:
    outputs({"model": args.model, "file": args.file, "audio": args.audio}, {"json": args.json})
    if args.plot:
        raise InputError("`plot` draws a text knockout; a cross-stream knockout writes --json", field="plot")
    text = read_text_arg(args.text, args.file)
    settings = settings_from(CK, args, convert=HEADS, skip=("plot",), elsewhere="applies to a text knockout", text=text)
    from ..read.speech import cross_knockout as run

    with read_progress() as progress:
        result = run(settings=settings, progress=progress)
    from ..show.cross import cross_table

    return show(result, cross_table(result), args)


def swap(args) -> int:
    if args.audio_a is not None or args.audio_b is not None:
        return cross_swap(args)
    outputs([("model", args.model), ("file_a", args.file_a), ("file_b", args.file_b)], {"json": args.json})
    a = read_text_arg(args.prompt_a, args.file_a, required=True, field="file_a")
    b = read_text_arg(args.prompt_b, args.file_b, required=True, field="file_b")
    settings = settings_from(S, args, convert=HEADS, skip=("file_a", "file_b"), prompt_a=a, prompt_b=b)
    from ..read.experiments import swap as run

    with read_progress() as progress:
        result = run(settings=settings, progress=progress)
    from ..show.swap import swap_table

    return show(result, swap_table(result), args)


def cross_swap(args) -> int:
    outputs({"model": args.model, "audio_a": args.audio_a, "audio_b": args.audio_b}, {"json": args.json})
    settings = settings_from(CS, args, convert=HEADS, elsewhere="applies to a swap of text prompts")
    from ..read.speech import cross_swap as run

    with read_progress() as progress:
        result = run(settings=settings, progress=progress)
    from ..show.cross import cross_table

    return show(result, cross_table(result), args)


def needle(args) -> int:
    outputs({"model": args.model}, {"json": args.json, "plot": args.plot}, {"plot": (".png",)})
    settings = settings_from(N, args, convert={"lengths": ("lengths", lambda v: int_list(v, "lengths"))})
    from ..read.experiments import needle as run

    with read_progress() as progress:
        result = run(settings=settings, progress=progress)
    from ..show.needle import needle_table

    return show(result, needle_table(result), args)


def show(result, table, args) -> int:
    """The tokens that ran and what words resolved to; the table; the JSON first (minutes of work are kept
    even if drawing fails), then the figure."""
    from ..show.text import tokens_line

    for key, label in (("tokens", "tokens"), ("tokens_a", "tokens (A)"), ("tokens_b", "tokens (B)")):
        if getattr(result, key, None) is not None:
            say(f"{label}: {tokens_line(getattr(result, key))}")
    for r in getattr(result, "resolved", {}).values():
        say(r["said"])
    tables(args.json).print(table)
    emit_json(result.to_dict(), args.json)
    if getattr(args, "plot", None):
        from ..show.sections import figure as png_bytes

        deliver(args.plot, "plot", png_bytes(result))
    return 0
