"""Route attribution across streams on a speech model: every cross-attention route (a decoder row → one
audio frame) estimated, the top kept, the top of those knocked out exactly.

    r = speech_routes("whisper-tiny", "rome", answer="Rome", wrong="Paris")

The decoder reads the clip's transcript up to the ``answer`` word (or ``text``); the metric is
logit(answer) − logit(wrong) at the last position (log p(answer) without ``wrong``). The estimate and
the exact knockout are routes.py's — −A_ij (dP_ij − D_i) / (1 − A_ij) streamed block by block with the
metric's gradient at every head's output, and KnockoutEdges with the row renormalized — on the speech
batch; a cross route's query is its decoder row (``by_row``). Default layers: the cross-attention layers
(an encoder route, frame → frame, is one too: give ``layers``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch

from ...audio import FRAME_SECONDS, audio
from ...engine import InputError
from ...engine.jsonable import Result
from ...models.arithmetic import arithmetic_of, arithmetic_said, float32_arithmetic
from ...settings import SpeechRoutesSettings, verb
from ..effects import clean_encoding
from ..ground.speech import (
    features_of,
    last_logit_diff,
    prompt_ids,
    speech_batch,
    text_ids,
    transcribe_batch,
    word_token,
)
from ..patching.route_attribution import RouteRun, _agreements, _verify
from ..patching.routes import output_gradients, stream_routes
from ..stimuli import tokens_of
from ..study import Study, hears_audio


class SpeechRoutesError(InputError):
    """A route attribution on a clip that cannot be placed: the message names the word."""


@dataclass(repr=False)
class SpeechRoutesResult(Result):
    """The top routes by |estimate| (Δ metric when the route is removed, its row renormalized), the top
    ``verify`` knocked out exactly; each with its stream, decoder token and frame time."""

    KIND = "speech-routes"
    TABLE = "routes"  # its table's key before format 1 (an alias of rows until 0.3)

    model: str
    clip: str
    transcript: str
    prefix: str
    metric: str
    m: float
    tokens: list[str]
    layers: list[int]
    routes: list[dict] = field(default_factory=list)
    settle: dict | None = None
    arithmetic: dict | None = None  # a bf16/fp16 model: its weights' dtype, read in float32

    def payload(self) -> dict:
        top = self.routes[0] if self.routes else None
        lines = [f"{self.metric} after {self.prefix!r}: {self.m:.3f}"]
        if top:
            lines.append(
                f"the strongest route: {top['stream']} layer {top['stream_layer']} head {top['head']}, "
                f"{top['query_token']!r} → {top['key_said']}: estimate {top['estimate']:+.3f}"
                + ("" if top["exact"] is None else f", exact {top['exact']:+.3f}")
            )
        if said := arithmetic_said(self.arithmetic):
            lines.append(said)
        return {
            "experiment": "speech-routes",
            "verdict": {"lines": lines},
            "summary": {"routes": len(self.routes), "metric": self.m},
            "model": self.model,
            "clip": self.clip,
            "transcript": self.transcript,
            "prefix": self.prefix,
            "metric": {"name": self.metric, "value": self.m},
            "tokens": self.tokens,
            "layers": self.layers,
            "routes": self.routes,
            "agreement": _agreements(self.routes),
            "settle": self.settle,
            "arithmetic": self.arithmetic,
        }

    @classmethod
    def from_dict(cls, data: dict) -> SpeechRoutesResult:
        metric = data["metric"]
        return super().from_dict({**data, "metric": metric["name"], "m": metric["value"]})


def _prefix(transcript: str, answer: str) -> str:
    """The transcript's words before the first occurrence of ``answer`` (whole words)."""
    m = re.search(rf"(?<!\w){re.escape(answer.strip())}(?!\w)", transcript)
    if m is None:
        raise SpeechRoutesError(
            f"{answer!r} is not a word of the transcript {transcript!r}; give `text`", field="answer"
        )
    return transcript[: m.start()].strip()


