"""Activation patching between two clips on a speech model: a clean clip and a corrupted one (one word
spoken differently), the decoder's logits read where the word is predicted.

    r = speech_patch("whisper-tiny", "paris", "rome")     # denoising: each head's clean output into the corrupt run

Both runs decode the same tokens — the transcript up to the first word the two clips' transcripts
disagree on (or ``text``) — so every position means the same in both; the metric is the logit
difference answer − wrong at the last position (by default the first token of the clean clip's word
and of the corrupted clip's). Every head of every mode (encoder self, decoder self, cross) is patched
exactly, alone: its output in the corrupted run replaced by its output in the clean run, at every
position (an encoder head: every frame). Normalized as patch's denoising: (M_patched − M_corrupt) /
(M_clean − M_corrupt), 1 when a head alone restores the clean answer. Exact for every head — 72 on
Whisper tiny.en, so there is no estimate to settle; decoder and cross heads run on the corrupted
clip's cached encoder output (their patch cannot change the encoder), and an encoder head's copies replay the
encoder from the head's layer (the blocks before it answer with the corrupted run's outputs), once a restart
from the encoder's middle has reproduced the corrupted run (``shortcut``; else whole forwards, said).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...audio import audio
from ...engine.jsonable import Result
from ...settings import SpeechPatchSettings, verb
from ..adapter import routed
from ..effects import encoder_stack, restart_check, run_from
from ..ground.speech import ClipPairError, clip_pair, last_logit_diff, no_audio_encoder
from ..ground.stats import gap
from ..hooks import recorded
from ..patching.sites import Component, PatchCopies, Recorder
from ..study import Study, hears_audio

COPIES = 3  # patched copies per forward: an encoder head's copy holds 6 × 1,500² eager scores


SpeechPatchError = ClipPairError  # two clips that cannot be patched into each other as asked


@dataclass(repr=False)
class SpeechPatchResult(Result):
    """Each head's clean output patched into the corrupted clip's run.

    rows       per head: layer, mode, stream layer, head, delta (metric units), normalized (0 corrupt, 1 clean)
    by_mode    per mode: the largest normalized effect of one head and the sum over its heads
    """

    KIND = "speech-patch"

    model: str
    clips: dict  # clean, corrupt: described
    transcripts: dict  # clean, corrupt
    prefix: str  # the decoder text both runs read
    answer: str
    wrong: str
    clean: float  # the metric on the clean run
    corrupt: float
    rows: list[dict] = field(default_factory=list)
    shortcut: dict = field(default_factory=dict)  # the encoder restart's check (effects.restart_check)

    def payload(self) -> dict:
        rows = sorted(self.rows, key=lambda r: -abs(r["normalized"]))
        modes = {}
        for r in self.rows:
            m = modes.setdefault(r["mode"], {"best": None, "sum_normalized": 0.0})
            m["sum_normalized"] += r["normalized"]
            if m["best"] is None or abs(r["normalized"]) > abs(m["best"]["normalized"]):
                m["best"] = {k: r[k] for k in ("layer", "stream_layer", "head", "normalized")}
        lines = [
            f"logit({self.answer!r}) − logit({self.wrong!r}) after {self.prefix!r}: clean {self.clean:.3f}, "
            f"corrupt {self.corrupt:.3f}"
        ]
        lines += [
            f"{m}: strongest head {v['best']['stream_layer']}.{v['best']['head']} ({v['best']['normalized']:+.3f}); "
            f"its heads sum to {v['sum_normalized']:+.3f}"
            for m, v in modes.items()
        ]
        return {
            "experiment": "speech-patch",
            "verdict": {"lines": lines},
            "summary": {"clean": self.clean, "corrupt": self.corrupt, "heads": len(self.rows)},
            "model": self.model,
            "clips": self.clips,
            "transcripts": self.transcripts,
            "prefix": self.prefix,
            "answer": self.answer,
            "wrong": self.wrong,
            "metric": {"name": "logit-diff", "clean": self.clean, "corrupt": self.corrupt, "direction": "denoising"},
            "by_mode": modes,
            "shortcut": self.shortcut,
            "rows": rows,
        }

    @classmethod
    def from_dict(cls, data: dict) -> SpeechPatchResult:
        keys = ("model", "clips", "transcripts", "prefix", "answer", "wrong")
        rows = sorted(data["rows"], key=lambda r: (r["layer"], r["head"]))  # the order they were measured in
        m = data["metric"]
        return cls(*(data[k] for k in keys), m["clean"], m["corrupt"], rows, data.get("shortcut", {}))


def _record(loaded, batch: dict) -> tuple[list[Recorder], object, torch.Tensor, dict]:
    """Every head's output, the encoder's output, the logits and each encoder block's output (a restart's)."""
    recs = [Recorder(layer) for layer in range(loaded.n_layers)]
    # "auto" here and in the patched runs alike: recording and patching edit q/k/v and head outputs, never the
    # weights, so torch's fused kernel serves both (eager over 1,500 encoder frames was most of the time)
    stack = encoder_stack(loaded) or []
    with torch.no_grad(), recorded(stack) as blocks, routed(loaded, interventions=recs, impl="auto"):
        out = loaded.model(**batch)
    return recs, out.encoder_last_hidden_state, out.logits, blocks


@verb(SpeechPatchSettings)
def speech_patch(model=None, clean=None, corrupt=None, *, settings=None, progress=None, **fields) -> SpeechPatchResult:
    """Patch every head's clean output into the corrupted clip's run; see the module docstring."""
    s = SpeechPatchSettings.of(settings, model, fields, clean=clean, corrupt=corrupt)
    st = Study(s, progress, refuse=hears_audio(no_audio_encoder))
    say = st.say
    a, b = audio(s.clean), audio(s.corrupt)  # before the weights load
    loaded = st.load()
    pair = clip_pair(loaded, a, b, s.text, s.answer, s.wrong)
    (fa, fb), ids, metric = pair.features, pair.ids, last_logit_diff(pair.answer, pair.wrong)
    clean_recs, _, clean_logits, _ = _record(loaded, {"input_features": fa, "decoder_input_ids": ids})
    _, enc_b, corrupt_logits, stored = _record(loaded, corrupt := {"input_features": fb, "decoder_input_ids": ids})
    m_clean, m_corrupt = float(metric(clean_logits)), float(metric(corrupt_logits))
    if gap([m_clean], [m_corrupt], loaded.dtype) is None:
        raise SpeechPatchError("the metric is the same on both clips: nothing to restore", field="corrupt")
    result = SpeechPatchResult(
        loaded.name,
        {"clean": a.describe(), "corrupt": b.describe()},
        pair.transcripts,
        pair.prefix,
        loaded.tokenizer.decode([pair.answer]),
        loaded.tokenizer.decode([pair.wrong]),
        m_clean,
        m_corrupt,
    )
    result.shortcut, blocks = _shortcut(loaded, corrupt, stored, metric, corrupt_logits)
    runs = _Runs(fb, enc_b, ids, clean_recs, metric, m_clean, m_corrupt, stored, blocks)
    for layer in range(loaded.n_layers):
        say("layer", f"{loaded.mode(layer)} layer {loaded.stream_layer(layer)}", done=layer + 1, total=loaded.n_layers)
        result.rows += _patch_layer(loaded, layer, runs)
    return result


@dataclass(frozen=True)
class _Runs:
    """What every patch reads: the corrupted clip's features and encoder output, the decoder ids, the clean
    run's recorded heads, the metric and its value on both clips."""

    features: torch.Tensor
    encoder_out: torch.Tensor
    ids: torch.Tensor
    clean_recs: list
    metric: object
    m_clean: float
    m_corrupt: float
    stored: dict  # each encoder block's output on the corrupted clip
    blocks: list | None  # the encoder's blocks, where a restart reproduced the corrupted run; else None


