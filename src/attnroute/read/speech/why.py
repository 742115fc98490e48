"""why() on a speech model: why a head attends where it does on a clip — a cross-attention head's routes
from decoder rows to audio frames, an encoder head's from frame to frame, a decoder head's from row to row —
the score split exactly into (query-side, key-side) component pairs across both streams.

    r = why("whisper-tiny", audio="rome", head="L3.xH3", query="Rome", key="Rome")
    # the rows that predict " Rome" → the frames the alignment gives " Rome": what built each side

A cross head's query is built by the decoder's components (its embeddings, heads, MLPs) at the row, its key
by the encoder's (the conv front end and positions — ``enc.embed`` —, each encoder head and MLP) at the
frame, through the encoder's final norm and the head's key projection: qk.py splits each side as for text.
Positions: on the decoder, a word of the transcript names, as a query, the rows that *predict* its tokens
(as `knockout --audio` and the alignment read them) and, as a key, its tokens' own positions; or indices.
On the encoder: seconds 'a-b', a word (its frames by the consensus alignment), or frame indices. The
transcript is the given text, or greedy decoding.
"""

from __future__ import annotations

import re

import torch

from ...audio import audio
from ...errors import InputError
from ..adapter import routed
from ..alignment import alignment, frame_span, word_positions
from ..circuits.graph import Graph
from ..circuits.layout import discover
from ..circuits.qk import split_side
from ..circuits.why_core import HEAD, ROUTES_MAX, Recorded, existing, receivers, result
from ..ground.speech import Clips, decoder_ids, features_of, prompt_length, speech_batch, transcribe
from ..stimuli import tokens_of
from ..study import Study, hears_audio

INDICES = re.compile(r"\s*\d+(\s*,\s*\d+)*\s*")


def why_speech(s, say):
    """why() with ``s.audio``: see the module docstring."""
    heard = audio(s.audio)  # before the weights load
    refuse = lambda name: InputError(f"{name} has no audio encoder: `audio` needs a speech model", field="audio")  # noqa: E731
    loaded = Study(s, say=say, refuse=hears_audio(refuse)).load()
    feats = features_of(loaded, heard)
    text = s.text.strip() if s.text is not None else transcribe(loaded, feats)[1]
    ids = decoder_ids(loaded, text)
    clips = Clips(feats, ids)
    say("stage", f"why {s.head} attends where it does on {heard.source}: one forward, then its query and key split")
    layout = discover(loaded, clips)
    graph = Graph(layout)
    rq, rk, a = receivers(graph, layout, s.head)
    run = Recorded(loaded, layout, graph, clips, a.layer)
    h, kvh = graph.receivers[rq].head, graph.receivers[rk].head
    places = Places(loaded, text, ids, heard, speech_batch(feats, ids))
    query_side, key_side = _sides(s.head)
    qs_at = places.of(s.query, query_side, "query", s.query)
    ks_at = places.of(s.key, key_side, "key", s.query)
    said = f"query {s.query!r} → {query_side} {_span(qs_at)}, key {s.key!r} → {key_side} {_span(ks_at)}"
    said += f"; transcript {'given' if s.text is not None else 'decoded'}: {text!r}"
    routes, said = existing(run, h, [(i, j) for i in qs_at for j in ks_at], s.head, said)  # the head's own mask
    if len(routes) > ROUTES_MAX:
        raise InputError(f"{len(routes)} routes: at most {ROUTES_MAX} in one call", field="key")
    with torch.no_grad(), routed(loaded, impl="eager"):
        qs = split_side(run, rq, sorted(set(qs_at)), run.q[0, h])
        ks = split_side(run, rk, sorted(set(ks_at)), run.k[0, kvh])
    tokens = tokens_of(loaded.tokenizer, ids[0])
    return result(s, run, routes, said, (qs, ks), (h, kvh), tokens=tokens)


def _sides(head: str) -> tuple[str, str]:
    """Where the head's queries and keys live: (decoder rows or frames, …)."""
    side, _, cross, _ = HEAD.fullmatch(head).groups()
    if side == "E":
        return "frames", "frames"
    return ("rows", "frames") if cross else ("rows", "rows")


def _span(positions: list[int]) -> str:
    return f"{positions[0]}…{positions[-1]} ({len(positions)})" if len(positions) > 3 else str(positions)


class Places:
    """Decoder rows and encoder frames of one clip and transcript, from words, seconds or indices."""

    def __init__(self, loaded, text: str, ids: torch.Tensor, heard, batch: dict):
        self.loaded, self.text, self.ids, self.heard, self.batch = loaded, text, ids, heard, batch
        self.P = prompt_length(loaded, ids)
        self._words = None

    def words(self) -> list[dict]:
        if self._words is None:  # one more forward: only when a span is named by a word
            self._words = alignment(self.loaded, self.batch, self.heard)["words"]
        return self._words

    def of(self, spec: str, where: str, field: str, source: str) -> list[int]:
        if where == "rows":
            T = self.ids.shape[1]
            if INDICES.fullmatch(spec):
                return _indices(spec, T, field, "decoder positions")
            at = word_positions(self.loaded, self.text, spec, self.P)
            return [p - 1 for p in at] if field == "query" else at  # a query: the rows that predict the word
        if INDICES.fullmatch(spec):
            return _indices(spec, self.heard.frames, field, "frames of the clip")
        a, b, _ = frame_span(spec, self.words(), source, self.heard.frames)
        return list(range(a, b))


def _indices(spec: str, n: int, field: str, what: str) -> list[int]:
    found = sorted({int(x) for x in spec.split(",")})
    if found[-1] >= n:
        raise InputError(f"{field} {found[-1]} is past the {n} {what}", field=field)
    return found


__all__ = ["why_speech"]
