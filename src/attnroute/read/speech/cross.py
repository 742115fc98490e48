"""Interventions across streams on a speech model: routes from the decoder's tokens to the encoder's frames.

    r = cross_knockout("whisper-tiny", "paris", source="Paris")          # cut " Paris" → its own frames
    r = cross_knockout("whisper-tiny", "paris", source="Paris", target="0.2-0.6")   # → a span in seconds
    s = cross_swap("whisper-tiny", "paris", "rome")                      # rome decoded with paris's maps

**Knockout** (Geva et al. 2023, across streams): the rows that predict the ``source`` word's tokens (row
t − 1 predicts token t) lose their edges to the ``target`` frames — the word's own frames by the
alignment's word times (read/alignment.py), another word's, or a span in seconds — in every window of
``window`` cross-attention layers (KnockoutEdges: −inf before the softmax, the row renormalizes over the
frames it keeps). Measured teacher-forced: the word's log-probability (the sum over its tokens) and p of
its first token. Beside it a control span of as many frames, drawn (``seed``) from the clip's other
frames at least ``GAP`` frames from the route's. Then the clip is transcribed again with the span cut
from *every* decoder row in every cross layer (and again for the control): does the word go?

**Swap** (prompt-to-prompt, Hertz et al. 2022, on audio): clip B is transcribed by greedy decoding with
clip A's cross-attention maps substituted in a window of cross layers (A's maps recomputed at every step
on the tokens decoded so far; B's values, B's residual stream). Does the transcript follow A's routes?
Reported: the swapped transcript and its word error rate against A's and against B's own transcripts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ...audio import FRAME_SECONDS, audio
from ...engine import KnockoutEdges, SubstituteWeights
from ...engine.jsonable import Result
from ...progress import reporter
from ...settings import CrossKnockoutSettings, CrossSwapSettings, verb
from ..adapter import routed
from ..alignment import SpanError, alignment, frame_span, word_positions
from ..experiments.common import load_checked
from ..ground.speech import (
    decoder_ids,
    features_of,
    prompt_ids,
    prompt_length,
    speech_batch,
    suppressed,
    transcribe_batch,
)
from ..mode_ablation import wer
from ..study import hears_audio

GAP = 5  # frames (100 ms) between the route's span and its control: a word's edge is not sharper


CrossError = SpanError  # a cross-stream intervention that cannot be placed: the message names the word or span


def _speech_model(s, say):
    no_encoder = "has no audio encoder; cross-stream routes need a speech model"
    return load_checked(s, say, hears_audio(lambda name: CrossError(f"{name} {no_encoder}", field="model")))


def cross_layers(loaded) -> list[int]:
    return [i for i in range(loaded.n_layers) if loaded.mode(i) == "cross"]


def windows(loaded, window: int) -> list[list[int]]:
    layers = cross_layers(loaded)
    if not 1 <= window <= len(layers):
        raise CrossError(f"window must be between 1 and the {len(layers)} cross-attention layers", field="window")
    return [layers[i : i + window] for i in range(len(layers) - window + 1)]


def control_span(a: int, b: int, frames: int, seed: int) -> tuple[int, int]:
    """As many frames, elsewhere in the clip, at least GAP frames from [a, b)."""
    n = b - a
    starts = [s for s in range(0, frames - n + 1) if s + n <= a - GAP or s >= b + GAP]
    if not starts:
        raise CrossError("the clip is too short for a control span as long as the route's", field="target")
    s = int(np.random.default_rng(seed).choice(starts))
    return s, s + n


@dataclass(repr=False)
class CrossKnockoutResult(Result):
    """A decoder word's routes to a span of frames cut, window by window of cross layers, and a control."""

    KIND = "cross-knockout"
    TABLE = "windows"  # its table's key before format 1 (an alias of rows until 0.3)

    model: str
    clip: str
    transcript: str
    source: str
    queries: list[int]
    span: list[int]  # [first, last) frames
    control: list[int]
    target: str  # how the span was found
    clean: dict  # the word's log-probability and p of its first token, teacher-forced
    rows: list[dict] = field(default_factory=list)
    transcripts: dict = field(default_factory=dict)  # cut from every row of every cross layer: route, control

    def payload(self) -> dict:
        most = min(self.rows, key=lambda r: r["delta_logprob_route"]) if self.rows else None
        lines = [f"{self.source!r} in {self.transcript!r}: log p = {self.clean['logprob']:.3f} (clean)"]
        if most:
            lines.append(
                f"cutting it from {self.target} moves it most in cross layers {most['cross_layers']}: "
                f"{most['delta_logprob_route']:+.3f} (control span: {most['delta_logprob_control']:+.3f})"
            )
        t = self.transcripts
        lines.append(f"transcribed with the span cut everywhere: {t['route']!r} (control: {t['control']!r})")
        return {
            "experiment": "cross-knockout",
            "verdict": {"lines": lines},
            "summary": {"windows": len(self.rows), "clean logprob": self.clean["logprob"]},
            "model": self.model,
            "clip": self.clip,
            "transcript": self.transcript,
            "source": {"word": self.source, "queries": self.queries},
            "span": {"frames": self.span, "seconds": [x * FRAME_SECONDS for x in self.span], "found": self.target},
            "control": {"frames": self.control, "seconds": [x * FRAME_SECONDS for x in self.control]},
            "clean": self.clean,
            "windows": self.rows,
            "transcripts": self.transcripts,
        }

    @classmethod
    def from_dict(cls, data: dict) -> CrossKnockoutResult:
        src, span = data["source"], data["span"]
        head = (data["model"], data["clip"], data["transcript"], src["word"], src["queries"], span["frames"])
        return cls(*head, data["control"]["frames"], span["found"], data["clean"], data["rows"], data["transcripts"])


