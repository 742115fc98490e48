"""`attnroute heads`: per-head routing statistics, roles and effects of a real model, on one text or
a corpus (streamed; under torchrun one shard per rank, rank 0 writes)."""

from __future__ import annotations

from ..bundled import prompts_path
from ..errors import InputError
from ..settings import CorpusSettings, HeadsSettings, probe_seeds
from ..settings.experiments import SPEECH_MODEL
from .common import (
    deliver,
    emit_json,
    json_flag,
    model_flag,
    names,
    notes,
    option,
    outputs,
    read_progress,
    read_text_arg,
    settings_from,
    tables,
)

FIELDS = {"seeds": "--seed"}  # settings fields whose flag is not --field-name
H, C = HeadsSettings, CorpusSettings
TEXT_FLAGS = {  # flags of a text read that are not a field as typed
    "seed": ("seeds", probe_seeds),
    "no_ablation": ("ablation", lambda v: False),
    "no_verify": ("verify", lambda v: False),
    "modes": ("modes", lambda v: names(v) or ()),
    "prompts": ("prompts", prompts_path),
}
CORPUS_FLAGS = {**{k: TEXT_FLAGS[k] for k in ("seed", "no_verify")}, "no_ablation": ("exact", lambda v: 0)}


def add(sub) -> None:
    h = sub.add_parser("heads", help="per-head routing statistics, roles and ablation effects of a real model")
    model_flag(h)
    h.add_argument("--text", help="the text to read (default: a built-in paragraph)")
    h.add_argument("--file", help="read the text from this UTF-8 file ('-': standard input)")
    option(h, "--max-tokens", H, type=int)
    option(
        h,
        "--audio",
        H,
        help="a speech model's input (whisper-tiny): a .wav file or a bundled clip (paris, fox …); "
        "--text is then its transcript (default: transcribed by greedy decoding)",
    )
    h.add_argument("--seed", type=int, help="first probe seed (three are used; default 0)")
    json_flag(h, "the HeadTable")
    h.add_argument("--csv", help="write the HeadTable as CSV")
    h.add_argument("--no-ablation", action="store_true", default=None, help="skip the gradient estimate and ablation")
    option(h, "--exact", H, help="heads to ablate exactly: the top N of the gradient estimate, settled, or 'all'")
    h.add_argument("--modes", help="exact ablation modes, comma-separated: zero (default), mean, uniform")
    h.add_argument(
        "--no-verify",
        action="store_true",
        default=None,
        help="skip the run-time check of routed attention against the model's own eager attention",
    )
    option(h, "--max-weight", H, action="store_true")
    corpus_flags(h)
    option(h, "--importance-tokens", C, type=int)
    _checkpoint_flags(h)
    option(
        h,
        "--metric",
        H,
        help="the effect: Δ loss on repeated random tokens, or Δ your metric on --prompts (or "
        "on --text with --answer/--wrong): logit-diff, prob, logprob, loss, kl, cosine",
    )
    h.add_argument("--prompts", help="a .jsonl of prompts (their clean side) the metric is measured on, or 'ioi'")
    option(h, "--answer", H)
    option(h, "--wrong", H)
    option(h, "--max-memory", H, metavar="SIZE")
    h.set_defaults(fn=run, fields=FIELDS)


def _checkpoint_flags(h) -> None:
    """A corpus read's checkpoint (by default in attnroute's cache; a rerun resumes)."""
    option(h, "--checkpoint", C)
    option(h, "--no-checkpoint", C, action="store_true")
    option(h, "--checkpoint-every", C, type=int)


def corpus_flags(p) -> None:
    """The corpus flags heads and report share."""
    option(
        p,
        "--corpus",
        C,
        help="read a corpus instead of one text: a .txt (blank-line-separated documents), a "
        ".jsonl, a directory of .txt files, a .parquet file or a saved Hugging Face dataset; streamed",
    )
    option(p, "--field", C)
    option(p, "--per-line", C, action="store_true")
    option(p, "--limit", C, type=int)
    option(
        p,
        "--skip-bad",
        C,
        action="store_true",
        help="skip documents that are not text (bad UTF-8, non-string fields, special files), counted in the JSON",
    )


def run(args) -> int:
    if args.corpus:
        return run_corpus(args)
    outputs(
        {"file": args.file, "model": args.model, "prompts": args.prompts, "audio": args.audio},
        {"json": args.json, "csv": args.csv},
    )
    settings = settings_from(
        H,
        args,
        convert=TEXT_FLAGS,
        text=read_text_arg(args.text, args.file),
        elsewhere="applies to a corpus read; give `corpus` too, or leave it out",
        model=SPEECH_MODEL if args.model is None and args.audio is not None else None,  # a clip: whisper-tiny
    )
    from ..read.heads import read_heads

    with read_progress() as progress:
        table = read_heads(settings=settings, progress=progress)
    return show(table, args)


def run_corpus(args) -> int:
    """One process, or one rank of `torchrun -m attnroute heads --corpus …` (rank 0 writes)."""
    if args.text or args.file:
        raise InputError("give `corpus` or `text`/`file`, not both", field="corpus")
    outputs(
        {"corpus": args.corpus, "model": args.model},
        {"json": args.json, "csv": args.csv, "checkpoint": args.checkpoint},
    )
    settings = settings_from(
        C,
        args,
        convert=CORPUS_FLAGS,
        elsewhere="applies to a read of one text; a corpus read measures zero ablation of Δ "
        "loss per document: leave it out, or give `text` instead of `corpus`",
    )
    from ..read.corpus.read import read_corpus

    with read_progress() as progress:
        table = read_corpus(settings=settings, progress=progress)
    return 0 if table is None else show(table, args)  # None: not rank 0


def show(table, args) -> int:
    """The notes, the HeadTable's terminal tables, and the JSON/CSV the user named."""
    from ..show.heads import headtable_tables

    notes(table.meta)
    out = tables(args.json)
    for t in headtable_tables(table):
        out.print(t)
    emit_json(table.to_dict(), args.json)
    if args.csv:
        deliver(args.csv, "csv", table.csv_text().encode("utf-8"))
    return 0
