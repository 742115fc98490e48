"""What the routing report shows, gathered by running the model: the HeadTable, the tokens and
every layer's weights for one short text. show/report.py renders it and runs nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from ..engine import CallbackProbe, InputError
from ..engine.probes import value_norms
from ..models import LoadedModel, load
from ..progress import reporter
from ..settings import ReportSettings
from .adapter import routed
from .corpus.documents import Corpus
from .corpus.read import SEQ2SEQ_CORPUS, read_corpus
from .heads import DEFAULT_TEXT, body, key_sets, read_heads
from .headtable import HeadTable
from .stimuli import encode_text
from .verify import model_inputs


@dataclass
class RoutingView:
    """One text read by one model: everything the report page needs, as data."""

    table: HeadTable
    tokens: list[str]  # the tokenizer's own strings, one per position (the encoder's, for an encoder-decoder)
    weights: list[np.ndarray]  # per layer [H, T, T] float32
    config: object  # the model's transformers config (for the KV-cache card)
    kv_heads: int
    context: int  # the model's context length (0 when the config has none)
    seconds: float
    decoder_tokens: list[str] | None = None  # an encoder-decoder's decoder input (the text shifted right)
    corpus: HeadTable | None = None  # a corpus read (read_corpus): means, intervals, significance
    generated_from: int | None = None  # tokens from this position on were generated (report --generate)
    value_norms: list[np.ndarray] | None = None  # per layer [H, T]: ‖v_j W_O^h‖, the value-norm-weighted maps
    sink_keys: list[int] | None = None  # the sink positions (the first, special tokens): the page can hide them


@torch.no_grad()
def capture_weights(loaded: LoadedModel, ids: torch.Tensor, norms: dict | None = None, select=None) -> list:
    """Every layer's weights for one text: L × [H, T, T] float32 (eager backend). ``norms``: a dict to
    fill with each layer's value norms ‖v_j W_O^h‖ [H, T] (NaN without an output projection).
    ``select(layer, weights [H, Tq, Tk]) -> array`` keeps only what it returns per layer (the explorer's
    rows and columns of one token: a long text's L × H × T² weights are never held at once)."""
    per_layer: dict[int, np.ndarray] = {}
    keep = select or (lambda layer, w: w)
    probe = CallbackProbe(lambda block: per_layer.__setitem__(block.layer, keep(block.layer, block.weights[0].float())))

    def value_norm(layer, module, q, k, v):
        proj = loaded.out_projections[layer]
        if proj is None:
            norms[layer] = np.full((loaded.n_heads, v.shape[2]), np.nan, np.float32)
        else:
            norms[layer] = value_norms(v[:1], proj.weight, loaded.n_heads)[0].float().numpy()

    with routed(loaded, probes=[probe], impl="eager", before_attend=[value_norm] if norms is not None else []):
        body(loaded)(**model_inputs(loaded, ids, torch.ones_like(ids)))
    return [_numpy(per_layer[layer]) for layer in range(loaded.n_layers)]


def _numpy(x):
    return x.numpy() if isinstance(x, torch.Tensor) else x


@torch.no_grad()
def generate_with_weights(loaded: LoadedModel, ids: torch.Tensor, n: int) -> tuple[torch.Tensor, list[np.ndarray]]:
    """Greedy-decode ``n`` tokens with the model's KV cache and keep the weights of every query on the
    way — the prompt's rows from the prefill, each generated token's row from its own decoding step
    (probes on the cached path: nothing is recomputed). Every generated token is fed back once, so its
    own row exists. Returns (prompt + continuation ids [1, T + n], L × [H, T + n, T + n] float32)."""
    from transformers import DynamicCache

    rows: dict[int, list] = {layer: [] for layer in range(loaded.n_layers)}
    probe = CallbackProbe(lambda b: rows[b.layer].append((b.q0, b.Tq, b.Tk, b.weights[0].float().numpy().copy())))
    cache = DynamicCache(config=loaded.model.config)
    out_ids = ids
    with routed(loaded, probes=[probe], impl="eager"):
        logits = loaded.model(input_ids=ids, cache=cache, use_cache=True).logits
        for _ in range(n):
            nxt = logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
            out_ids = torch.cat([out_ids, nxt], dim=1)
            logits = loaded.model(input_ids=nxt, cache=cache, use_cache=True).logits
    T, P = out_ids.shape[1], ids.shape[1]
    weights = []
    for layer in range(loaded.n_layers):
        full = np.zeros((loaded.n_heads, T, T), dtype=np.float32)
        # eager: one block per call, in order — the prefill (queries 0 … P − 1), then one query per step.
        # The keys of a call are the Tk positions ending at its last query: a sliding-window cache keeps
        # only the most recent ones.
        for call, (_q0, tq, tk, w) in enumerate(rows[layer]):
            start = 0 if call == 0 else P + call - 1
            end = start + tq  # one past the last query
            full[:, start : start + w.shape[1], end - tk : end - tk + w.shape[2]] = w
        weights.append(full)
    return out_ids, weights


PAGE_TOKENS = 256  # the page's default length


def page_tokens(loaded: LoadedModel, s: ReportSettings) -> int:
    """The page's token limit: the one asked for (refused past the model's positions), else 256 or the
    model's positions, whichever is fewer."""
    if s.max_tokens is not None:
        return loaded.fit(s.max_tokens, "max_tokens", "max_tokens")
    return min(PAGE_TOKENS, loaded.max_positions or PAGE_TOKENS)


def routing_view(
    model=None, text: str | None = None, *, settings: ReportSettings | None = None, progress=None, **fields
):
    """Read the model on the text and capture its weights: the `attnroute report` pipeline, and the
    corpus read beside it when ``settings.corpus`` names one (the model is loaded once). The fields
    are ReportSettings' (or pass ``settings``)."""
    s, t0, say = ReportSettings.of(settings, model, fields, text=text), time.perf_counter(), reporter(progress)
    corpus = s.corpus and Corpus(s.corpus.corpus, s.corpus.field, s.corpus.per_line, s.corpus.limit, s.corpus.skip_bad)
    if corpus and corpus.scanned[1] is None:  # every document checked before the model loads (count reused)
        raise InputError(f"the corpus {s.corpus.corpus} holds no non-empty document", field="corpus")
    loaded = s.model if isinstance(s.model, LoadedModel) else load(s.model, progress=lambda m: say("load", m))
    if s.generate and not loaded.causal:  # before minutes of reading
        raise InputError("generate: only a causal LM continues a text", field="generate")
    if corpus and loaded.seq2seq:  # read_corpus would refuse it too, but only after the whole text report
        raise InputError(SEQ2SEQ_CORPUS, field="corpus")
    limit = page_tokens(loaded, s)
    ids, _ = encode_text(loaded.tokenizer, DEFAULT_TEXT if s.text is None else s.text, limit)
    loaded.fit(ids.shape[1] + s.generate, "generate", "the text and its continuation")
    table = read_heads(settings=s.heads(limit).replace(model=loaded), progress=progress)
    generated_from = None
    if s.generate:
        say("stage", f"generating {s.generate} tokens with the KV cache, keeping every query's weights")
        generated_from = ids.shape[1]
        ids, weights = generate_with_weights(loaded, ids, s.generate)
    norms: dict = {}
    if s.generate:  # the values of a generated token are those of the whole text run again (cache or not)
        capture_weights(loaded, ids, norms, select=lambda layer, w: None)
    else:
        weights = capture_weights(loaded, ids, norms)
    tokens = loaded.tokenizer.convert_ids_to_tokens(ids[0].tolist())
    decoder_tokens = None
    if loaded.seq2seq:
        dec = model_inputs(loaded, ids, torch.ones_like(ids))["decoder_input_ids"]
        decoder_tokens = loaded.tokenizer.convert_ids_to_tokens(dec[0].tolist())
    corpus_table = corpus and read_corpus(settings=s.corpus.replace(model=loaded), progress=progress, documents=corpus)
    return RoutingView(
        table,
        tokens,
        weights,
        loaded.model.config,
        loaded.n_kv_heads,
        loaded.max_positions,
        time.perf_counter() - t0,
        decoder_tokens,
        corpus=corpus_table or None,
        generated_from=generated_from,
        value_norms=[norms[layer] for layer in range(loaded.n_layers)],
        sink_keys=sink_positions(loaded.tokenizer, ids),
    )


def sink_positions(tokenizer, ids: torch.Tensor) -> list[int]:
    """The positions read.heads counts as sinks (the first, and special tokens), of a [1, T] text."""
    return [int(i) for i in torch.nonzero(key_sets(tokenizer, ids)[0][0]).flatten()]


__all__ = ["RoutingView", "capture_weights", "generate_with_weights", "routing_view", "sink_positions"]
