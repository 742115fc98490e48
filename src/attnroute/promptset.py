"""Prompt pairs for patching: a clean prompt, its corrupted twin, and what the metric reads.

    {"clean": "When Mary and John went to the store, John gave a drink to",
     "corrupt": "When Mary and John went to the store, Mary gave a drink to",
     "answer": " Mary", "wrong": " John"}

One JSON object per line of a ``.jsonl`` file (blank lines are skipped), or one pair given on the
command line. Each metric names the fields it reads (``METRIC_FIELDS``); a row without one is
refused naming the row and the field. Checks that need the tokenizer (same length, single-token
answers) are in read/ground/prompts.py. Like settings/ this module imports no torch: a bad
file is refused before any model loads.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, runtime_checkable

from .errors import InputError, InputTypeError, readable_text


@dataclass(frozen=True)
class MetricSpec:
    """What a built-in metric is, in one place (read/ground/metrics.py implements each name; a test pins
    the two sets of names equal)."""

    fields: tuple[str, ...]  # the per-prompt fields it reads (answer, wrong)
    reads: str  # "logits" (next-token logits) or "embedding" (an encoder's pooled sentence embedding)
    last_only: bool  # reads only the last position (the output head then runs on one position)
    flat_at_clean: bool  # zero gradient on the run it compares with: a first-order estimate is 0 there


METRICS = {
    "logit-diff": MetricSpec(("answer", "wrong"), "logits", last_only=True, flat_at_clean=False),
    "prob": MetricSpec(("answer",), "logits", last_only=True, flat_at_clean=False),
    "logprob": MetricSpec(("answer",), "logits", last_only=True, flat_at_clean=False),
    "loss": MetricSpec((), "logits", last_only=False, flat_at_clean=False),
    "kl": MetricSpec((), "logits", last_only=True, flat_at_clean=True),
    "cosine": MetricSpec((), "embedding", last_only=True, flat_at_clean=True),
}
METRIC_FIELDS = {name: spec.fields for name, spec in METRICS.items()}
LOGIT_METRICS = tuple(m for m, spec in METRICS.items() if spec.reads == "logits")
FLAT_AT_CLEAN = tuple(m for m, spec in METRICS.items() if spec.flat_at_clean)


@runtime_checkable
class Metric(Protocol):
    """A metric of your own: ``metric(logits, batch) -> Tensor [B]``, one value per prompt, larger = more of
    the behaviour. ``logits`` is [B, T', V] (T' = 1 when ``metric.last_only`` is set), or an encoder's
    pooled embedding [B, D]; ``batch`` holds input_ids [B, T], attention_mask [B, T], answer [B], wrong [B],
    clean_logprobs [B, V] and clean_embedding [B, D] where they apply (read/ground/metrics.py)."""

    def __call__(self, logits, batch: dict): ...


MetricArg = str | Metric  # what a verb's ``metric`` field takes: a built-in name or your callable
FIELDS = ("clean", "corrupt", "answer", "wrong")
MAX_PROMPTS = 10_000


@dataclass(frozen=True)
class PromptPair:
    clean: str
    corrupt: str
    answer: str | None = None
    wrong: str | None = None
    row: int = 1  # the line of the file (1-based), or 1 for a pair given directly
    # where its texts came from, so that a refusal names what the user typed: "file" (a .jsonl row),
    # "python" (a sequence of pairs), "pair" (the clean / corrupt fields), "text" (one text, both sides);
    # and the fields answer / wrong filled from the settings rather than the row itself
    origin: str = "file"
    filled: tuple[str, ...] = ()

    def blame(self, name: str) -> tuple[str, str]:
        """(what a refusal of this pair's ``name`` calls it, the field it names): the setting the value came
        from ("answer", "text"), or a row of the prompts ("prompts row 3 answer")."""
        if name in self.filled or self.origin == "pair" or (self.origin == "text" and name in ("answer", "wrong")):
            return name, name
        if self.origin == "text":
            return "text", "text"
        return f"prompts row {self.row} {name}", "prompts"


def usable_metrics(kind: str, gradient: bool = False) -> tuple[str, ...]:
    """The built-ins a model of ``kind`` (causal, encoder, seq2seq) can be measured with; ``gradient``: only
    those with a gradient at the run they compare with (what an estimate differentiates)."""
    reads = "embedding" if kind == "encoder" else "logits"
    return tuple(
        name
        for name, m in METRICS.items()
        if m.reads == reads and not (gradient and m.flat_at_clean) and not (kind == "seq2seq" and name == "loss")
    )


def use_instead(kind: str, gradient: bool = False) -> str:
    """What a refusal of a metric suggests instead, for this model and use."""
    names = usable_metrics(kind, gradient)
    if names:
        return f"use {', '.join(names)}"
    return (
        "no built-in fits here (cosine is flat at the run it compares with): give your own metric of the pooled "
        "embedding, a Python callable"
    )


def metric_name(name) -> str:
    if name not in METRIC_FIELDS:
        raise InputError(f"metric {name!r} is not one of {', '.join(METRIC_FIELDS)}", field="metric")
    return name


def metric_setting(metric) -> str | None:
    """A metric's name (checked), or None for a Python callable; anything else is refused."""
    if isinstance(metric, str):
        return metric_name(metric)
    if not callable(metric):
        raise InputTypeError(f"metric must be a name or a callable, got {type(metric).__name__}", field="metric")
    return None


def pairs_of(prompts, clean, corrupt, answer, wrong, metric: str | None, sides=("clean", "corrupt")):
    """The prompt pairs: a .jsonl path (read here), a sequence of PromptPair / dicts, or one pair from the
    fields; ``answer`` / ``wrong`` fill the rows that do not name their own, then every row is checked
    for ``sides`` and the fields ``metric`` reads (None: a callable, which reads what it likes)."""
    if prompts is not None and clean is not None:
        raise InputError("give prompts (a file) or one clean/corrupt pair, not both", field="prompts")
    for name, value in (("answer", answer), ("wrong", wrong)):
        if value is not None and (not isinstance(value, str) or not value):
            raise InputError(f"{name} is empty: give the token the metric reads (e.g. ' Mary')", field=name)
    where = "prompts"
    if prompts is None:
        if clean is None or ("corrupt" in sides and corrupt is None):
            raise InputError("give prompts (a .jsonl file) or both clean and corrupt", field="prompts")
        origin = "text" if corrupt is None or corrupt is clean else "pair"
        pairs, where = [PromptPair(clean, corrupt if corrupt is not None else clean, origin=origin)], "the pair"
    elif isinstance(prompts, str | bytes) or hasattr(prompts, "__fspath__"):
        from .bundled import prompts_path  # a bundled set by name ('ioi', 'induction'), as the CLI takes it

        pairs, where = read_jsonl(prompts_path(prompts)), f"prompts {prompts}"
    else:
        pairs = [_pair(p, i) for i, p in enumerate(_rows(prompts), 1)]
    if answer is not None or wrong is not None:  # one answer for every row, unless a row names its own
        pairs = [_fill(p, answer, wrong) for p in pairs]
    return check_pairs(pairs, metric or "loss", where=where, sides=sides)


def _fill(p: PromptPair, answer, wrong) -> PromptPair:
    filled = tuple(n for n, v, own in (("answer", answer, p.answer), ("wrong", wrong, p.wrong)) if v and not own)
    return replace(p, answer=p.answer or answer, wrong=p.wrong or wrong, filled=filled)


def _rows(prompts):
    try:
        return list(prompts)
    except TypeError:
        raise InputTypeError(
            f"prompts must be a .jsonl path or a sequence of pairs, got {type(prompts).__name__}", field="prompts"
        ) from None


def _pair(p, row: int) -> PromptPair:
    if isinstance(p, PromptPair):
        return p
    if isinstance(p, dict):
        return PromptPair(*(p.get(k) for k in FIELDS), row=row, origin="python")
    raise InputTypeError(
        f"prompts row {row} is a {type(p).__name__}: give a PromptPair or a dict with clean and corrupt "
        "(one text is `clean`/`corrupt` or `text`, not `prompts`)",
        field="prompts",
    )


def check_pairs(pairs, metric: str, where: str = "prompts", sides=("clean", "corrupt")) -> tuple[PromptPair, ...]:
    """The pairs, each with ``sides`` and the fields ``metric`` reads; refused naming the row otherwise.
    (Ablation effects read the clean side only: then ``sides`` is ("clean",).)"""
    pairs = tuple(pairs)
    if not pairs:
        raise InputError(
            f"{where} holds no prompt pairs: give at least one row with clean and corrupt", field="prompts"
        )
    if len(pairs) > MAX_PROMPTS:
        raise InputError(f"{where} holds {len(pairs)} pairs; at most {MAX_PROMPTS} are read", field="prompts")
    reads = ", ".join((*sides, *METRIC_FIELDS[metric]))
    for p in pairs:
        for name in (*sides, *METRIC_FIELDS[metric]):
            value = getattr(p, name)
            said, field = p.blame(name)
            if value is None or not isinstance(value, str):
                whose = f"{where} row {p.row} has no {name!r}" if field == "prompts" else f"no `{name}` was given"
                if name in sides:
                    raise InputError(f"{whose} (this reads {reads}): give a non-empty text", field=field)
                raise InputError(
                    f"{whose}: the metric {metric} reads {' and '.join(METRIC_FIELDS[metric])}; give it (one token "
                    "with its leading space, e.g. ' Mary'), or choose a metric that does not read it",
                    field=field,
                )
            if not value.strip(" \t\r\n") and name in ("clean", "corrupt") or value == "":
                raise InputError(f"{said} is empty: give a non-empty text", field=field)
        for name in FIELDS:  # every text of the row, read or not, is text a tokenizer can read
            if isinstance(getattr(p, name), str):
                readable_text(getattr(p, name), p.blame(name)[1], p.blame(name)[0])
    return pairs


def read_jsonl(path: str | Path) -> list[PromptPair]:
    """Pairs from a JSON-lines file, unchecked for the metric's fields (check_pairs does that); refused
    (one line, naming the row) when a line is not an object with string fields, or the file is missing
    or not a regular file. Other keys of a row (a template number, a note) are kept out of the pair."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"prompts file {p} does not exist", field="prompts")
    if not p.is_file():
        raise InputError(f"prompts {p} is not a regular file: give a .jsonl file", field="prompts")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"prompts file {p} is not UTF-8 text (byte {e.start})", field="prompts") from None
    except OSError as e:
        raise InputError(f"prompts file {p} cannot be read: {e.strerror}", field="prompts") from None
    pairs = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line, parse_constant=_no_constant)
        except (json.JSONDecodeError, ValueError) as e:
            raise InputError(f"prompts {p} row {n} is not JSON: {e}", field="prompts") from None
        if not isinstance(row, dict):
            raise InputError(f"prompts {p} row {n} is a {type(row).__name__}, not an object", field="prompts")
        wrong = [k for k in FIELDS if k in row and not isinstance(row[k], str)]
        if wrong:
            raise InputError(
                f"prompts {p} row {n}: {wrong[0]!r} must be a string, got {type(row[wrong[0]]).__name__}",
                field="prompts",
            )
        pairs.append(PromptPair(*(row.get(k) for k in FIELDS), row=n))
    return pairs


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def finite(x: float) -> float | None:
    """JSON has no NaN: a value that is not finite is written as null."""
    return float(x) if x is not None and math.isfinite(float(x)) else None


__all__ = [
    "FLAT_AT_CLEAN",
    "METRICS",
    "Metric",
    "MetricArg",
    "MetricSpec",
    "FIELDS",
    "LOGIT_METRICS",
    "METRIC_FIELDS",
    "PromptPair",
    "check_pairs",
    "metric_name",
    "metric_setting",
    "usable_metrics",
    "use_instead",
    "pairs_of",
    "read_jsonl",
]
