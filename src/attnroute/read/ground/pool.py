"""Work sized to memory: prompts cut into runs of bounded tokens, and recorded runs kept only within a budget.

    chunks = chunk_groups(groups, RUN_TOKENS)               # no run holds more than RUN_TOKENS tokens
    pool = RunPool(lambda g: PairRun(…, g, …), chunks, bytes_of, KEEP_BYTES)
    for i in range(len(pool)):
        run = pool.get(i)                                   # recorded now, or kept from before
        …
        pool.done(i)                                        # dropped unless every kept run fits the budget

Any number of prompts then runs in bounded memory: one run's forward and backward hold activations for at
most RUN_TOKENS tokens, and between rounds at most KEEP_BYTES of recordings are kept (a run past the budget
is recorded again when a later round needs it — two forwards, against the many of a round of patches).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

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


def recorded_bytes(loaded, tokens: int) -> int:
    """What a recorded clean/corrupt pair of runs holds for ``tokens`` tokens: every layer's q, k, v and head
    outputs on both sides, and each block's output (float32)."""
    H, Hkv, L = loaded.n_heads, loaded.n_kv_heads, loaded.n_layers
    cfg = loaded.model.config
    d = int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "d_model", 0) or 0)
    D = int(getattr(cfg, "head_dim", 0) or (d // max(1, H)))
    per_layer = (2 * H * D + 2 * Hkv * D + d) * 4  # q and out [H, D], k and v [Hkv, D], the block's output
    return 2 * L * per_layer * tokens


def block_bytes(loaded, tokens: int) -> int:
    """Every block's output for ``tokens`` tokens (float32): what a layer restart keeps per run."""
    cfg = loaded.model.config
    d = int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "d_model", 0) or 0)
    return loaded.n_layers * d * 4 * tokens


class RunPool:
    """Runs made on demand by ``make(chunk)``; kept between uses while their bytes fit ``keep_bytes``."""

    def __init__(self, make: Callable, chunks: list, bytes_of: Callable[[object], int], keep_bytes: int | None = None):
        keep_bytes = scaled(KEEP_BYTES) if keep_bytes is None else keep_bytes  # under the memory cap in force
        self.make, self.chunks, self.bytes_of, self.keep_bytes = make, chunks, bytes_of, keep_bytes
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
        """Keep run ``i`` only if every kept run still fits the budget."""
        if sum(self.bytes_of(c) for j, c in enumerate(self.chunks) if j in self.kept) > self.keep_bytes:
            self.kept.pop(i, None)


__all__ = ["KEEP_BYTES", "RUN_TOKENS", "RunPool", "block_bytes", "chunk_groups", "recorded_bytes"]
