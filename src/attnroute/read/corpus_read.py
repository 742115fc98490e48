"""A corpus, not an anecdote: head statistics and head importance over many documents, with 95 %
intervals, resumable, and sharded across processes with torch.distributed.

    table = read_corpus("smollm2", "data/python-docs-topics.jsonl", limit=40)
    torchrun --nproc-per-node 2 -m attnroute heads --model smollm2 --corpus data/python-docs-topics.jsonl

Per document (its tokens cut into consecutive windows of ``max_tokens``; a window's first position
counts as a sink key): the text statistics of `read_heads` (entropy, masses, local band, …), averaged
over the document's rows; the role each head would get from that document; and, for the candidate
heads, the document's Δ loss under zero ablation of each (its first ``importance_tokens`` tokens).
Across documents: mean, variance and a 95 % interval per head (Moments: Welford, merged with Chan's
formula), role stability (the share of documents whose role is the corpus role), and per candidate a
paired test of ablated against clean loss over documents — a one-sample t-test on the per-document
Δ — with Holm's step-down correction over the candidates at α = 0.05. Candidates: the heads the
gradient estimate ranks highest by magnitude on document 0 (``exact``; "all" for every head).

The previous-token, duplicate and induction scores come from the repeated-random-token stimulus (not
from documents), as in `read_heads`, so they carry no interval.

Shards: document i belongs to rank i mod world. Every rank keeps its own accumulator (and its own
checkpoint); at the end the accumulators are gathered and merged in rank order, and rank 0 returns the
table (other ranks return None).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ..engine import InputError
from . import corpus as corpus_mod
from . import effects, roles
from .heads import (
    FUSED_COLUMNS,
    ReadError,
    induction_loss,
    repeated_scores,
    text_statistics,
)
from .headtable import COLUMNS, OFFSET_BUCKETS, HeadTable
from .models import LoadedModel, load
from .moments import Moments
from .stimuli import encode_text, repeated_random_tokens
from .verify import routing_check

STATS = FUSED_COLUMNS + ("sink_logit_mass", "max_weight")  # max_weight: NaN (not observed) unless asked
ROLE_NAMES = tuple(r.name for r in roles.ROLES)
ALPHA = 0.05
CHECKPOINT_VERSION = 1


@dataclass(frozen=True)
class CorpusSettings:
    corpus: str
    field: str = "text"
    per_line: bool = False
    limit: int | None = None
    max_tokens: int = 1024
    exact: int | str = 20
    importance_tokens: int = 256
    seeds: tuple = (0, 1, 2)
    stimulus_batch: int = 8
    max_weight: bool = False


class CorpusInterrupted(InputError):
    """Ctrl-C during a corpus read: where it stopped and how to resume."""


class CheckpointMismatch(InputError):
    """A checkpoint written by another command (other arguments, model or number of ranks)."""


# ------------------------------------------------------------------------------------ one rank's state


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

    @property
    def deltas(self) -> np.ndarray:
        """Per-document Δ loss, [documents, candidates]."""
        return np.stack(self.rows) if self.rows else np.zeros((0, self.k), dtype=np.float64)

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


# ------------------------------------------------------------------------------------ checkpoints


def fingerprint(settings: CorpusSettings, loaded: LoadedModel, world: int, candidates) -> str:
    """What a checkpoint must agree with: the arguments, the model (config and a slice of its weights),
    the number of ranks and the candidate heads."""
    first = next(loaded.model.parameters()).detach().flatten()[:4096].float().numpy().tobytes()
    ident = {
        "settings": asdict(settings) | {"corpus": str(Path(settings.corpus).resolve())},
        "model": loaded.name,
        "config": hashlib.sha256(loaded.model.config.to_json_string().encode()).hexdigest(),
        "weights": hashlib.sha256(first).hexdigest(),
        "world": world,
        "candidates": [list(map(int, p)) for p in candidates],
        "version": CHECKPOINT_VERSION,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def checkpoint_path(base: str, rank: int, world: int) -> Path:
    return Path(base) if world == 1 else Path(f"{base}.rank{rank}-of-{world}")


def save_checkpoint(path: Path, acc: Accumulator, key: str) -> None:
    """Atomic: written beside, then renamed over (a SIGKILL leaves the old file or the new, never half)."""
    from safetensors.numpy import save_file

    tmp = path.with_name(path.name + ".tmp")
    save_file({k: np.ascontiguousarray(v) for k, v in acc.state().items()}, str(tmp), metadata={"key": key})
    os.replace(tmp, path)


def load_checkpoint(path: Path, key: str) -> Accumulator | None:
    if not path.exists():
        return None
    from safetensors import safe_open
    from safetensors.numpy import load_file

    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
        state = load_file(str(path))
    except Exception as e:  # noqa: BLE001  (a damaged or foreign file)
        raise CheckpointMismatch(
            f"{path} is not an attnroute corpus checkpoint ({type(e).__name__})", field="checkpoint"
        ) from None
    if meta.get("key") != key:
        raise CheckpointMismatch(
            f"{path} was written by another command (other arguments, model, candidates or number of ranks); "
            "rerun with the same arguments, or give a new --checkpoint",
            field="checkpoint",
        )
    return Accumulator.from_state(state)


# ------------------------------------------------------------------------------------ one document


def windows(loaded: LoadedModel, text: str, max_tokens: int) -> list[torch.Tensor]:
    """The document's tokens as consecutive windows [1, ≤ max_tokens] (BOS/[CLS] once, at the start)."""
    ids, _ = encode_text(loaded.tokenizer, text, None)
    return [ids[:, i : i + max_tokens] for i in range(0, ids.shape[1], max_tokens) if ids.shape[1] - i >= 2]


