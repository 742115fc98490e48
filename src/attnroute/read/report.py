"""The routing report's data: a text read, every layer's weights, and a corpus read beside it.

    view = routing_view("smollm2", "The quick brown fox …")        # or settings=ReportSettings(…)
    show.report.build(view, sections, kv)                            # the page (show/ renders it)

This module composes rooms: the text read (read/heads.py), the weights (read/capture.py) and, when
``settings.corpus`` names one, a corpus read (read/corpus/) with the model loaded once. It is the
one module of read/ above its rooms (tests/test_floors.py): no room imports it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch

from ..engine import InputError
from ..models import LoadedModel
from ..progress import reporter
from ..settings import PAGE_TOKENS, HeadsSettings, ReportSettings, verb
from .capture import capture_weights, generate_with_weights, sink_positions
from .corpus.documents import Corpus
from .corpus.read import SEQ2SEQ_CORPUS, read_corpus
from .heads import DEFAULT_TEXT, read_heads
from .headtable import HeadTable
from .stimuli import encode_text
from .study import Study, hears_audio
from .verify import model_inputs


@dataclass
class RoutingView:
    """One text read by one model: everything the report page needs, as data. ``weights``: per layer
    [H, T, T] float32, rows are queries; ``value_norms``: per layer [H, T], ‖v_j W_O^h‖."""

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


def page_tokens(loaded: LoadedModel, s: ReportSettings) -> int:
    """The page's token limit: the one asked for (refused past the model's positions), else 256 or the
    model's positions, whichever is fewer."""
    if s.max_tokens is not None:
        return loaded.fit(s.max_tokens, "max_tokens", "max_tokens")
    return min(PAGE_TOKENS, loaded.max_positions or PAGE_TOKENS)


@verb(ReportSettings)
def routing_view(
    model=None, text: str | None = None, *, settings: ReportSettings | None = None, progress=None, **fields
):
    """Read the model on the text and capture its weights: the `attnroute report` pipeline, and the
    corpus read beside it when ``settings.corpus`` names one (the model is loaded once). The fields
    are ReportSettings' (or pass ``settings``)."""
    s, t0 = ReportSettings.of(settings, model, fields, text=text), time.perf_counter()
    st = Study(s, progress)
    say = st.say
    corpus = s.corpus and Corpus(s.corpus.corpus, s.corpus.field, s.corpus.per_line, s.corpus.limit, s.corpus.skip_bad)
    if corpus and corpus.scanned[1] is None:  # every document checked before the model loads (count reused)
        raise InputError(f"the corpus {s.corpus.corpus} holds no non-empty document", field="corpus")
    loaded = st.load()
    if s.generate and not loaded.causal:  # before minutes of reading
        raise InputError("generate: only a causal LM continues a text", field="generate")
    if corpus and loaded.seq2seq:  # read_corpus would refuse it too, but only after the whole text report
        raise InputError(SEQ2SEQ_CORPUS, field="corpus")
    limit = page_tokens(loaded, s)
    ids, _ = encode_text(loaded.tokenizer, DEFAULT_TEXT if s.text is None else s.text, limit)
    loaded.fit(ids.shape[1] + s.generate, "generate", "the text and its continuation")
    table = read_heads(settings=s.heads(limit).replace(model=loaded), progress=progress)
    generated_from = ids.shape[1] if s.generate else None
    ids, weights, norms = _weights(loaded, ids, s.generate, say)
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


def _weights(loaded, ids: torch.Tensor, generate: int, say) -> tuple[torch.Tensor, list, dict]:
    """(the ids shown, every layer's weights on them, the value norms): the text's, or the text and its
    continuation of ``generate`` tokens decoded with the KV cache (every query's weights kept as it is made)."""
    norms: dict = {}
    if not generate:
        return ids, capture_weights(loaded, ids, norms), norms
    say("stage", f"generating {generate} tokens with the KV cache, keeping every query's weights")
    ids, weights = generate_with_weights(loaded, ids, generate)
    capture_weights(loaded, ids, norms, select=lambda layer, w: None)  # the values: the whole text run again
    return ids, weights, norms


@dataclass
class SpeechView:
    """A speech model's read of one clip: what the audio page shows. ``cross``: [cross layers, H, N + 1,
    frames] weights of the rows that predict each transcript token (and <|endoftext|>) over the clip's
    frames; ``mel``: the log-mel features of the clip's span [n_mels, 2·frames]."""

    table: HeadTable
    tokens: list[str]  # the transcript's tokens (the rows of ``cross`` predict them; the last row: the end)
    cross: np.ndarray
    mel: np.ndarray
    seconds: float  # the clip's duration
    clip: str
    elapsed: float


def speech_view(model, clip, text: str | None = None, ablation: bool = True, verify: bool = True, progress=None):
    """Read a speech model on a clip (read_heads with audio: the report's preset) and keep its cross-attention
    maps and spectrogram for the page."""
    from ..audio import audio
    from .alignment import cross_weights
    from .ground.speech import decoder_ids, features_of, prompt_length, speech_batch
    from .stimuli import tokens_of

    t0, say = time.perf_counter(), reporter(progress)
    heard = audio(clip)  # before the weights load, and so is a model that reads text (when its facts can tell)
    said = "reads text; `audio` is for a speech model (whisper-tiny)"
    text_model = hears_audio(lambda name: InputError(f"{name} {said}", field="audio"))
    loaded = Study(SimpleNamespace(model=model), say=say, refuse=text_model).load()
    hs = HeadsSettings.from_name("report", model=loaded, audio=clip, text=text, ablation=ablation, verify=verify)
    table = read_heads(settings=hs, progress=progress)
    ids = decoder_ids(loaded, table.meta.audio["transcript"])
    if tokens_of(loaded.tokenizer, ids[0]) != table.meta.tokens:  # the transcript re-encoded must be what ran
        raise InputError("the transcript does not re-encode to the tokens that were read; give it with `text`")
    feats = features_of(loaded, heard)
    cross, _ = cross_weights(loaded, speech_batch(feats, ids), heard)
    P = prompt_length(loaded, ids)
    tokens = [loaded.tokenizer.decode([int(t)]) for t in ids[0, P:-1]]
    mel = feats[0, :, : 2 * heard.frames].numpy()
    return SpeechView(table, tokens, cross, mel, heard.seconds, heard.describe(), time.perf_counter() - t0)


__all__ = ["RoutingView", "SpeechView", "page_tokens", "routing_view", "speech_view"]
