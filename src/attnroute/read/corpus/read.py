"""A corpus, not an anecdote: head statistics and head importance over many documents, with 95 %
intervals, resumable, and sharded across processes with torch.distributed.

    table = read_corpus("smollm2", "data/python-docs-topics.jsonl", limit=40)   # or settings=CorpusSettings(…)
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

import time
from dataclasses import dataclass

import numpy as np
import torch

from ...errors import Interrupted, deferred_interrupt
from ...models import LoadedModel
from ...progress import eta, reporter
from ...settings import CorpusSettings, verb
from .. import effects, roles
from ..ground.checkpoint import CheckpointMismatch
from ..ground.group import agree
from ..heads import ReadError, mean_scores, stimulus_scores
from ..headtable import COLUMNS, CorpusMeta, HeadTable
from ..stimuli import encode_text
from ..study import Study
from ..textpass import text_statistics
from ..verify import routing_check
from .accumulator import EMPTY_DIGEST, STATS, Accumulator, merge_ranks
from .documents import Corpus
from .significance import ALPHA, significance
from .store import checkpoint_path, corpus_key, load_checkpoint, save_checkpoint

# Michel et al. 2019 ("Are Sixteen Heads Really Better than One?", 1905.10650), Table 1: in their
# WMT English–French Transformer, 8 of the 96 encoder self-attention heads (6 layers × 16) change
# BLEU significantly when masked one at a time.
MICHEL_2019 = "8 of 96 encoder self-attention heads (WMT En-Fr Transformer, 6 layers × 16) matter significantly"


SEQ2SEQ_CORPUS = "a corpus read covers causal LMs and encoders; read an encoder-decoder one text at a time"


class CorpusInterrupted(Interrupted):
    """Ctrl-C (or the ``stop`` event) during a corpus read: where it stopped and how to resume."""


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
        cols, offsets, _ = text_statistics(loaded, ids, max_weight=max_weight)
        cols = {**cols, "offsets": offsets}
        n = ids.shape[1]
        for c in keys:
            total[c] = total[c] + cols[c] * n
        weight += n
    return {c: total[c] / max(weight, 1) for c in keys}


def document_roles(stats: dict, stimulus: dict) -> np.ndarray:
    """One-hot [L, H, roles]: the role each head gets from this document's statistics."""
    return roles.one_hot(roles.label_grid({**stats, **stimulus}))


def importance_batch(loaded: LoadedModel, text: str, tokens: int) -> dict:
    ids, _ = encode_text(loaded.tokenizer, text, tokens)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def candidates_of(loaded: LoadedModel, first_text: str, settings: CorpusSettings, importance_tokens: int):
    """(the heads whose per-document effect is measured, the gradient estimate [L, H] on document 0):
    the top ``exact`` of |estimate|, or every head."""
    L, H = loaded.n_layers, loaded.n_heads
    g = effects.gradient_estimate(loaded, importance_batch(loaded, first_text, importance_tokens))
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


@verb(CorpusSettings)
def read_corpus(
    model=None,
    corpus=None,
    *,
    settings: CorpusSettings | None = None,
    progress=None,
    stop=None,
    documents=None,
    **fields,
):
    """Head statistics over a corpus (see the module docstring) -> HeadTable on rank 0, None on other
    ranks. The fields are CorpusSettings' (or pass ``settings``). ``stop``: an object with ``is_set()``
    (a threading.Event) checked before each document; when set, the read stops as Ctrl-C would
    (checkpoint written, CorpusInterrupted raised). ``documents``: the settings' Corpus, already made and
    scanned by a caller that checked it before loading the model (the routing report)."""
    s, say = CorpusSettings.of(settings, model, fields, corpus=corpus), reporter(progress)
    docs = documents or Corpus(s.corpus, s.field, s.per_line, s.limit, s.skip_bad)  # a bad path fails here
    total, first = docs.scanned  # the counting pass parses every document: a bad line fails here too
    if first is None:
        raise ReadError(f"the corpus {s.corpus} holds no non-empty document", field="corpus")
    st = Study(s, progress, checkpoint=_rank_checkpoint, kind="corpus")  # every rank writes its own checkpoint
    with st:
        loaded, rank, world = st.loaded, st.rank, st.world
        if loaded.seq2seq:
            raise ReadError(SEQ2SEQ_CORPUS, field="corpus")
        window = loaded.fit(s.max_tokens, "max_tokens", "max_tokens") if s.max_tokens else None
        window = window or min(loaded.max_positions or 1024, 1024)
        effect_tokens = min(s.importance_tokens, window)
        meta: dict = {"kind": loaded.kind, "corpus": docs.describe(), "timings_s": {}, "window_tokens": window}
        meta["routing_check"] = routing_check(loaded) if s.verify else None
        stimulus = stimulus_pass(loaded, s, meta, say)
        pairs, estimate = candidates_of(loaded, first, s, effect_tokens)
        meta["grad_attr"] = (
            "the one-backward estimate on document 0's first importance_tokens tokens (ranks the candidates)"
        )
        key = corpus_key(_key_fields(s, window, effect_tokens), loaded, world, pairs) if st.checkpoint else None
        plan = ReadPlan(pairs, stimulus, window, effect_tokens, s.max_weight)
        acc = merge_ranks(documents_pass(st, docs, total, key, plan, stop), world)
    if rank != 0:
        return None
    skipped = list(docs.skipped) if s.skip_bad else None
    table = _table(st, acc, plan, meta, skipped)
    table.columns["grad_attr"] = estimate
    return table


