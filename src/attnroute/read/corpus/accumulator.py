"""What one rank of a corpus read has seen, in a form that merges (ranks) and saves (checkpoints).

Per statistic a Moments over documents (Welford, merged with Chan's formula), the role counts, and
one row of per-document Δ loss per document for the candidate heads.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..ground.wire import gather
from ..headtable import OFFSET_BUCKETS
from ..moments import Moments
from ..roles import ROLE_NAMES
from ..textpass import FUSED_COLUMNS

EMPTY_DIGEST = hashlib.sha256(b"attnroute corpus documents").hexdigest()


def chain(digest: str, text: str) -> str:
    """The next link: sha256(previous digest ‖ sha256(text)) — the order and the content both count."""
    return hashlib.sha256((digest + hashlib.sha256(text.encode("utf-8")).hexdigest()).encode()).hexdigest()


STATS = FUSED_COLUMNS + ("sink_logit_mass", "max_weight")  # max_weight: NaN (not observed) unless asked


class Accumulator:
    """What one rank has seen: per-statistic Moments over documents, role counts, per-document Δ loss."""

    def __init__(self, L: int, H: int, k: int):
        self.moments = {c: Moments((L, H)) for c in STATS}
        self.offsets = Moments((L, H, len(OFFSET_BUCKETS)))  # argmax-offset histograms (with max_weight)
        self.role_counts = np.zeros((L, H, len(ROLE_NAMES)), dtype=np.float64)
        self.k = k
        self.doc_index: list[int] = []  # documents whose Δ rows are in self.rows, in order
        self.rows: list[np.ndarray] = []  # one [k] row per document: appended, stacked only when asked
        self.docs_done = 0  # of this rank's shard, in order
        self.tokens = 0
        self.documents_digest = EMPTY_DIGEST  # a chain over the text of every document read, in order

    @property
    def deltas(self) -> np.ndarray:
        """Per-document Δ loss, [documents, candidates]."""
        return np.stack(self.rows) if self.rows else np.zeros((0, self.k), dtype=np.float64)

    def saw(self, text: str) -> None:
        """Chain one document's text into the digest (every document of the shard, read or too short)."""
        self.documents_digest = chain(self.documents_digest, text)

    def add(self, index: int, stats: dict, doc_roles: np.ndarray, delta: np.ndarray | None, tokens: int) -> None:
        for c in STATS:
            self.moments[c].add(stats[c])
        self.offsets.add(stats["offsets"])
        self.role_counts += doc_roles
        if delta is not None:
            self.doc_index.append(index)
            self.rows.append(delta.astype(np.float64))
        self.docs_done += 1
        self.tokens += tokens

    def merge(self, other: Accumulator) -> None:
        for c in STATS:
            self.moments[c].merge(other.moments[c])
        self.offsets.merge(other.offsets)
        self.role_counts += other.role_counts
        self.doc_index += other.doc_index
        self.rows += other.rows
        self.docs_done += other.docs_done
        self.tokens += other.tokens

    def state(self) -> dict[str, np.ndarray]:
        out = {}
        for c in STATS:
            out.update(self.moments[c].state(c))
        out.update(self.offsets.state("offsets"))
        out["role_counts"] = self.role_counts
        out["doc_index"] = np.asarray(self.doc_index, dtype=np.int64)
        out["deltas"] = self.deltas
        out["counters"] = np.asarray([self.docs_done, self.tokens], dtype=np.int64)
        return out

    def check(self, L: int, H: int, k: int) -> str | None:
        """What is wrong with a restored accumulator for a model of L × H heads and k candidates (None:
        nothing): shapes, counts, and statistics that cannot have come from documents."""
        shapes = {c: self.moments[c].n.shape for c in STATS} | {"offsets": self.offsets.n.shape[:2]}
        bad = [c for c, shape in shapes.items() if shape != (L, H)]
        if bad or self.role_counts.shape != (L, H, len(ROLE_NAMES)):
            return f"arrays of the wrong shape ({(bad or ['role_counts'])[0]}) for a model of {L} × {H} heads"
        if self.docs_done < 0 or self.tokens < 0 or len(self.rows) != len(self.doc_index):
            return f"impossible counts ({self.docs_done} documents, {self.tokens} tokens, {len(self.rows)} Δ rows)"
        if any(r.shape != (k,) for r in self.rows):
            return f"Δ rows for another number of candidate heads (expected {k})"
        for c in STATS:
            m = self.moments[c]
            if (m.n < 0).any() or (m.n > self.docs_done).any() or not np.isfinite(m.mean_[m.n > 0]).all():
                return f"statistics that cannot come from {self.docs_done} documents ({c})"
        return None

    @classmethod
    def from_state(cls, state: dict) -> Accumulator:
        L, H = state[f"{STATS[0]}.n"].shape
        acc = cls(L, H, state["deltas"].shape[1])
        acc.moments = {c: Moments.from_state(state, c) for c in STATS}
        acc.offsets = Moments.from_state(state, "offsets")
        acc.role_counts = np.array(state["role_counts"], dtype=np.float64)
        acc.doc_index = [int(i) for i in state["doc_index"]]
        acc.rows = list(np.array(state["deltas"], dtype=np.float64))
        acc.docs_done, acc.tokens = (int(x) for x in state["counters"])
        return acc


def merge_ranks(acc: Accumulator, world: int) -> Accumulator:
    """Gather every rank's accumulator and merge them in rank order (the same on every rank)."""
    if world == 1:
        return acc
    states = gather(dict(acc.state()), world)  # tensors on the wire, never pickles (ground/wire.py)
    merged = Accumulator.from_state(states[0])
    for s in states[1:]:
        merged.merge(Accumulator.from_state(s))
    return merged


__all__ = ["EMPTY_DIGEST", "STATS", "Accumulator", "chain", "merge_ranks"]
