"""`attnroute patch | routes | circuit | why`: your question, your metric — activation patching, route
attribution, circuits (edges between heads, settled exactly, and the smallest circuit), and why a head
attends where it does (its score split into query-side × key-side pairs)."""

from __future__ import annotations

from ..bundled import prompts_path
from ..errors import InputError
from ..promptset import METRIC_FIELDS
from ..settings import (
    CircuitSettings,
    PatchSettings,
    RoutesSettings,
    SpeechPatchSettings,
    SpeechRoutesSettings,
    WhySettings,
)
from .common import (
    NOT_SETTINGS,
    deliver,
    emit_json,
    int_list,
    json_flag,
    later_rank,
    model_flag,
    names,
    option,
    outputs,
    read_progress,
    say,
    settings_from,
    some_names,
    tables,
)

P, R, C, SP, SR = PatchSettings, RoutesSettings, CircuitSettings, SpeechPatchSettings, SpeechRoutesSettings
METRICS_HELP = (
    f"the metric, one value per prompt: {', '.join(METRIC_FIELDS)} (logit-diff: logit(answer) − logit(wrong) at the "
    "last position; cosine is the encoders')"
)
PAIR_FLAGS = {"prompts": ("prompts", prompts_path)}


def pair_flags(p, prompts_help: str) -> None:
    p.add_argument("--prompts", help=prompts_help)
    option(p, "--clean", P)
    option(p, "--corrupt", P)
    option(p, "--metric", P, help=METRICS_HELP)
    option(p, "--answer", P)
    option(p, "--wrong", P)
    option(p, "--skip-bad", P, action="store_true")
    option(p, "--max-memory", P, metavar="SIZE")
    model_flag(p)


def add(sub) -> None:
    pa = sub.add_parser("patch", help="activation patching between clean and corrupted prompts, with your metric")
    pair_flags(pa, "a .jsonl of {clean, corrupt, answer, wrong} rows, or 'ioi' for the bundled IOI templates")
    option(pa, "--direction", P)
    option(pa, "--sites", P, help="what is patched, comma-separated: head, layer, q, k, v")
    option(pa, "--positions", P)
    option(pa, "--exact", P)
    option(pa, "--top", P, type=int)
    option(pa, "--checkpoint", P)
    option(pa, "--no-checkpoint", P, action="store_true")
    json_flag(pa, "the result")
    pa.add_argument("--csv", help="write one row per component as CSV")
    pa.add_argument("--plot", help="write the layers × heads heatmaps (PNG)")
    pa.add_argument("--audio-clean", help="a speech model: the clean clip (.wav or bundled, e.g. paris)")
    pa.add_argument("--audio-corrupt", help="the corrupted clip: one word spoken differently (e.g. rome)")
    option(
        pa, "--text", SP, help="with audio: the decoder text both runs read (default: the words the transcripts share)"
    )
    pa.set_defaults(fn=patch)

    ro = sub.add_parser("routes", help="route attribution: each query→key route's effect on your metric")
    ro.add_argument("text", nargs="?", help="the text (or --prompts / --clean and --corrupt)")
    ro.add_argument("--file", help="read the text from this UTF-8 file ('-': standard input)")
    pair_flags(ro, "a .jsonl of prompt pairs of one length (the gradient taken on the clean runs)")
    option(ro, "--top", R, type=int)
    option(ro, "--verify", R, type=int)
    option(ro, "--layers", R, help="only these layers, comma-separated (default all)")
    option(ro, "--checkpoint", R)
    option(ro, "--no-checkpoint", R, action="store_true")
    json_flag(ro, "the result")
    ro.add_argument("--csv", help="write one row per kept route as CSV")
    ro.add_argument("--plot", help="write the top routes drawn on the tokens (PNG)")
    ro.add_argument(
        "--audio",
        help="a speech model's clip (.wav or bundled): its routes (default: cross-attention, decoder row → frame) "
        "on logit(--answer) − logit(--wrong), the decoder reading the transcript up to the answer (or the text)",
    )
    ro.set_defaults(fn=routes)

    ci = sub.add_parser(
        "circuit", help="circuits: which head feeds which (q, k, v), every edge estimated, the top settled exactly"
    )
    pair_flags(ci, "a .jsonl of {clean, corrupt, answer, wrong} rows, or 'ioi' / 'induction' (bundled)")
    option(ci, "--direction", C)
    option(ci, "--ig-steps", C, type=int)
    option(ci, "--exact", C)
    option(ci, "--top", C, type=int)
    option(ci, "--limit", C, type=int)
    option(ci, "--edges", C, help="edges measured exactly whatever their estimate, comma-separated: L5.H1>L18.KV2.k")
    option(ci, "--faithfulness", C, type=float)
    option(ci, "--ablation", C)
    option(ci, "--checkpoint", C)
    option(ci, "--no-checkpoint", C, action="store_true")
    json_flag(ci, "the result")
    ci.add_argument("--csv", help="write one row per edge as CSV")
    ci.add_argument("--plot", help="write the circuit drawn as a graph (PNG)")
    option(ci, "--audio-clean", C, help="a speech model (default whisper-tiny): the clean clip (.wav or bundled)")
    option(ci, "--audio-corrupt", C, help="the corrupted clip: the same words, one spoken differently (e.g. rome)")
    option(ci, "--text", C)
    ci.set_defaults(fn=circuit)
    _add_why(sub)