def document_statistics(loaded: LoadedModel, wins: list[torch.Tensor], max_weight: bool = False) -> dict:
    """Row-weighted means over the document's windows: [L, H] per statistic, and "offsets" [L, H, buckets]
    (the argmax-offset histogram; NaN unless ``max_weight``, which reads the weights on the blocked path)."""
    keys = STATS + ("offsets",)
    total = {c: 0.0 for c in keys}
    weight = 0
    for ids in wins:
        cols, offsets, _ = text_statistics(loaded, ids, lambda *a: None, max_weight=max_weight)
        cols = {**cols, "offsets": offsets}
        n = ids.shape[1]
        for c in keys:
            total[c] = total[c] + cols[c] * n
        weight += n
    return {c: total[c] / max(weight, 1) for c in keys}


def document_roles(stats: dict, stimulus: dict) -> np.ndarray:
    """One-hot [L, H, roles]: the role each head gets from this document's statistics."""
    L, H = stats["entropy"].shape
    out = np.zeros((L, H, len(ROLE_NAMES)))
    for layer in range(L):
        for h in range(H):
            s = {k: float(v[layer, h]) for k, v in {**stats, **stimulus}.items() if k in _ROLE_INPUTS}
            out[layer, h, ROLE_NAMES.index(roles.label(s))] = 1
    return out


_ROLE_INPUTS = ("induction", "prev_token", "duplicate", "sink_mass", "punct_mass", "local", "entropy_norm")