def _key_fields(s: CorpusSettings, window: int, effect_tokens: int) -> dict:
    """The settings a checkpoint's numbers depend on, resolved. Not the corpus path: the documents
    themselves are checked by their digest (a moved corpus resumes, a rewritten one is refused)."""
    return {
        "field": s.field,
        "per_line": s.per_line,
        "limit": s.limit,
        "max_tokens": int(window),
        "exact": s.exact,
        "importance_tokens": int(effect_tokens),
        "seeds": list(s.seeds),
        "stimulus_batch": s.stimulus_batch,
        "max_weight": bool(s.max_weight),
    }


def stimulus_pass(loaded: LoadedModel, s: CorpusSettings, meta: dict, say) -> dict:
    """The repeated-token scores (not per document: they carry no interval) and the induction loss."""
    t0 = time.perf_counter()
    say("stage", "repeated random tokens (not per document: the stimulus scores carry no interval)")
    per_seed, _, induction = stimulus_scores(loaded, s.seeds, s.stimulus_batch)
    if induction is not None:
        meta["induction_loss"] = induction
    meta["timings_s"]["repeated"] = time.perf_counter() - t0
    return mean_scores(per_seed)


def _rank_checkpoint(base, rank: int, world: int):
    return checkpoint_path(str(base), rank, world) if base else None


@dataclass(frozen=True)
class ReadPlan:
    """What every document is read with: the candidate heads whose ablation is measured, the stimulus scores,
    the window of tokens read at once, the tokens an ablation reads, and whether the max weight is kept."""

    pairs: list
    stimulus: dict
    window: int
    effect_tokens: int
    max_weight: bool


def documents_pass(st: Study, docs: Corpus, total: int, key, plan: ReadPlan, stop) -> Accumulator:
    """This rank's documents (i mod world == rank), streamed once, resumed from and saved to the checkpoint."""
    loaded, s, say, rank, world = st.loaded, st.s, st.say, st.rank, st.world
    ck_path = _rank_checkpoint(st.checkpoint, rank, world)
    mine_total = len(range(rank, total, world))
    acc, resumed, stored = _restored(st, ck_path, key, plan, mine_total)
    say("stage", f"reading {mine_total} of {total} documents on rank {rank} of {world} ({docs.kind})")
    started, seen, tokens_now, mine, stopped = time.perf_counter(), 0, 0, 0, False
    try:
        for index, text in enumerate(docs):
            if index % world != rank:
                continue
            mine += 1
            if mine <= resumed:  # read before the checkpoint: only its text is chained, to compare
                acc.saw(text)
                if mine == resumed:
                    same_documents(acc, stored, ck_path, resumed)
                continue
            if stop is not None and stop.is_set():
                stopped = True
                break
            n_tok = read_document(loaded, acc, index, text, plan)
            seen, tokens_now = seen + (n_tok > 0), tokens_now + n_tok
            _say_documents(say, acc.docs_done, mine_total, seen, tokens_now, started)
            if ck_path and acc.docs_done % s.checkpoint_every == 0:
                with deferred_interrupt():  # a checkpoint is written whole
                    save_checkpoint(ck_path, acc, key)
                say("checkpoint", f"wrote {ck_path} ({acc.docs_done} documents of this rank)")
    except KeyboardInterrupt:  # Ctrl-C: the same ending as a stop event
        stopped = True
    if ck_path:
        with deferred_interrupt():
            save_checkpoint(ck_path, acc, key)
    if stopped:
        where = f"checkpoint written to {ck_path}; rerun the same command to resume" if ck_path else NO_CHECKPOINT
        raise CorpusInterrupted(f"stopped after {acc.docs_done} of {mine_total} documents on rank {rank} ({where})")
    _say_rank(say, rank, seen, tokens_now, time.perf_counter() - started, resumed)
    return acc