def _label(loaded, routes: list[dict], tokens: list[str]) -> None:
    for r in routes:
        mode = loaded.mode(r["layer"])
        r["stream"], r["stream_layer"] = mode, loaded.stream_layer(r["layer"])
        r["query_token"] = tokens[r["query"]] if mode != "encoder" else f"frame {r['query']}"
        if mode == "decoder":
            r["key_said"] = repr(tokens[r["key"]])
        else:
            r["key_seconds"] = round(r["key"] * FRAME_SECONDS, 3)
            r["key_said"] = f"frame {r['key']} ({r['key_seconds']:.2f} s)"


@verb(SpeechRoutesSettings)
def speech_routes(model=None, clip=None, *, settings=None, progress=None, **fields) -> SpeechRoutesResult:
    """Every route of the chosen layers estimated on a clip; see the module docstring."""
    s = SpeechRoutesSettings.of(settings, model, fields, audio=clip)
    no_encoder = "has no audio encoder: routes across streams need a speech model"
    st = Study(s, progress, refuse=hears_audio(lambda name: SpeechRoutesError(f"{name} {no_encoder}")))
    heard = audio(s.audio)  # before the weights load
    loaded = st.load()
    with float32_arithmetic(loaded):  # bf16 weights read in float32 (models/arithmetic.py)
        return _attribute(st, s, heard, loaded)


def encoded_once(loaded, batch: dict, layers: list[int]) -> dict:
    """The forwards' keyword arguments: ``encoder_outputs`` when every route lies in the decoder (its cross or
    self layers), else none. A knockout there cannot change the encoder, so one clean encoding — under the
    engine the knockouts run (effects.IMPL), bit for bit what each full forward computed — serves the gradient
    pass, the streaming pass and every knockout: the encoder runs once instead of once per forward (1,500
    frames, about 1.3 s on one core; 12 runs for --verify 5). An encoder route reruns the encoder each time."""
    if any(loaded.mode(x) == "encoder" for x in layers):
        return {}
    return {"encoder_outputs": (clean_encoding(loaded, batch),)}


def _attribute(st: Study, s: SpeechRoutesSettings, heard, loaded) -> SpeechRoutesResult:
    say = st.say
    feats = features_of(loaded, heard)
    transcript = transcribe_batch(loaded, feats)[0][1]
    prefix = s.text if s.text is not None else _prefix(transcript, s.answer)
    answer = word_token(loaded, s.answer, "answer")
    wrong = None if s.wrong is None else word_token(loaded, s.wrong, "wrong")
    ids = torch.tensor([prompt_ids(loaded) + (text_ids(loaded, prefix) if prefix else [])])
    batch = speech_batch(feats, ids)
    layers = (
        list(s.layers) if s.layers is not None else [i for i in range(loaded.n_layers) if loaded.mode(i) == "cross"]
    )
    bad = [x for x in layers if not 0 <= x < loaded.n_layers]
    if bad:
        raise SpeechRoutesError(f"layer {bad[0]} does not exist: the model has {loaded.n_layers}", field="layers")
    fn = last_logit_diff(answer, wrong)
    kwargs = encoded_once(loaded, batch, layers)
    say("stage", "the metric's gradient at every head's output (one forward, one backward)")
    grads, m = output_gradients(loaded, batch, fn, {}, kwargs, set(layers))
    say("stage", f"streaming every route of layers {layers}")
    routes, _, _ = stream_routes(loaded, batch, grads, s.top, kwargs, record_blocks=False)
    meta = SimpleNamespace(top=s.top, settle=None, restart=None)
    run = RouteRun(loaded, batch, fn, {}, kwargs, m)
    exact = _verify(run, routes, s.verify, ({}, None), meta, say)  # no restart: full reruns
    for r, e in zip(routes, exact):
        r["exact"] = e
    tokens = tokens_of(loaded.tokenizer, ids[0])
    _label(loaded, routes, tokens)
    said = loaded.tokenizer.decode
    name = f"log p({said([answer])!r})" if wrong is None else f"logit({said([answer])!r}) − logit({said([wrong])!r})"
    result = SpeechRoutesResult(
        loaded.name, heard.describe(), transcript, prefix, name, float(m.mean()), tokens, layers, routes, meta.settle
    )
    result.arithmetic = arithmetic_of(loaded)
    return result


__all__ = ["SpeechRoutesError", "SpeechRoutesResult", "speech_routes"]