def _shortcut(loaded, batch: dict, stored: dict, metric, logits) -> tuple[dict, list | None]:
    """The encoder restart's check on the corrupted run (effects.restart_check: from the encoder's middle, the
    metric as the whole forward's), and the encoder's blocks to restart in where it held (None: whole forwards)."""
    blocks = encoder_stack(loaded)
    if blocks is None:
        return {"used": False, "reason": "no encoder stack to restart in: whole forwards"}, None
    check = restart_check(loaded, stored, batch, lambda out: metric(out.logits), metric(logits), blocks, impl="auto")
    return check, blocks if check["used"] else None


def _patch_layer(loaded, layer: int, runs: _Runs) -> list[dict]:
    """Every head of ``layer`` patched with its clean output into the corrupted run, COPIES heads per forward."""
    rows = []
    enc = loaded.mode(layer) != "encoder"  # a decoder or cross layer: the corrupted encoder output is reused
    for h0 in range(0, loaded.n_heads, COPIES):
        heads = list(range(h0, min(loaded.n_heads, h0 + COPIES)))
        k = len(heads)
        batch = {"encoder_outputs": (runs.encoder_out.repeat(k, 1, 1),)} if enc else {}
        if not enc:
            batch["input_features"] = runs.features.repeat(k, *([1] * (runs.features.dim() - 1)))
        batch["decoder_input_ids"] = runs.ids.repeat(k, 1)
        patch = PatchCopies(layer, [Component(layer, "head", h, None) for h in heads], 1, runs.clean_recs[layer])
        patched = runs.metric(_patched(loaded, layer, runs, batch, patch, k).logits)
        gap = runs.m_clean - runs.m_corrupt
        for h, m in zip(heads, patched.tolist()):
            rows.append(
                {
                    "layer": layer,
                    "mode": loaded.mode(layer),
                    "stream_layer": loaded.stream_layer(layer),
                    "head": h,
                    "delta": m - runs.m_corrupt,
                    "normalized": (m - runs.m_corrupt) / gap,
                }
            )
    return rows


@torch.no_grad()
def _patched(loaded, layer: int, runs: _Runs, batch: dict, patch, k: int):
    """The model's outputs on ``k`` patched copies: an encoder layer's restarted at that layer where the check
    held (run_from: the blocks before it answer with the corrupted run's outputs), else the whole forward."""
    if runs.blocks is not None and loaded.mode(layer) == "encoder":
        start = loaded.stream_layer(layer)
        return run_from(
            loaded, start, runs.stored, batch, interventions=[patch], copies=k, blocks=runs.blocks, impl="auto"
        )
    with routed(loaded, interventions=[patch], impl="auto"):
        return loaded.model(**batch)


__all__ = ["SpeechPatchError", "SpeechPatchResult", "speech_patch"]