def _word_score(loaded, batch: dict, positions: list[int], interventions=()) -> dict:
    """Teacher-forced: Σ log p of the word's tokens, and p of its first token."""
    with torch.no_grad(), routed(loaded, interventions=list(interventions), impl="eager"):
        logp = torch.log_softmax(loaded.model(**batch).logits[0].float(), -1)
    ids = batch["decoder_input_ids"][0]
    lp = [float(logp[p - 1, ids[p]]) for p in positions]
    return {"logprob": sum(lp), "p_first": float(np.exp(lp[0]))}


EVERY_ROW = range(4096)  # every decoder row (Whisper's decoder takes 448); with a KV cache each step is row 0


def _cut(layers, rows, frames, heads) -> list:
    """Decoder rows ``rows`` (None: all) lose their edges to frames [a, b) in ``layers``. The rows are the
    decoder's own indices (``by_row``): KnockoutEdges' bottom-right placement, Tk − Tq + row, names no decoder
    position in a cross layer, whose keys are the encoder's 1,500 frames."""
    rows = EVERY_ROW if rows is None else rows
    return [KnockoutEdges(rows, range(*frames), heads, layer=layer, by_row=True) for layer in layers]


@verb(CrossKnockoutSettings)
def cross_knockout(model=None, clip=None, *, settings=None, progress=None, **fields) -> CrossKnockoutResult:
    """Cut a decoder word's routes to a span of frames; see the module docstring."""
    s = CrossKnockoutSettings.of(settings, model, fields, audio=clip)
    say = reporter(progress)
    heard = audio(s.audio)  # before the weights load
    loaded = _speech_model(s, say)
    feats = features_of(loaded, heard)
    text = s.text or transcribe_batch(loaded, feats)[0][1]
    batch = speech_batch(feats, decoder_ids(loaded, text))
    P = prompt_length(loaded, batch["decoder_input_ids"])
    queries = word_positions(loaded, text, s.source, P)
    words = alignment(loaded, batch, heard)["words"]
    a, b, how = frame_span(s.target, words, s.source, heard.frames)
    ca, cb = control_span(a, b, heard.frames, s.seed)
    heads = list(s.heads) if s.heads is not None else None
    # every cut is in a cross layer of the decoder: the encoder's output is the clean clip's in every run, so it
    # is computed once (a Whisper encoder's 1,500 frames were 9 of each score's 10 parts)
    enc = encoded(loaded, feats)
    scored = _decoder_batch(enc, batch["decoder_input_ids"])
    result = CrossKnockoutResult(
        loaded.name,
        heard.describe(),
        text,
        s.source,
        queries,
        [a, b],
        [ca, cb],
        how,
        _word_score(loaded, scored, queries),
    )
    spans = {"route": (a, b), "control": (ca, cb)}
    for layers in windows(loaded, s.window):
        say("stage", f"cross layers {[loaded.stream_layer(x) for x in layers]}")
        result.rows.append(_window_row(loaded, scored, queries, layers, spans, heads, result.clean["logprob"]))
    result.transcripts.update(_cut_transcripts(loaded, feats, enc, spans, heads))
    return result


