"""Work sized to memory: prompts cut into runs of bounded tokens, and recorded runs kept only within a budget.

    chunks = chunk_groups(groups, RUN_TOKENS)               # no run holds more than RUN_TOKENS tokens
    pool = RunPool(lambda g: PairRun(…, g, …), chunks, KEEP_BYTES)
    for i in range(len(pool)):
        run = pool.get(i)                                   # recorded now, or kept from before
        …
        pool.done(i)                                        # dropped (and emptied) unless every kept run fits

Any number of prompts then runs in bounded memory: one run's forward and backward hold activations for at
most RUN_TOKENS tokens, and between rounds at most KEEP_BYTES of recordings are kept (a run past the budget
is recorded again when a later round needs it — two forwards, against the many of a round of patches).
A kept run's bytes are counted from the run itself (Recorded.nbytes: every storage it holds, at full size),
not predicted: a prediction missed what a run held by 2.4× once (a view of one position that kept its whole
[n, T, d] tensor), and peak memory grew with the number of prompts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from .budget import scaled

RUN_TOKENS = 1024  # prompts × tokens of one run: what its forward and backward hold activations for
KEEP_BYTES = 1 << 30  # recorded runs kept between rounds


def chunk_groups(groups: list, max_tokens: int | None = None) -> list:
    """Each group of one length (ground/prompts.Group) cut into runs of at most ``max_tokens`` tokens (at
    least one prompt each; default RUN_TOKENS under the memory cap in force), in order."""
    max_tokens = scaled(RUN_TOKENS) if max_tokens is None else max_tokens
    out = []
    for g in groups:
        per = max(1, max_tokens // max(1, g.length))
        for i in range(0, len(g.rows), per):
            out.append(
                dataclasses.replace(
                    g,
                    rows=g.rows[i : i + per],
                    clean=g.clean[i : i + per],
                    corrupt=g.corrupt[i : i + per],
                    answer=None if g.answer is None else g.answer[i : i + per],
                    wrong=None if g.wrong is None else g.wrong[i : i + per],
                )
            )
    return out


def block_bytes(loaded, tokens: int) -> int:
    """Every block's output for ``tokens`` tokens (float32): what a layer restart keeps per run."""
    cfg = loaded.model.config
    d = int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "d_model", 0) or 0)
    return loaded.n_layers * d * 4 * tokens


def tensor_bytes(*objs) -> int:
    """The bytes of every tensor storage reachable from ``objs`` through dicts, lists, tuples and plain objects'
    attributes (modules excluded: weights are the model's), each storage once and at its full size — a view
    of one position keeps its whole tensor alive."""
    found: dict[int, int] = {}
    stack, seen = list(objs), set()
    while stack:
        x = stack.pop()
        if id(x) in seen or isinstance(x, torch.nn.Module | type):
            continue
        seen.add(id(x))
        if isinstance(x, torch.Tensor):
            found[x.untyped_storage().data_ptr()] = x.untyped_storage().nbytes()
        elif isinstance(x, dict):
            stack += x.values()
        elif isinstance(x, list | tuple | set):
            stack += x
        elif hasattr(x, "__dict__"):
            stack += vars(x).values()
    return sum(found.values())


class Recorded:
    """A run a RunPool keeps: what it holds is every attribute's tensors but SHARED's (the model, the metric,
    what all runs of an experiment share)."""

    SHARED: tuple[str, ...] = ()

    def nbytes(self) -> int:
        return tensor_bytes(*(v for k, v in vars(self).items() if k not in self.SHARED))

    def release(self) -> None:
        """Let go of all this run holds (RunPool.done, when it is not kept). The caller's loop variable still
        names the run while the next one is recorded, and that held two runs' recordings at once, past what a
        memory cap had counted; a use after this is an AttributeError, never a stale number."""
        vars(self).clear()


class RunPool:
    """Runs made on demand by ``make(chunk)``; kept between uses while their bytes (``bytes_of(run)``, by
    default its own count: Recorded.nbytes) fit ``keep_bytes``."""

    def __init__(self, make: Callable, chunks: list, keep_bytes: int | None = None, bytes_of: Callable | None = None):
        keep_bytes = scaled(KEEP_BYTES) if keep_bytes is None else keep_bytes  # under the memory cap in force
        self.make, self.chunks, self.keep_bytes = make, chunks, keep_bytes
        self.bytes_of = bytes_of or (lambda run: run.nbytes())
        self.kept: dict[int, object] = {}
        self.made = 0  # runs recorded, re-recordings included (for the record)

    def __len__(self) -> int:
        return len(self.chunks)

    def get(self, i: int):
        if i not in self.kept:
            self.kept[i] = self.make(self.chunks[i])
            self.made += 1
        return self.kept[i]

    def done(self, i: int) -> None:
        """Keep run ``i`` only if every kept run still fits the budget (counted now: a run grows as it is used)."""
        if sum(self.bytes_of(run) for run in self.kept.values()) > self.keep_bytes:
            run = self.kept.pop(i, None)
            if isinstance(run, Recorded):
                run.release()


__all__ = ["KEEP_BYTES", "RUN_TOKENS", "Recorded", "RunPool", "block_bytes", "chunk_groups", "tensor_bytes"]