def _add_why(sub) -> None:
    W = WhySettings
    wh = sub.add_parser("why", help="why a head attends from i to j: the score split into query × key components")
    wh.add_argument("text", nargs="?", help="the text (or --file)")
    wh.add_argument("--file", help="read the text from this UTF-8 file ('-': standard input)")
    option(wh, "--head", W, required=True)
    option(wh, "--query", W)
    option(wh, "--key", W)
    option(wh, "--routes", W)
    option(wh, "--top", W, type=int)
    option(wh, "--audio", W, help="a speech model's clip (.wav or bundled): the text, if given, is its transcript")
    model_flag(wh)
    json_flag(wh, "the result")
    wh.add_argument("--plot", help="write the top pairs drawn as a graph (PNG)")
    wh.set_defaults(fn=why)

    co = sub.add_parser("composition", help="Q-, K-, V-composition between every pair of heads, from the weights")
    model_flag(co)
    json_flag(co, "the result (q, k, v as [sender layer][head][receiver layer][head])")
    co.set_defaults(fn=composition)


def _files(args) -> dict:
    return {"json": args.json, "csv": args.csv, "plot": args.plot}


def speech(args) -> int:
    """patch --audio-clean A --audio-corrupt B: every head of a speech model, exactly (read/speech/patch.py)."""
    outputs({"model": args.model, "audio_clean": args.audio_clean, "audio_corrupt": args.audio_corrupt}, _files(args))
    keep = {"audio_clean", "audio_corrupt", "model", "text", "answer", "wrong", "json", "csv"}
    extra = [k for k, v in vars(args).items() if v is not None and k not in keep and k not in NOT_SETTINGS]
    if extra:
        raise InputError(f"`{extra[0]}` applies to text prompts; two clips take answer, wrong, text, json, csv")
    settings = SP(
        model=args.model or SP.model,
        clean=args.audio_clean or "",
        corrupt=args.audio_corrupt or "",
        text=args.text,
        answer=args.answer,
        wrong=args.wrong,
    )
    from ..read.speech import speech_patch

    with read_progress() as progress:
        result = speech_patch(settings=settings, progress=progress)
    from ..show.cross import SPEECH_COLUMNS, speech_patch_table

    return show_speech(result, speech_patch_table(result), args, result.to_dict()["rows"], SPEECH_COLUMNS)


def patch(args) -> int:
    if args.audio_clean is not None or args.audio_corrupt is not None:
        return speech(args)
    if args.text is not None:
        raise InputError("`text` is the decoder text of a patch between two clips; give --audio-clean too")
    files = {**_files(args), "checkpoint": args.checkpoint}
    outputs({"model": args.model, "prompts": args.prompts}, files, {"plot": (".png",), "csv": (".csv",)})
    convert = {**PAIR_FLAGS, "sites": ("sites", lambda v: names(v) or ())}
    settings = settings_from(P, args, convert=convert)
    from ..read.patching import patch as run
    from ..show.patch import finished_sites

    with read_progress(args.json, finished_sites()) as progress:
        result = run(settings=settings, progress=progress)
    from ..show.patch import PATCH_COLUMNS, patch_tables

    return show(result, patch_tables(result), args, result.rows, PATCH_COLUMNS)


def speech_routes(args) -> int:
    """routes --audio CLIP: route attribution across streams (read/speech/routes.py)."""
    outputs({"model": args.model, "audio": args.audio, "file": args.file}, _files(args), {"csv": (".csv",)})
    settings = speech_routes_settings(args)
    from ..read.speech import speech_routes as run

    with read_progress() as progress:
        result = run(settings=settings, progress=progress)
    from ..show.cross import SPEECH_ROUTE_COLUMNS, speech_routes_table

    return show_speech(result, speech_routes_table(result), args, result.routes, SPEECH_ROUTE_COLUMNS)


def show_speech(result, table, args, rows: list, columns: tuple) -> int:
    """A clip's result: its table, then the JSON and the CSV of its rows."""
    from ..show.text import csv_text

    tables(args.json).print(table)
    emit_json(result.to_dict(), args.json)
    if args.csv:
        deliver(args.csv, "csv", csv_text(rows, columns).encode("utf-8"))
    return 0


