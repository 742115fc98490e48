"""`attnroute report`: the routing report, one self-contained interactive HTML page (and its data as
JSON, its main charts as PNG), with sections from learn and experiment results and a corpus read."""

from __future__ import annotations

from ..errors import InputError
from ..settings import DEFAULT_EXACT, MAX_GENERATE, CorpusSettings, ReportSettings
from .common import deliver, emit_json, json_flag, model_flag, notes, outputs, read_progress, read_text_arg, say
from .heads import corpus_flags


def add(sub) -> None:
    r = sub.add_parser("report", help="the routing report: one self-contained interactive HTML page")
    r.add_argument("text", nargs="?", help="the text to read (default: a built-in paragraph)")
    r.add_argument("--file", help="read the text from this UTF-8 file")
    model_flag(r)
    r.add_argument("--out", default="routing-report.html", help="the HTML file to write (default routing-report.html)")
    r.add_argument("--png-dir", help="also write the main charts as PNG files here")
    json_flag(r, "the data behind the page")
    r.add_argument(
        "--max-tokens",
        type=int,
        help="cut the text to this many tokens (default 256, or the model's positions if fewer)",
    )
    r.add_argument("--no-ablation", action="store_true", help="skip the ablation sweep")
    r.add_argument(
        "--add", action="append", help="add a section from a `knockout`, `swap` or `needle` --json result (repeatable)"
    )
    r.add_argument(
        "--generate",
        type=int,
        default=0,
        help=f"also decode N ≤ {MAX_GENERATE} tokens (greedy, KV cache) and show their routes",
    )
    corpus_flags(r)
    r.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the run-time check of routed attention against the model's own eager attention",
    )
    r.add_argument("--learn", nargs="+", metavar="JSON", help="add sections from `attnroute learn` result files")
    r.set_defaults(fn=run)


def run(args) -> int:
    inputs = {"file": args.file, "corpus": args.corpus, "model": args.model}
    inputs |= {f"learn {p}": p for p in args.learn or []} | {f"add {p}": p for p in args.add or []}
    outputs(inputs, {"out": args.out, "json": args.json}, dirs={"png_dir": args.png_dir})
    settings = report_settings(args)
    from ..show import sections

    added = sections.load_all(args.learn, args.add)  # bad files fail before minutes of reading
    from ..read.report import routing_view

    with read_progress() as progress:
        view = routing_view(settings=settings, progress=progress)
    return show(view, added, args)


def report_settings(args) -> ReportSettings:
    corpus = None
    if args.corpus:
        corpus = CorpusSettings(
            model=args.model,
            corpus=args.corpus,
            field=args.field,
            per_line=args.per_line,
            limit=args.limit,
            skip_bad=args.skip_bad,
            exact=0 if args.no_ablation else DEFAULT_EXACT,
            verify=False,  # the text read checks the same model first
        )
    elif args.field != "text" or args.per_line or args.limit is not None or args.skip_bad:
        raise InputError(
            "`field`, `per_line`, `limit` and `skip_bad` describe a corpus: give `corpus` too", field="corpus"
        )
    return ReportSettings(
        model=args.model,
        text=read_text_arg(args.text, args.file),
        **{f: getattr(args, f) for f in ("max_tokens", "generate")},
        ablation=not args.no_ablation,
        verify=not args.no_verify,
        corpus=corpus,
    )


def show(view, added: list[str], args) -> int:
    from ..cost import kv_card
    from ..show import report as page
    from ..show.figures import write_pngs

    notes(view.table.meta)
    kv = kv_card(view.config, view.table.attention, view.context, len(view.tokens))
    rep = page.build(view, added, kv)
    emit_json(rep.data, args.json)  # the data first: kept even if the page cannot be written
    deliver(args.out, "out", rep.html.encode("utf-8"))
    say(f"the page is {len(rep.html.encode()) / 1e6:.2f} MB, built in {rep.data['seconds']} s")
    for p in write_pngs(rep.data, args.png_dir) if args.png_dir else ():
        say(f"wrote {p}")
    return 0