NO_CHECKPOINT = "give a `checkpoint` path to be able to resume"


def _restored(st: Study, ck_path, key, plan: ReadPlan, mine_total: int) -> tuple[Accumulator, int, str]:
    """(this rank's accumulator — resumed from its checkpoint or new —, the documents it had read, their
    digest); a checkpoint that read more documents than this rank's share now holds is refused."""
    shape = (st.loaded.n_layers, st.loaded.n_heads, len(plan.pairs))
    restored = agree(st.world, lambda: _load(st, ck_path, key, shape))
    acc = restored or Accumulator(*shape)
    resumed, stored = acc.docs_done, acc.documents_digest
    if resumed > mine_total:
        raise CheckpointMismatch(
            f"checkpoint {ck_path} was written for other documents: it has read {resumed}, and this rank's share of "
            f"the corpus now holds {mine_total}; remove it to start over"
        )
    acc.documents_digest = EMPTY_DIGEST  # rebuilt over the documents skipped below, then compared
    if resumed:
        st.say("stage", f"resuming from {ck_path}: {resumed} documents of this rank already read")
    return acc, resumed, stored


def _load(st: Study, ck_path, key, shape) -> Accumulator | None:
    """This rank's checkpoint, if any; a cached one written by another run is started over, said in a line."""
    if not ck_path:
        return None
    try:
        return load_checkpoint(ck_path, key, shape)
    except CheckpointMismatch as e:
        if not st.cached:
            raise
        st.say("checkpoint", f"starting over: the cached checkpoint cannot be resumed ({e})")
        return None


def _say_rank(say, rank: int, seen: int, tokens: int, seconds: float, resumed: int) -> None:
    rate = tokens / max(seconds, 1e-9)
    resumed_note = f"; {resumed} read before the resume" if resumed else ""
    say(
        "rank",
        f"rank {rank}: {seen} documents, {tokens} tokens in {seconds:.1f} s ({rate:.0f} tokens/s){resumed_note}",
        rank=rank,
        documents=seen,
        tokens=tokens,
        seconds=seconds,
        resumed=resumed,
    )


def same_documents(acc: Accumulator, stored: str, ck_path, resumed: int) -> None:
    """The documents a checkpoint read are the ones the corpus holds now (their texts' digest)."""
    if acc.documents_digest != stored:
        raise CheckpointMismatch(
            f"checkpoint {ck_path} was written for other documents: the first {resumed} documents of this rank "
            "differ from the corpus now; remove it to start over"
        )


def read_document(loaded, acc: Accumulator, index: int, text: str, plan: ReadPlan) -> int:
    """One document into the accumulator, its text chained into the documents' digest at the same moment
    (Ctrl-C waits for both: a document counts whole or not at all, so a resume starts on it again); its
    token count (0 for a document too short to read)."""
    wins = windows(loaded, text, plan.window)
    if not wins:
        with deferred_interrupt():
            acc.docs_done += 1
            acc.saw(text)
        return 0
    stats = document_statistics(loaded, wins, plan.max_weight)
    delta = document_delta(loaded, text, plan.pairs, plan.effect_tokens) if plan.pairs else None
    n_tok = sum(w.shape[1] for w in wins)
    roles_of = document_roles(stats, plan.stimulus)
    with deferred_interrupt():
        acc.add(index, stats, roles_of, delta, n_tok)
        acc.saw(text)
    return n_tok