def speech_routes_settings(args) -> SpeechRoutesSettings:
    """The flags of routes --audio; the text-only ones refused by name."""
    from .common import read_text_arg

    for flag in ("prompts", "clean", "corrupt", "plot", "metric"):
        if getattr(args, flag) is not None:
            raise InputError(
                f"`{flag}` applies to text; with --audio, routes takes --answer, --wrong, a text, "
                "--top, --verify, --layers"
            )
    given = dict(
        model=args.model,
        audio=args.audio,
        answer=args.answer or "",
        wrong=args.wrong,
        text=read_text_arg(args.text, args.file),
        top=args.top,
        verify=args.verify,
        layers=int_list(args.layers, "layers"),
    )
    return SR(**{k: v for k, v in given.items() if v is not None})


def routes(args) -> int:
    from .common import read_text_arg

    if args.audio is not None:
        return speech_routes(args)
    outputs(
        {"model": args.model, "prompts": args.prompts, "file": args.file},
        {**_files(args), "checkpoint": args.checkpoint},
        {"plot": (".png",), "csv": (".csv",)},
    )
    convert = {**PAIR_FLAGS, "layers": ("layers", lambda v: int_list(v, "layers"))}
    settings = settings_from(R, args, convert=convert, text=read_text_arg(args.text, args.file))
    from ..read.patching.route_attribution import route_attribution

    with read_progress(args.json) as progress:
        result = route_attribution(settings=settings, progress=progress)
    from ..show.routes import ROUTE_COLUMNS, routes_tables

    return show(result, routes_tables(result), args, result.routes, ROUTE_COLUMNS)


def circuit(args) -> int:
    files = {**_files(args), "checkpoint": args.checkpoint}
    clips = {"audio_clean": args.audio_clean, "audio_corrupt": args.audio_corrupt}
    outputs({"model": args.model, "prompts": args.prompts, **clips}, files, {"plot": (".png",), "csv": (".csv",)})
    convert = {**PAIR_FLAGS, "edges": ("edges", lambda v: some_names(v, "edges", "edges (L5.H1>L18.KV2.k)"))}
    speech = args.model is None and any(v is not None for v in clips.values())
    settings = settings_from(C, args, convert=convert, model=SP.model if speech else None)
    from ..read.verbs import circuit as run

    with read_progress(args.json) as progress:
        result = run(settings=settings, progress=progress)
    from ..show.circuit import EDGE_COLUMNS, circuit_tables, edge_rows

    return show(result, circuit_tables(result), args, edge_rows(result), EDGE_COLUMNS)


def why(args) -> int:
    from .common import read_text_arg

    routes_file = args.routes if args.routes not in (None, "induction") else None
    files = {"json": args.json, "plot": args.plot}
    outputs(
        {"model": args.model, "file": args.file, "routes": routes_file, "audio": args.audio}, files, {"plot": (".png",)}
    )
    text = read_text_arg(args.text, args.file, required=args.audio is None)
    speech = args.model is None and args.audio is not None
    settings = settings_from(WhySettings, args, text=text, model=SP.model if speech else None)
    from ..read.verbs import why as run

    with read_progress() as progress:
        result = run(settings=settings, progress=progress)
    return 0 if later_rank() else show_why(result, args)


def show_why(result, args) -> int:
    """The tokens and routes said, the tables; the JSON, then the figure."""
    from ..show.sections import figure as png_bytes
    from ..show.text import tokens_line
    from ..show.why import why_tables

    say(f"tokens: {tokens_line(result.meta.tokens)}")
    say(f"routes: {result.meta.said}")
    out = tables(args.json)
    for t in why_tables(result):
        out.print(t)
    emit_json(result.to_dict(), args.json)
    if args.plot:
        deliver(args.plot, "plot", png_bytes(result))
    return 0


def composition(args) -> int:
    outputs({"model": args.model}, {"json": args.json}, {})
    from ..read.circuits.composition import composition as run
    from ..settings import CompositionSettings

    with read_progress() as progress:
        result = run(settings=settings_from(CompositionSettings, args), progress=progress)
    from ..show.why import composition_table

    if later_rank():
        return 0
    tables(args.json).print(composition_table(result))
    emit_json(result.to_dict(), args.json)
    return 0


def show(result, shown: list, args, rows: list, columns: tuple) -> int:
    """The tokens that ran, the tables; then the JSON and CSV (the work is kept), then the figure. Under
    torchrun every rank holds the same result and rank 0 alone shows and writes it."""
    from ..show.text import csv_text, tokens_line

    if later_rank():
        return 0
    first = result.meta["prompts"][0]
    say(f"tokens (row {first['row']}, clean): {tokens_line(first['clean'])}")
    if first["corrupt"] != first["clean"]:
        say(f"tokens (row {first['row']}, corrupt): {tokens_line(first['corrupt'])}")
    positions = result.meta.get("positions", {})
    if "resolved" in positions:
        say(f"positions {positions['positions']!r} resolved to {positions['resolved']}")
    out = tables(args.json)
    for t in shown:
        out.print(t)
    emit_json(result.to_dict(), args.json)
    if args.csv:
        deliver(args.csv, "csv", csv_text(rows, columns).encode("utf-8"))
    if args.plot:
        from ..show.sections import figure as png_bytes

        deliver(args.plot, "plot", png_bytes(result))
    return 0