def _window_row(loaded, scored: dict, queries: list[int], layers: list[int], spans: dict, heads, clean: float) -> dict:
    """One window of cross layers: the word's Δ log p (against ``clean``) and first-token p with each span's
    frames ({"route": (a, b), "control": …}) cut from the rows that predict it."""
    rows = [q - 1 for q in queries]  # the rows that predict the word
    got = {side: _word_score(loaded, scored, queries, _cut(layers, rows, span, heads)) for side, span in spans.items()}
    return {
        "cross_layers": [loaded.stream_layer(x) for x in layers],
        **{f"delta_logprob_{side}": got[side]["logprob"] - clean for side in spans},
        **{f"p_first_{side}": got[side]["p_first"] for side in spans},
    }


def _cut_transcripts(loaded, feats, enc, spans: dict, heads) -> dict[str, str]:
    """What the model transcribes with each span's frames cut from every decoder row in every cross layer (no
    decoder position is special here: the whole transcript is decoded again, from the clip's one encoding)."""
    out = {}
    for name, span in spans.items():
        with torch.no_grad(), routed(loaded, interventions=_cut(cross_layers(loaded), None, span, heads)):
            out[name] = transcribe_batch(loaded, feats, encoding=enc)[0][1]
    return out


@dataclass(repr=False)
class CrossSwapResult(Result):
    """Clip B transcribed with clip A's cross-attention maps, window by window of cross layers."""

    KIND = "cross-swap"
    TABLE = "windows"  # its table's key before format 1 (an alias of rows until 0.3)

    model: str
    clips: list[str]
    transcript_a: str
    transcript_b: str
    rows: list[dict] = field(default_factory=list)

    def payload(self) -> dict:
        follows = [r for r in self.rows if r["wer_to_a"] < r["wer_to_b"]]
        lines = [f"A: {self.transcript_a!r}; B: {self.transcript_b!r}"]
        lines += [
            f"cross layers {r['cross_layers']}: {r['transcript']!r} "
            f"(WER to A {r['wer_to_a']:.2f}, to B {r['wer_to_b']:.2f})"
            for r in self.rows
        ]
        lines.append(f"the transcript follows A's routes in {len(follows)} of {len(self.rows)} windows")
        return {
            "experiment": "cross-swap",
            "verdict": {"lines": lines},
            "summary": {"windows": len(self.rows), "follow A": len(follows)},
            "model": self.model,
            "clips": self.clips,
            "transcript_a": self.transcript_a,
            "transcript_b": self.transcript_b,
            "windows": self.rows,
        }


