"""Prompt pairs as token ids: what the model runs, checked before it runs.

    groups = tokenize_pairs(tokenizer, kind, pairs, metric)

Each prompt is encoded the way every attnroute verb encodes a text (read/stimuli.encode_text: a
causal LM gets its BOS prepended when the tokenizer does not add one). Clean and corrupt must give the
same number of tokens (patching exchanges activations position by position); answers must be one
token each. Both are refused naming the row and the tokens. Prompts of different lengths are grouped:
a group is one batch [n, T], so no padding (and no padding mask) ever enters a patched run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...engine import InputError
from ...promptset import LOGIT_METRICS, METRIC_FIELDS, PromptPair, usable_metrics, use_instead
from ..stimuli import encode_text, tokens_of
from .positions import resolve_positions


class PromptError(InputError):
    """A prompt pair the model cannot run as asked; the message names the row."""

    def __init__(self, message: str):
        super().__init__(message, field="prompts")


@dataclass
class Group:
    """Prompts of one length: ``rows`` index the prompt set; ids are [n, T]."""

    rows: list[int]
    clean: torch.Tensor  # (n, T)
    corrupt: torch.Tensor  # (n, T)
    answer: torch.Tensor | None  # (n,) token ids
    wrong: torch.Tensor | None  # (n,)

    @property
    def length(self) -> int:
        return int(self.clean.shape[1])

    @property
    def tokens(self) -> int:
        """Prompts × tokens: what a run of this group holds activations for (pool.py sizes runs by it)."""
        return len(self.rows) * self.length


def encode(tokenizer, kind: str, text: str) -> torch.Tensor:
    """[T] ids, as every verb encodes a text (the BOS a causal LM needs included)."""
    ids, _ = encode_text(tokenizer, text, None, add_bos=kind == "causal")
    return ids[0]


def single_token(tokenizer, text: str, name: str, pair: PromptPair | None = None) -> int:
    """The one token id of ``text`` (the answer or wrong token); refused naming where it came from: the
    setting (``answer``) or a row of the prompts."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        said, field = pair.blame(name) if pair is not None else (name, name)
        raise InputError(
            f"{said} {text!r} is {len(ids)} tokens {tokens_of(tokenizer, ids)}; the metric reads one "
            "token: give a single-token answer (with its leading space, e.g. ' Mary')",
            field=field,
        )
    return int(ids[0])


def check_metric_kind(metric, kind: str, gradient: bool = False) -> None:
    """A built-in metric this model can be measured with (``gradient``: and differentiated, for estimates)."""
    if not isinstance(metric, str) or metric in usable_metrics(kind, gradient):
        return
    if kind == "encoder" and metric in LOGIT_METRICS:
        why = f"metric {metric} reads next-token logits; this model is an encoder (no LM head)"
    elif kind != "encoder" and metric == "cosine":
        why = "metric cosine compares an encoder's sentence embeddings; this model has logits"
    elif metric == "loss":
        why = "metric loss reads next-token predictions of the prompt; an encoder-decoder's prompt is its encoder input"
    else:
        why = f"metric {metric} is flat (zero gradient) on the run it compares with, so every estimate would be 0"
    raise InputError(f"{why}: {use_instead(kind, gradient)}", field="metric")


def usable_pairs(tokenizer, kind: str, pairs: tuple, metric, gradient: bool = False) -> tuple[tuple, list[dict]]:
    """(the pairs this tokenizer can run, [{row, reason}] of the others) — what ``skip_bad`` keeps and lists;
    refused when no row is left. A row is kept when tokenize_pairs takes it alone; a metric this model cannot
    read is refused as it is, not blamed on every row."""
    check_metric_kind(metric, kind, gradient)
    kept, skipped = [], []
    for p in pairs:
        try:
            tokenize_pairs(tokenizer, kind, (p,), metric, gradient)
        except InputError as e:
            skipped.append({"row": p.row, "reason": str(e)})
        else:
            kept.append(p)
    if not kept:
        first = skipped[0]
        raise PromptError(
            f"every one of the {len(pairs)} prompt rows was skipped (skip_bad); the first, row {first['row']}: "
            f"{first['reason']}"
        )
    return tuple(kept), skipped