def _say_documents(say, done: int, total: int, seen: int, tokens: int, started: float) -> None:
    now = time.perf_counter()
    seconds = max(now - started, 1e-9)
    say(
        "corpus",
        f"documents {done}/{total}, {seen / seconds:.2f} docs/s, {tokens / seconds:.0f} tokens/s",
        done=done,
        total=total,
        eta=eta(started, now, max(seen, 1), max(seen, 1) + total - done),
        tokens=tokens,
        seen=seen,
        seconds=now - started,
    )


def _table(st: Study, acc: Accumulator, plan: ReadPlan, meta, skipped=None) -> HeadTable:
    """The corpus's HeadTable: per-document means with their intervals, roles and their stability, the
    stimulus scores, and the candidates' ablation tested over documents."""
    loaded = st.loaded
    L, H = loaded.n_layers, loaded.n_heads
    cols = {c: np.full((L, H), np.nan) for c in COLUMNS}
    for c in STATS:
        cols[c] = acc.moments[c].mean
        cols[f"{c}_ci"] = acc.moments[c].ci95()
    cols.update(plan.stimulus)
    corpus_roles = roles.label_grid(cols)
    n_docs = int(acc.moments["entropy"].n.max()) if acc.docs_done else 0
    counts = acc.role_counts
    cols["role_stability"] = np.array(
        [
            [counts[layer, h, roles.ROLE_NAMES.index(corpus_roles[layer][h])] / max(n_docs, 1) for h in range(H)]
            for layer in range(L)
        ]
    )
    meta.update(
        {
            "n_documents": n_docs,
            "n_tokens": int(acc.tokens),
            "ranks": st.world,
            "max_tokens": meta.pop("window_tokens"),
            "importance": _importance(cols, acc, plan),
            "interval": "95 % interval of the mean over documents (Student's t; NaN below 2 documents)",
            "column_paths": {c: "corpus: per-document mean, then mean over documents" for c in STATS},
            "role_thresholds": roles.THRESHOLDS,
            "skipped": {"count": len(skipped), "documents": skipped} if skipped is not None else None,
        }
    )
    offsets = acc.offsets.mean  # NaN where not observed (no max_weight)
    meta = CorpusMeta.from_dict(meta)
    return HeadTable(loaded.name, L, H, cols, corpus_roles, offsets, meta, attention=list(loaded.attention_kinds))


def _importance(cols: dict, acc: Accumulator, plan: ReadPlan) -> dict:
    """The candidates' ablation Δ over documents into ``cols`` (mean, interval, Holm's p), and what was tested."""
    L, H = cols["entropy"].shape
    cols["ablation_delta_ci"] = np.full((L, H), np.nan)
    cols["ablation_p_holm"] = np.full((L, H), np.nan)
    order = np.argsort(acc.doc_index)  # documents in corpus order, however the ranks interleaved them
    deltas, pairs = acc.deltas[order], plan.pairs
    meta_imp: dict = {"candidates": [list(p) for p in pairs], "documents": int(deltas.shape[0])}
    if not (pairs and deltas.shape[0]):
        return meta_imp
    sig = significance(deltas)
    for j, (layer, h) in enumerate(pairs):
        cols["ablation_delta"][layer, h] = sig["mean"][j]
        cols["ablation_delta_ci"][layer, h] = sig["ci"][j]
        cols["ablation_p_holm"][layer, h] = sig["p_holm"][j]
    tested = deltas.shape[0] >= 2  # a test over documents needs two of them: below that, no verdict
    significant = [list(p) for p, s in zip(pairs, sig["significant"]) if s] if tested else None
    meta_imp.update(
        {
            "test": "paired t-test of ablated vs clean loss over documents (one-sample on the per-document Δ), "
            "two-sided",
            "correction": f"Holm step-down over the {len(pairs)} candidates, α = {ALPHA}",
            "significant_heads": significant,
            "n_significant": len(significant) if tested else None,
            "effect_tokens": plan.effect_tokens,
            "michel_et_al_2019": MICHEL_2019,
        }
    )
    if not tested:
        meta_imp["note"] = "one document: no test over documents can run, so no head is called significant"
    return meta_imp


__all__ = ["SEQ2SEQ_CORPUS", "CorpusInterrupted", "read_corpus"]
