"""`attnroute heads`: per-head routing statistics, roles and effects of a real model, on one text or
a corpus (streamed; under torchrun one shard per rank, rank 0 writes)."""

from __future__ import annotations

from ..errors import InputError
from ..promptset import bundled_prompts
from ..settings import DEFAULT_EXACT, CorpusSettings, HeadsSettings, probe_seeds
from .common import deliver, emit_json, json_flag, model_flag, notes, outputs, read_progress, read_text_arg, tables

FIELDS = {"seeds": "--seed"}  # settings fields whose flag is not --field-name
CORPUS_ONLY = {  # flag -> its default: given with one text, each would be ignored
    "field": "text",
    "per_line": False,
    "limit": None,
    "skip_bad": False,
    "checkpoint": None,
    "checkpoint_every": 10,
    "importance_tokens": 256,
}


def add(sub) -> None:
    h = sub.add_parser("heads", help="per-head routing statistics, roles and ablation effects of a real model")
    model_flag(h)
    h.add_argument("--text", help="the text to read (default: a built-in paragraph)")
    h.add_argument("--file", help="read the text from this UTF-8 file")
    h.add_argument("--max-tokens", type=int, help="cut the text to this many tokens (default: the model's context)")
    h.add_argument("--seed", type=int, default=0, help="first probe seed (three are used)")
    json_flag(h, "the HeadTable")
    h.add_argument("--csv", help="write the HeadTable as CSV")
    h.add_argument("--no-ablation", action="store_true", help="skip the ablation sweep and gradient estimate")
    h.add_argument(
        "--exact",
        default=str(DEFAULT_EXACT),
        help=f"heads to ablate exactly: the top N of the gradient estimate (default {DEFAULT_EXACT}), or 'all' for "
        "the full sweep",
    )
    h.add_argument(
        "--modes", default="zero", help="exact ablation modes, comma-separated: zero (default), mean, uniform"
    )
    h.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the run-time check of routed attention against the model's own eager attention",
    )
    h.add_argument(
        "--max-weight",
        action="store_true",
        help="also the row maximum and argmax offsets (a second, blocked pass over the weights)",
    )
    corpus_flags(h)
    h.add_argument(
        "--importance-tokens",
        type=int,
        default=256,
        help="per-document ablation effect on each document's first N tokens (default 256)",
    )
    h.add_argument(
        "--checkpoint", help="write the corpus accumulator here every --checkpoint-every documents; rerun to resume"
    )
    h.add_argument("--checkpoint-every", type=int, default=10, help="documents between checkpoints (default 10)")
    h.add_argument("--metric", default="loss",
                   help="the effect: Δ loss on repeated random tokens (default), or Δ your metric on --prompts (or on "
                   "--text with --answer/--wrong): logit-diff, prob, logprob, loss, kl, cosine")  # fmt: skip
    h.add_argument("--prompts", help="a .jsonl of prompts (their clean side) the metric is measured on, or 'ioi'")
    h.add_argument("--answer", help="the metric's answer token, for rows (or a --text) that name none")
    h.add_argument("--wrong", help="the metric's wrong token, likewise")
    h.set_defaults(fn=run, fields=FIELDS)


def corpus_flags(p) -> None:
    """The corpus flags heads and report share."""
    p.add_argument(
        "--corpus",
        help="read a corpus instead of one text: a .txt (blank-line-separated documents), a .jsonl, a directory of "
        ".txt files, a .parquet file or a saved Hugging Face dataset; streamed",
    )
    p.add_argument("--field", default="text", help="the .jsonl field / dataset column holding the text (default text)")
    p.add_argument("--per-line", action="store_true", help="a .txt corpus holds one document per line")
    p.add_argument("--limit", type=int, help="read at most this many documents")
    p.add_argument(
        "--skip-bad",
        action="store_true",
        help="skip documents that are not text (bad UTF-8, non-string fields, special files), counted in the JSON",
    )


def run(args) -> int:
    if args.corpus:
        return run_corpus(args)
    given = next((f for f, default in CORPUS_ONLY.items() if getattr(args, f) != default), None)
    if given:
        raise InputError(f"`{given}` applies to a corpus read; give `corpus` too, or leave it out", field=given)
    outputs({"file": args.file, "model": args.model, "prompts": args.prompts}, {"json": args.json, "csv": args.csv})
    settings = text_settings(args)
    from ..read.heads import read_heads

    with read_progress() as progress:
        table = read_heads(settings=settings, progress=progress)
    return show(table, args)


def text_settings(args) -> HeadsSettings:
    return HeadsSettings(
        model=args.model,
        text=read_text_arg(args.text, args.file),
        max_tokens=args.max_tokens,
        seeds=probe_seeds(args.seed),
        ablation=not args.no_ablation,
        max_weight=args.max_weight,
        modes=tuple(m.strip() for m in args.modes.split(",") if m.strip()),
        exact=args.exact,
        verify=not args.no_verify,
        metric=args.metric,
        prompts=bundled_prompts(args.prompts),
        answer=args.answer,
        wrong=args.wrong,
    )


def run_corpus(args) -> int:
    """One process, or one rank of `torchrun -m attnroute heads --corpus …` (rank 0 writes)."""
    if args.text or args.file:
        raise InputError("give `corpus` or `text`/`file`, not both", field="corpus")
    if args.modes != "zero":
        raise InputError("a corpus read measures zero ablation per document; `modes` is for one text", field="modes")
    if args.metric != "loss" or args.prompts or args.answer or args.wrong:
        raise InputError("a corpus read measures Δ loss per document; `metric` and `prompts` are for one read",
                         field="metric")  # fmt: skip
    outputs(
        {"corpus": args.corpus, "model": args.model},
        {"json": args.json, "csv": args.csv, "checkpoint": args.checkpoint},
    )
    settings = CorpusSettings(
        model=args.model,
        corpus=args.corpus,
        **{f: getattr(args, f) for f in ("field", "per_line", "limit", "skip_bad", "max_tokens", "importance_tokens")},
        **{f: getattr(args, f) for f in ("checkpoint", "checkpoint_every", "max_weight")},
        exact=0 if args.no_ablation else args.exact,  # no per-document ablation
        seeds=probe_seeds(args.seed),
        verify=not args.no_verify,
    )
    from ..read.corpus.read import read_corpus

    with read_progress() as progress:
        table = read_corpus(settings=settings, progress=progress)
    return 0 if table is None else show(table, args)  # None: not rank 0


def show(table, args) -> int:
    """The notes, the HeadTable's terminal tables, and the JSON/CSV the user named."""
    from ..show.terminal import headtable_tables

    notes(table.meta)
    out = tables(args.json)
    for t in headtable_tables(table):
        out.print(t)
    emit_json(table.to_dict(), args.json)
    if args.csv:
        deliver(args.csv, "csv", table.csv_text().encode("utf-8"))
    return 0