def tokenize_pairs(
    tokenizer, kind: str, pairs: tuple[PromptPair, ...], metric, gradient: bool = False
) -> tuple[list[Group], list[dict]]:
    """(groups by length, each prompt's tokens for the record). Refused, naming the row, when clean and
    corrupt differ in length or an answer is not one token; the metric checked for the model's kind."""
    check_metric_kind(metric, kind, gradient)
    fields = METRIC_FIELDS.get(metric, ()) if isinstance(metric, str) else ()  # a callable reads what it likes
    by_len: dict[int, list] = {}
    record = []
    for i, p in enumerate(pairs):
        c, x = encode(tokenizer, kind, p.clean), encode(tokenizer, kind, p.corrupt)
        if c.shape[0] != x.shape[0]:
            field = p.blame("corrupt")[1]
            who = f"prompts row {p.row}" if field == "prompts" else field
            raise InputError(
                f"{who}: clean and corrupt differ in length ({c.shape[0]} vs {x.shape[0]} tokens): "
                f"clean {tokens_of(tokenizer, c)}, corrupt {tokens_of(tokenizer, x)}; patching needs the same "
                "positions on both sides",
                field=field,
            )
        ans = [
            single_token(tokenizer, getattr(p, f), f, p) if getattr(p, f) is not None else -1
            for f in ("answer", "wrong")
        ]
        for f, a in zip(("answer", "wrong"), ans):
            if f in fields and a < 0:
                said, field = p.blame(f)
                raise InputError(f"{said} is missing, and the metric reads it", field=field)
        by_len.setdefault(int(c.shape[0]), []).append((i, c, x, *ans))
        record.append(
            {
                "row": p.row,
                "clean": tokens_of(tokenizer, c),
                "corrupt": tokens_of(tokenizer, x),
                "answer": p.answer,
                "wrong": p.wrong,
            }
        )
    groups = []
    for _, items in sorted(by_len.items()):
        rows, cs, xs, an, wr = zip(*items)
        groups.append(Group(list(rows), torch.stack(cs), torch.stack(xs), _ids(an), _ids(wr)))
    return groups, record


def _ids(values) -> torch.Tensor | None:
    return None if any(v < 0 for v in values) else torch.tensor(values, dtype=torch.long)


def pair_positions(tokenizer, kind: str, spec: str, pairs, groups: list[Group]) -> tuple[str, list[int] | None, dict]:
    """``--positions``: 'all' (None: the whole sequence at once), 'each' (every position: [L, H, T]), or
    token indices / a word of the clean prompt (the same positions in every prompt, so one length).
    Returns (mode, positions, what it resolved to, for the record)."""
    if spec == "all":
        return "all", None, {"positions": "all"}
    lengths = sorted({g.length for g in groups})
    if len(lengths) > 1:
        raise InputError(
            f"positions {spec!r} needs every prompt the same length; these prompts have {len(lengths)} lengths "
            f"({', '.join(map(str, lengths))} tokens): give one template, or `positions` all",
            field="positions",
        )
    T = lengths[0]
    if spec == "each":
        return "each", list(range(T)), {"positions": "each", "T": T}
    text = pairs[groups[0].rows[0]].clean
    found, matches = resolve_positions(tokenizer, text, groups[0].clean[:1], spec, "positions")
    said = {"positions": spec, "resolved": found, "T": T, "in": f"row {pairs[groups[0].rows[0]].row}, clean"}
    if matches > 1:
        said["note"] = f"{spec!r} occurs {matches} times in the prompt: all are patched (give indices to pick one)"
    return "each", found, said


__all__ = ["Group", "PromptError", "check_metric_kind", "encode", "pair_positions", "single_token", "tokenize_pairs"]
