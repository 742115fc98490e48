"""`attnroute report`: the routing report, one self-contained interactive HTML page (and its data as
JSON, its main charts as PNG), with sections from learn and experiment results and a corpus read."""

from __future__ import annotations

from ..errors import InputError
from ..settings import ADD_KINDS, CorpusSettings, ReportSettings
from .common import (
    NOT_SETTINGS,
    deliver,
    emit_json,
    json_flag,
    model_flag,
    notes,
    option,
    outputs,
    read_progress,
    read_text_arg,
    say,
    settings_from,
)
from .heads import corpus_flags

R = ReportSettings
CORPUS_FIELDS = ("corpus", "field", "per_line", "limit", "skip_bad")  # the report's corpus flags


def add(sub) -> None:
    r = sub.add_parser("report", help="the routing report: one self-contained interactive HTML page")
    r.add_argument("text", nargs="?", help="the text to read (default: a built-in paragraph)")
    r.add_argument("--file", help="read the text from this UTF-8 file ('-': standard input)")
    model_flag(r)
    r.add_argument("--out", default="routing-report.html", help="the HTML file to write (default routing-report.html)")
    r.add_argument("--png-dir", help="also write the main charts as PNG files here")
    json_flag(r, "the data behind the page")
    option(r, "--max-tokens", R, type=int)
    r.add_argument("--no-ablation", action="store_true", default=None, help="skip the ablation sweep")
    r.add_argument(
        "--add",
        action="append",
        help=f"add a section from a {', '.join(f'`{k}`' for k in ADD_KINDS)} --json result (repeatable)",
    )
    option(r, "--generate", R, type=int)
    corpus_flags(r)
    r.add_argument(
        "--no-verify",
        action="store_true",
        default=None,
        help="skip the run-time check of routed attention against the model's own eager attention",
    )
    r.add_argument("--learn", nargs="+", metavar="JSON", help="add sections from `attnroute learn` result files")
    r.add_argument(
        "--audio",
        help="a speech model's clip (.wav or a bundled clip; --model defaults to whisper-tiny): the audio page — "
        "spectrogram, every cross-attention head's map over time, alignment heads marked",
    )
    r.set_defaults(fn=run)


SPEECH_ONLY = ("text", "file", "model", "out", "json", "no_ablation", "no_verify", "audio")


def run_audio(args) -> int:
    """The audio page: a speech model's read of one clip (show/speech.py)."""
    given = [k for k, v in vars(args).items() if v is not None and k not in SPEECH_ONLY and k not in NOT_SETTINGS]
    if given:
        raise InputError(f"`{given[0]}` applies to a text report; the audio page takes text, model, out, json")
    outputs([("model", args.model), ("audio", args.audio), ("file", args.file)], {"out": args.out, "json": args.json})
    from ..read.report import speech_view
    from ..show.speech import build

    with read_progress() as progress:
        view = speech_view(
            args.model or "whisper-tiny",
            args.audio,
            read_text_arg(args.text, args.file),
            ablation=not args.no_ablation,
            verify=not args.no_verify,
            progress=progress,
        )
    notes(view.table.meta)
    emit_json(view.table.to_dict(), args.json)
    page = build(view).encode("utf-8")
    deliver(args.out, "out", page)
    say(f"the page is {len(page) / 1e6:.2f} MB, built in {view.elapsed:.1f} s")
    return 0


def run(args) -> int:
    if args.audio is not None:
        return run_audio(args)
    inputs = [("file", args.file), ("corpus", args.corpus), ("model", args.model)]
    inputs += [("learn", p) for p in args.learn or []] + [("add", p) for p in args.add or []]
    outputs(inputs, {"out": args.out, "json": args.json}, dirs={"png_dir": args.png_dir})
    settings = report_settings(args)
    from ..show import sections

    added = sections.load_all(args.learn, args.add)  # bad files fail before minutes of reading: (html, heads)
    from ..read.report import routing_view

    with read_progress() as progress:
        view = routing_view(settings=settings, progress=progress)
    return show(view, added, args)


def report_settings(args) -> ReportSettings:
    """The page's settings; the corpus flags build its CorpusSettings (each refused without --corpus)."""
    corpus = None
    if args.corpus:  # the text read checks the same model first
        corpus = settings_from(
            CorpusSettings,
            args,
            only=CORPUS_FIELDS,
            model=args.model,
            verify=False,
            exact=0 if args.no_ablation else None,
        )
    convert = {"no_ablation": ("ablation", lambda v: False), "no_verify": ("verify", lambda v: False)}
    return settings_from(
        R,
        args,
        convert=convert,
        skip=CORPUS_FIELDS if corpus else (),
        text=read_text_arg(args.text, args.file),
        corpus=corpus,
        elsewhere="describes a corpus: give `corpus` too",
    )


def show(view, added: tuple[list[str], list], args) -> int:
    from ..cost import kv_card
    from ..show import report as page
    from ..show.figures import write_pngs

    notes(view.table.meta)
    kv = kv_card(view.config, view.table.attention, view.context, len(view.tokens))
    sections, heads = added
    rep = page.build(view, sections, kv, heads=heads)
    emit_json(rep.data, args.json)  # the data first: kept even if the page cannot be written
    deliver(args.out, "out", rep.html.encode("utf-8"))
    say(f"the page is {len(rep.html.encode()) / 1e6:.2f} MB, built in {rep.data['seconds']} s")
    for p in write_pngs(rep.data, args.png_dir) if args.png_dir else ():
        say(f"wrote {p}")
    return 0