def _cross_maps(loaded, batch: dict, layers: list[int]) -> dict[int, torch.Tensor]:
    """Each layer's weights [1, H, Tq, Tk] on ``batch`` (the eager backend's, one block per call)."""
    from ..capture import capture_weights  # capture imports heads, which imports this package's neighbours

    keep = set(layers)
    w = capture_weights(loaded, None, batch=batch, select=lambda layer, x: x if layer in keep else None)
    return {layer: torch.as_tensor(w[layer])[None] for layer in layers}


def encoded(loaded, feats: torch.Tensor):
    """The encoder's output for a clip, computed once: each decoding step then runs the decoder only."""
    with torch.no_grad(), routed(loaded, impl="eager"):
        return loaded.model.model.encoder(input_features=feats)


def _decoder_batch(enc, ids: torch.Tensor) -> dict:
    return {"encoder_outputs": enc, "decoder_input_ids": ids, "decoder_attention_mask": torch.ones_like(ids)}


@torch.no_grad()
def swapped_transcript(loaded, enc_a, enc_b, layers: list[int], heads: list[int], max_new: int = 100) -> str:
    """Greedy decoding of B, each step with A's maps (on the same tokens) in ``layers``; ``enc_a``/``enc_b``:
    the clips' encoder outputs (``encoded``)."""
    eot = int(loaded.model.config.eos_token_id)
    ids = torch.tensor([prompt_ids(loaded)])
    banned, first = suppressed(loaded)  # transcribe_batch's rules, the first token's included
    for step in range(max_new):
        maps = _cross_maps(loaded, _decoder_batch(enc_a, ids), layers)
        ivs = [SubstituteWeights(heads, maps[layer][:, heads], layer=layer) for layer in layers]
        with routed(loaded, interventions=ivs, impl="eager"):
            logits = loaded.model(**_decoder_batch(enc_b, ids)).logits[0, -1]
        nxt = int(logits.masked_fill(first if step == 0 else banned, float("-inf")).argmax())
        if nxt == eot:
            break
        ids = torch.cat([ids, torch.tensor([[nxt]])], 1)
    return loaded.tokenizer.decode(ids[0, len(prompt_ids(loaded)) :]).strip()


@verb(CrossSwapSettings)
def cross_swap(model=None, clip_a=None, clip_b=None, *, settings=None, progress=None, **fields) -> CrossSwapResult:
    """B transcribed with A's cross-attention maps; see the module docstring."""
    s = CrossSwapSettings.of(settings, model, fields, audio_a=clip_a, audio_b=clip_b)
    say = reporter(progress)
    a, b = audio(s.audio_a), audio(s.audio_b)
    loaded = _speech_model(s, say)
    fa, fb = features_of(loaded, a), features_of(loaded, b)
    enc_a, enc_b = encoded(loaded, fa), encoded(loaded, fb)
    # the clips' own transcripts decode from the encodings the swaps read (the encoder ran twice more for them)
    both = (torch.cat([enc_a.last_hidden_state, enc_b.last_hidden_state]),)
    ta, tb = (t for _, t in transcribe_batch(loaded, torch.cat([fa, fb]), encoding=both))
    heads = list(s.heads) if s.heads is not None else list(range(loaded.n_heads))
    result = CrossSwapResult(loaded.name, [a.describe(), b.describe()], ta, tb)
    spans = windows(loaded, s.window)
    for layers in spans + ([cross_layers(loaded)] if len(spans) > 1 else []):  # each window, then all at once
        say("stage", f"B with A's maps in cross layers {[loaded.stream_layer(x) for x in layers]}")
        text = swapped_transcript(loaded, enc_a, enc_b, layers, heads)
        result.rows.append(
            {
                "cross_layers": [loaded.stream_layer(x) for x in layers],
                "transcript": text,
                "wer_to_a": round(wer([ta], [text]), 4),
                "wer_to_b": round(wer([tb], [text]), 4),
            }
        )
    return result


__all__ = ["CrossError", "CrossKnockoutResult", "CrossSwapResult", "cross_knockout", "cross_swap"]
