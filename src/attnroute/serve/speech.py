"""The explorer's model work for a speech model (Whisper): a clip, its cross-attention maps, and cuts.

    clip(clip, text)             the clip read: transcript, tokens, word times, spectrogram, every cross head's
                                 map (rows predict the transcript's tokens, columns are the clip's frames), the
                                 alignment heads (the model's list and attnroute's ranking)
    clip_cut(clip, text, cuts)   each row's log p of the token it predicts, and the transcript decoded again,
                                 before and after the cuts

A request names a clip by name only — a bundled clip, or a file given to `attnroute serve --audio` at
startup (read and checked before the weights load) — never a path. A cut of routes is a decoder row's edges
to a span of frames in one cross head or all of a layer's (KnockoutEdges by row: the intervention
`knockout --audio` makes, −inf before the softmax, the row renormalized over the frames it keeps); a cut of a
head zeroes its output (ZeroHead). Transcripts under cuts are decoded greedily with the decoder rerun on every
token so far at each step (no KV cache), so a row's cut stays on that row's position.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..audio import FRAME_SECONDS, Audio, audio, bundled_clips
from ..engine import KnockoutEdges, ZeroHead
from ..errors import InputError, readable_text
from ..models import LoadedModel
from ..read.adapter import routed
from ..read.alignment import alignment, cross_weights
from ..read.ground.speech import decoder_ids, features_of, prompt_length, speech_batch, transcribe, transcribe_batch
from ..read.speech.cross import encoded
from ..show.speech import spectrogram
from ..show.weights import head_payload
from .errors import RequestError

MAX_CUTS = 64
DEFAULT_CLIP = "paris"


@dataclass
class ClipState:
    """One clip as the model read it: what every later request on it starts from."""

    clip: Audio
    batch: dict  # input_features [1, n_mels, 3000], decoder_input_ids [1, T] (prompt, text, <|endoftext|>)
    P: int  # the first text position
    transcript: str
    source: str  # "given (teacher-forced)" or "greedy decoding"
    page: dict  # the page's data (JSON-ready)
    logprobs: np.ndarray  # [N + 1]: each row's log p of the token it predicts (the last: <|endoftext|>)
    encoding: object  # the encoder's output (eager, as every forward here): a cut is in the decoder, never in it


def clips_of(paths) -> dict[str, Audio]:
    """The files given to `serve --audio`, read and checked now (before the weights load), by file stem; a
    stem that repeats or names a bundled clip is refused (a request names a clip by that name)."""
    found: dict[str, Audio] = {}
    for p in paths or ():
        name = Path(p).stem
        if name in found or name in bundled_clips():
            raise InputError(f"audio: two clips would be named {name!r}; rename one of the files", field="audio")
        found[name] = audio(p)
    return found


class SpeechExplorer:
    def __init__(self, loaded: LoadedModel, clips: dict[str, Audio] | None = None, progress=None):
        if not loaded.audio:
            raise InputError(f"{loaded.name} has no audio encoder: `serve --audio` reads a speech model", field="audio")
        t0 = time.perf_counter()
        self.loaded, self.own = loaded, dict(clips or {})
        self.cross = [i for i, k in enumerate(loaded.attention_kinds) if k == "cross"]
        self._states: dict[tuple, ClipState] = {}
        self.startup_s = time.perf_counter() - t0

    def info(self) -> dict:
        m = self.loaded
        listed = [{"name": n, "text": r["text"]} for n, r in bundled_clips().items()]
        listed += [{"name": n, "text": None, "seconds": round(c.seconds, 2)} for n, c in self.own.items()]
        return {
            "model": m.name,
            "kind": "speech",
            "layers": m.n_layers,
            "heads": m.n_heads,
            "kv_heads": m.n_kv_heads,
            "cross_layers": len(self.cross),
            "clips": listed,
            "default_clip": next(iter(self.own), DEFAULT_CLIP),
            "reference": [list(map(int, r)) for r in getattr(m.model.config, "alignment_heads", None) or []],
        }

    # ---------------------------------------------------------------- a clip, read once
    def _audio(self, name) -> Audio:
        if not isinstance(name, str) or not name:
            raise RequestError(400, "clip: expected a clip's name")
        if name in self.own:
            return self.own[name]
        if name not in bundled_clips():
            known = ", ".join([*bundled_clips(), *self.own])
            raise RequestError(400, f"clip: no clip named {name!r}; this server has {known}")
        return audio(name)

    def state(self, name, text, job) -> ClipState:
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise RequestError(400, "text: expected the transcript as a non-empty string, or null to decode it")
        if text is not None:
            readable_text(text, "text")
        key = (name, text)
        if key in self._states:
            return self._states[key]
        heard, m = self._audio(name), self.loaded
        feats = features_of(m, heard)
        job.say("transcribing" if text is None else "reading the given transcript", 0, 3)
        said = text.strip() if text is not None else transcribe(m, feats)[1]
        try:
            batch = speech_batch(feats, decoder_ids(m, said))
        except InputError as e:
            raise RequestError(413, str(e)) from None
        job.check()
        job.say("every cross-attention head's map and the alignment", 1, 3)
        kept = cross_weights(m, batch, heard)
        weights, found = kept[0], alignment(m, batch, heard, kept)  # (Lc, H, N + 1, F): one forward for both
        job.check()
        job.say("each row's log-probability", 2, 3)
        P = prompt_length(m, batch["decoder_input_ids"])
        enc = encoded(m, batch["input_features"])
        lp = self._logprobs(batch, P, [], enc)
        source = "given (teacher-forced)" if text is not None else "greedy decoding"
        page = self._page(heard, batch, P, said, source=source, weights=weights, found=found, lp=lp)
        st = ClipState(heard, batch, P, said, source, page, lp, enc)
        self._states = {**dict(list(self._states.items())[-3:]), key: st}  # the last four clips
        return st

    def _page(self, heard, batch, P, said, *, source, weights, found, lp) -> dict:
        ids = batch["decoder_input_ids"][0]
        tokens = [self.loaded.tokenizer.decode([int(t)]) for t in ids[P:]]  # the last: <|endoftext|>
        mel = batch["input_features"][0, :, : 2 * heard.frames].numpy()
        Lc, H = weights.shape[:2]
        return {
            "clip": heard.describe(),
            "transcript": said,
            "transcript_source": source,
            "tokens": tokens,
            "seconds": heard.seconds,
            "frames": heard.frames,
            "frame_seconds": FRAME_SECONDS,
            "words": found["words"],
            "spectrogram": spectrogram(mel, found["words"]),
            "maps": [[head_payload(weights[l, h]) for h in range(H)] for l in range(Lc)],
            "alignment": {k: found.get(k) for k in ("ranking", "reference", "overlap", "monotonicity", "agreement")},
            "logprobs": _round(lp),
        }

    def clip(self, clip, text, job) -> dict:
        return self.state(clip, text, job).page

    # ---------------------------------------------------------------- cuts
    def interventions(self, cuts, st: ClipState) -> list:
        if not isinstance(cuts, list) or not 0 < len(cuts) <= MAX_CUTS:
            raise RequestError(400, f"cuts: expected a list of 1 to {MAX_CUTS} cuts")
        return [self._cut(n, c, st) for n, c in enumerate(cuts)]

    def _cut(self, n: int, c, st: ClipState):
        if not isinstance(c, dict) or c.get("kind") not in ("routes", "head"):
            raise RequestError(400, f"cut {n}: expected {{kind: 'routes' | 'head', layer, head, …}}")
        layer = self.cross[_index(c.get("layer"), f"cut {n}: layer", len(self.cross), "a cross-attention layer")]
        head = c.get("head")
        if c["kind"] == "head":
            return ZeroHead([_index(head, f"cut {n}: head", self.loaded.n_heads)], layer=layer)
        heads = None if head is None else [_index(head, f"cut {n}: head", self.loaded.n_heads)]
        rows = st.batch["decoder_input_ids"].shape[1] - st.P
        row = st.P - 1 + _index(c.get("row"), f"cut {n}: row", rows, "a transcript row")
        a, b = _frames(c.get("start"), c.get("end"), st.clip.frames, n)
        return KnockoutEdges([row], range(a, b), heads, layer=layer, by_row=True)

    def clip_cut(self, clip, text, cuts, job) -> dict:
        st = self.state(clip, text, job)
        made = self.interventions(cuts, st)
        job.say(f"each row's log p with {len(made)} cut(s)", 0, 2)
        after = self._logprobs(st.batch, st.P, made, st.encoding)
        job.check()
        job.say("the transcript decoded again with the cuts", 1, 2)
        redecoded = self._decode(st, made, job)
        return {
            "cuts": len(made),
            "tokens": st.page["tokens"],
            "before": _round(st.logprobs),
            "after": _round(after),
            "delta": _round(after - st.logprobs),
            "transcript": {"before": st.transcript, "after": redecoded, "source": st.source},
        }

    @torch.no_grad()
    def _logprobs(self, batch: dict, P: int, made: list, enc) -> np.ndarray:
        """Each text row's log p of the token it predicts (rows P − 1 … T − 2), teacher-forced, eager; the
        decoder alone runs, on the clip's encoding ``enc`` (the cuts are in cross layers: it is the same)."""
        ids = batch["decoder_input_ids"]
        inputs = {k: v for k, v in batch.items() if k != "input_features"}
        with routed(self.loaded, interventions=made, impl="eager"):
            logits = self.loaded.model(encoder_outputs=enc, **inputs).logits[0].float()
        logp = torch.log_softmax(logits[P - 1 : -1], -1)
        return logp.gather(1, ids[0, P:, None])[:, 0].numpy().astype(np.float64)

    def _decode(self, st: ClipState, made: list, job) -> str:
        """Greedy decoding (transcribe's rules) with the cuts on, the decoder rerun on all tokens each step, on
        the clip's encoding."""
        with torch.no_grad(), routed(self.loaded, interventions=made, impl="eager"):
            feats = st.batch["input_features"]
            ((_, text),) = transcribe_batch(self.loaded, feats, cache=False, check=job.check, encoding=st.encoding)
        return text


def _index(value, name: str, n: int, what: str = "an integer") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < n:
        raise RequestError(400, f"{name}: expected {what} in 0 … {n - 1}, got {value!r}")
    return value


def _frames(start, end, frames: int, n: int) -> tuple[int, int]:
    """[first, last) frames of a span in seconds, inside the clip."""
    ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (start, end))
    a = int(start / FRAME_SECONDS) if ok else -1
    b = min(frames, math.ceil(end / FRAME_SECONDS)) if ok else -1
    if not ok or not 0 <= a < b:
        limit = f"0 … {frames * FRAME_SECONDS:.2f}"
        raise RequestError(400, f"cut {n}: expected start < end in seconds within {limit}, got {start!r}–{end!r}")
    return a, b


def _round(a: np.ndarray) -> list:
    return [None if not np.isfinite(x) else float(f"{x:.5g}") for x in np.asarray(a, dtype=np.float64)]


__all__ = ["MAX_CUTS", "SpeechExplorer", "clips_of"]