def importance_batch(loaded: LoadedModel, text: str, tokens: int) -> dict:
    ids, _ = encode_text(loaded.tokenizer, text, tokens)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def candidates_of(loaded: LoadedModel, first_text: str, settings: CorpusSettings):
    """(the heads whose per-document effect is measured, the gradient estimate [L, H] on document 0):
    the top ``exact`` of |estimate|, or every head."""
    L, H = loaded.n_layers, loaded.n_heads
    g = effects.gradient_estimate(loaded, importance_batch(loaded, first_text, settings.importance_tokens))
    if settings.exact == "all":
        return [(layer, h) for layer in range(L) for h in range(H)], g
    order = np.argsort(-np.abs(g.ravel()), kind="stable")[: int(settings.exact)]
    return sorted((int(i // H), int(i % H)) for i in order), g


def document_delta(loaded: LoadedModel, text: str, pairs, tokens: int) -> np.ndarray:
    """Δ effect of zero-ablating each candidate on this document's first ``tokens`` tokens, [k]."""
    sweep = effects.Sweep(loaded, importance_batch(loaded, text, tokens), ("zero",))
    sweep.measure(pairs)
    d = sweep.deltas["zero"]
    return np.array([d[p] for p in pairs])


# ------------------------------------------------------------------------------------ the read


def _rank_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def read_corpus(
    model,
    corpus,
    *,
    field: str = "text",
    per_line: bool = False,
    limit: int | None = None,
    max_tokens: int | None = None,
    exact: int | str = 20,
    importance_tokens: int = 256,
    seeds=(0, 1, 2),
    stimulus_batch: int = 8,
    max_weight: bool = False,
    checkpoint: str | None = None,
    checkpoint_every: int = 10,
    verify: bool = True,
    progress=None,
    stop_after: int | None = None,
) -> HeadTable | None:
    """Head statistics over a corpus (see the module docstring). Returns the HeadTable on rank 0, None
    on other ranks. ``stop_after``: stop (as Ctrl-C would) after this many of this rank's documents."""
    say = progress or (lambda *a: None)
    kind = corpus_mod.corpus_kind(Path(corpus))  # a bad path fails before the model loads
    if exact != "all" and (isinstance(exact, bool) or not str(exact).isdigit()):
        raise ReadError(f"exact must be a number of heads (≥ 0) or 'all', got {exact!r}", field="exact")
    first = next(iter(corpus_mod.documents(corpus, field, per_line, limit)), None)  # a bad field fails before loading
    if first is None:
        raise ReadError(f"the corpus {corpus} holds no non-empty document", field="corpus")
    loaded = model if isinstance(model, LoadedModel) else load(model, progress=lambda m: say("load", m))
    if loaded.seq2seq:
        raise ReadError("corpus reading covers causal LMs and encoders; read an encoder-decoder one text at a time")
    limit_tokens = max_tokens or min(loaded.max_positions or 1024, 1024)
    settings = CorpusSettings(
        str(corpus),
        field,
        per_line,
        limit,
        int(limit_tokens),
        exact if exact == "all" else int(exact),
        int(min(importance_tokens, limit_tokens)),
        tuple(seeds),
        stimulus_batch,
        bool(max_weight),
    )
    rank, world = _rank_world()
    meta: dict = {"kind": loaded.kind, "corpus": corpus_mod.describe(Path(corpus), field, per_line), "timings_s": {}}
    meta["routing_check"] = routing_check(loaded) if verify else None

    t0 = time.perf_counter()
    say("stage", "repeated random tokens (not per document: the stimulus scores carry no interval)")
    per_seed = [
        repeated_scores(
            loaded, repeated_random_tokens(loaded.tokenizer, batch=stimulus_batch, seed=s, causal=loaded.causal)
        )
        for s in seeds
    ]
    stimulus = {n: np.mean([p[n] for p in per_seed], axis=0) for n in ("prev_token", "duplicate", "induction")}
    if loaded.causal:
        meta["induction_loss"] = induction_loss(
            loaded, repeated_random_tokens(loaded.tokenizer, batch=stimulus_batch, seed=seeds[0], causal=True)
        )
    meta["timings_s"]["repeated"] = time.perf_counter() - t0

    pairs, estimate = candidates_of(loaded, first, settings)
    meta["grad_attr"] = (
        "the one-backward estimate on document 0's first importance_tokens tokens (ranks the candidates)"
    )
    key = fingerprint(settings, loaded, world, pairs)
    ck_path = checkpoint_path(checkpoint, rank, world) if checkpoint else None
    acc = (load_checkpoint(ck_path, key) if ck_path else None) or Accumulator(
        loaded.n_layers, loaded.n_heads, len(pairs)
    )
    resumed = acc.docs_done
    if resumed:
        say("stage", f"resuming from {ck_path}: {resumed} documents of this rank already read")
    total = corpus_mod.count(corpus, field, per_line, limit)
    mine_total = len(range(rank, total, world))
    say("stage", f"reading {mine_total} of {total} documents on rank {rank} of {world} ({kind})")

    started, seen, tokens_now = time.perf_counter(), 0, 0
    mine = 0  # this rank's documents met so far, in order
    try:
        for index, text in enumerate(corpus_mod.documents(corpus, field, per_line, limit)):
            if index % world != rank:
                continue
            mine += 1
            if mine <= resumed:
                continue
            if stop_after is not None and seen >= stop_after:
                raise KeyboardInterrupt
            wins = windows(loaded, text, settings.max_tokens)
            if not wins:
                acc.docs_done += 1
                continue
            stats = document_statistics(loaded, wins, settings.max_weight)
            delta = document_delta(loaded, text, pairs, settings.importance_tokens) if pairs else None
            n_tok = sum(w.shape[1] for w in wins)
            acc.add(index, stats, document_roles(stats, stimulus), delta, n_tok)
            seen, tokens_now = seen + 1, tokens_now + n_tok
            say(
                "corpus",
                {
                    "done": acc.docs_done,
                    "total": mine_total,
                    "tokens": tokens_now,
                    "seen": seen,
                    "seconds": time.perf_counter() - started,
                },
            )
            if ck_path and acc.docs_done % checkpoint_every == 0:
                save_checkpoint(ck_path, acc, key)
    except KeyboardInterrupt:
        if ck_path:
            save_checkpoint(ck_path, acc, key)
        where = (
            f"checkpoint written to {ck_path}; rerun the same command to resume"
            if ck_path
            else ("give --checkpoint PATH to be able to resume")
        )
        raise CorpusInterrupted(
            f"stopped after {acc.docs_done} of {mine_total} documents on rank {rank} ({where})", field="corpus"
        ) from None
    if ck_path:
        save_checkpoint(ck_path, acc, key)
    seconds = time.perf_counter() - started
    say("rank", {"rank": rank, "documents": seen, "tokens": tokens_now, "seconds": seconds, "resumed": resumed})

    acc = _merge_ranks(acc, rank, world)
    if rank != 0:
        return None
    meta["timings_s"]["documents"] = seconds
    table = _table(loaded, acc, stimulus, pairs, settings, meta, world)
    table.columns["grad_attr"] = estimate
    return table


def _merge_ranks(acc: Accumulator, rank: int, world: int) -> Accumulator:
    """Gather every rank's accumulator and merge them in rank order (the same on every rank)."""
    if world == 1:
        return acc
    states = [None] * world
    torch.distributed.all_gather_object(states, {k: v for k, v in acc.state().items()})
    merged = Accumulator.from_state(states[0])
    for s in states[1:]:
        merged.merge(Accumulator.from_state(s))
    return merged


def holm(p: np.ndarray, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down adjusted p-values and which hypotheses are rejected at ``alpha`` (Holm 1979)."""
    m = len(p)
    order = np.argsort(p)
    adjusted = np.empty(m)
    running = 0.0
    for rank_i, i in enumerate(order):
        running = max(running, min(1.0, (m - rank_i) * p[i]))
        adjusted[i] = running
    return adjusted, adjusted <= alpha


def significance(deltas: np.ndarray) -> dict:
    """Per candidate: mean Δ, 95 % interval, the paired t-test's p (ablated vs clean over documents:
    one-sample on Δ), Holm-adjusted p, and rejection at α."""
    from scipy import stats

    n = deltas.shape[0]
    m = Moments((deltas.shape[1],))
    for row in deltas:
        m.add(row)
    if n < 2:
        p = np.full(deltas.shape[1], np.nan)
        return {"mean": m.mean, "ci": m.ci95(), "p": p, "p_holm": p, "significant": np.zeros_like(p, dtype=bool)}
    with np.errstate(all="ignore"):
        p = stats.ttest_1samp(deltas, 0.0, axis=0).pvalue
    p = np.where(np.isnan(p), 1.0, p)  # a constant Δ column (e.g. all zero): no evidence
    adjusted, reject = holm(p)
    return {"mean": m.mean, "ci": m.ci95(), "p": p, "p_holm": adjusted, "significant": reject}


def _table(loaded, acc: Accumulator, stimulus, pairs, settings, meta, world) -> HeadTable:
    L, H = loaded.n_layers, loaded.n_heads
    cols = {c: np.full((L, H), np.nan) for c in COLUMNS}
    for c in STATS:
        cols[c] = acc.moments[c].mean
        cols[f"{c}_ci"] = acc.moments[c].ci95()
    cols.update(stimulus)
    corpus_roles = [
        [roles.label({k: float(cols[k][layer, h]) for k in _ROLE_INPUTS}) for h in range(H)] for layer in range(L)
    ]
    n_docs = int(acc.moments["entropy"].n.max()) if acc.docs_done else 0
    counts = acc.role_counts
    cols["role_stability"] = np.array(
        [
            [counts[layer, h, ROLE_NAMES.index(corpus_roles[layer][h])] / max(n_docs, 1) for h in range(H)]
            for layer in range(L)
        ]
    )
    cols["ablation_delta_ci"] = np.full((L, H), np.nan)
    cols["ablation_p_holm"] = np.full((L, H), np.nan)
    order = np.argsort(acc.doc_index)  # documents in corpus order, however the ranks interleaved them
    deltas = acc.deltas[order]
    meta_imp: dict = {"candidates": [list(p) for p in pairs], "documents": int(deltas.shape[0])}
    if pairs and deltas.shape[0]:
        sig = significance(deltas)
        for j, (layer, h) in enumerate(pairs):
            cols["ablation_delta"][layer, h] = sig["mean"][j]
            cols["ablation_delta_ci"][layer, h] = sig["ci"][j]
            cols["ablation_p_holm"][layer, h] = sig["p_holm"][j]
        significant = [list(p) for p, s in zip(pairs, sig["significant"]) if s]
        meta_imp.update(
            {
                "test": "paired t-test of ablated vs clean loss over documents (one-sample on the per-document Δ), "
                "two-sided",
                "correction": f"Holm step-down over the {len(pairs)} candidates, α = {ALPHA}",
                "significant_heads": significant,
                "n_significant": len(significant),
                "effect_tokens": settings.importance_tokens,
                "michel_et_al_2019": "8 of 96 heads (BERT-base on MNLI) change the result significantly",
            }
        )
    meta.update(
        {
            "n_documents": n_docs,
            "n_tokens": int(acc.tokens),
            "ranks": world,
            "max_tokens": settings.max_tokens,
            "importance": meta_imp,
            "interval": "95 % interval of the mean over documents (Student's t; NaN below 2 documents)",
            "column_paths": {c: "corpus: per-document mean, then mean over documents" for c in STATS},
            "role_thresholds": roles.THRESHOLDS,
        }
    )
    offsets = acc.offsets.mean  # NaN where not observed (no max_weight)
    return HeadTable(loaded.name, L, H, cols, corpus_roles, offsets, meta, attention=list(loaded.attention_kinds))


__all__ = [
    "CheckpointMismatch",
    "CorpusInterrupted",
    "CorpusSettings",
    "holm",
    "read_corpus",
    "significance",
]
