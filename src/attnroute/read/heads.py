"""attnroute.read_heads(model, text) -> HeadTable: where every head routes, its role, and its effect.

Three passes, each through attnroute's engine inside `routed(...)`:

1. the text (textpass.py), fused or blocked backend with probes: entropy, max weight, argmax offsets, sink, punctuation,
   local-band and norm-weighted sink mass per row, averaged over rows that see ≥ 2 keys
   (memory linear in length: no [T, T] matrix is kept);
2. repeated random tokens (stimuli.py), one batch per probe seed: previous-token, duplicate and
   induction scores, and the loss on the first versus the second repeat;
3. (unless ablation=False) the effect batch: the one-backward gradient estimate for every head, then
   exact ablation (zero; mean and uniform when asked) of the heads it ranks highest (effects.py).

Before all of it (unless verify=False) the routed model is checked against its own eager attention.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..audio import Audio, audio
from ..engine import InputError
from ..engine.fused_probes import FusedRowStats
from ..engine.probes import PerLayer
from ..engine.repeats import DEFAULT_LEN, Repeated, diagonal_scores, repeat_probe, repeated_random_tokens
from ..models import LoadedModel
from ..progress import eta, reporter
from ..settings import HeadsSettings, verb
from . import effects, roles
from .adapter import routed
from .alignment import alignment, cross_columns
from .ground.ablation import exact_rule, metric_effect_columns
from .ground.budget import Bound
from .ground.budget import said as memory_said
from .ground.metrics import token_loss
from .ground.speech import decoder_ids, features_of, prompt_length, speech_batch, transcribe
from .headtable import COLUMNS, HeadTable, TextMeta
from .stimuli import encode_text, tokens_of
from .study import Study
from .textpass import (
    _fused_refusal,
    body,
    text_statistics,
)
from .verify import model_inputs, routing_check

DEFAULT_TEXT = (
    "The quick brown fox jumps over the lazy dog. Alice gave Bob the book, and Bob gave the book back "
    "to Alice. Mary and John went to the store; John bought milk, and Mary bought bread. "
    "The quick brown fox jumps over the lazy dog again, because the dog was still lazy."
)


class ReadError(InputError):
    """Bad input to read_heads(): one line, names the field, says what to do."""


@dataclass
class Reuse:
    """What a read of another text by the same model already measured, kept by a long-lived caller (the
    explorer): the routing check and the repeated-token block depend on the model only, not on the text."""

    routing_check: dict
    stimulus: tuple  # (per-seed scores, the first seed's Repeated, its induction loss or None)
    seeds: tuple


@verb(HeadsSettings)
def read_heads(
    model=None,
    inputs: str | None = None,
    *,
    settings: HeadsSettings | None = None,
    progress=None,
    reuse: Reuse | None = None,
    **fields,
):
    """Read a model's routing on a text -> HeadTable. ``model``: a LoadedModel, or 'smollm2' / 'minilm' /
    a path; ``inputs``: the text (None: the built-in paragraph). The other fields are HeadsSettings'
    (or pass ``settings``): ``verify`` first compares the routed model with its own eager attention
    (verify.routing_check) and stops with RoutingMismatch if they differ; ``exact`` is how many heads
    get an exact ablation (the top of the one-backward gradient estimate by magnitude), or "all";
    ``modes`` the ablations run exactly. ``progress`` receives progress.Event objects. ``reuse`` (the same
    model's Reuse, from ``reusable``) skips the routing check and the repeated tokens: they do not
    depend on the text."""
    s = HeadsSettings.of(settings, model, fields, text=inputs)
    st = Study(s, progress)
    pairs = s.read_pairs() if s.ablation and s.own_metric else ()  # your prompts, read before the weights load
    clip = audio(s.audio) if s.audio is not None else None  # likewise the audio
    if isinstance(s.model, str | os.PathLike) and (facts := st.facts()) is not None:  # before the weights load
        _hears(facts.audio, clip, os.fspath(s.model))
    loaded = st.load()
    with Bound(
        s.max_memory, st.say, loaded.model
    ) as bound:  # max_memory: the batches scaled to the cap (ground/budget.py)
        table = _read(loaded, s, st.say, progress, reuse, pairs, clip)
    table.meta.memory = bound.report() or None
    if over := memory_said(table.meta.memory):
        st.say("warn", over)
    return table


def _read(loaded, s: HeadsSettings, say, progress, reuse, pairs, clip) -> HeadTable:
    """The three passes over the text (statistics, repeated tokens, effects) -> the table."""
    ids, cut, limit, speech = _inputs(loaded, s, clip, say)
    meta = _text_meta(loaded, ids, cut, limit, speech)
    meta["routing_check"] = _verified(loaded, s, reuse, meta, say)
    if cut:
        say("warn", f"the text has {ids.shape[1] + cut} tokens; kept the first {ids.shape[1]} (cut {cut})")
    features = speech.features if speech is not None else None
    with _timed(meta, "text"):
        say("stage", "text statistics")
        cols, offsets, meta["column_paths"] = text_statistics(
            loaded, ids, progress, max_weight=s.max_weight, features=features
        )
    if speech is not None:
        with _timed(meta, "alignment"):
            say("stage", "cross-attention alignment with the audio")
            meta["alignment"] = alignment(loaded, speech_batch(features, ids), speech.clip)
            cols.update(cross_columns(loaded, meta["alignment"]))
    with _timed(meta, "repeated"):
        per_seed = _stimulus(loaded, s, reuse, cols, meta, say, features)
    L, H = loaded.n_layers, loaded.n_heads
    for c in COLUMNS:
        cols.setdefault(c, np.full((L, H), np.nan))
    head_roles, cols["role_stability"] = label_heads(cols, per_seed)
    if s.ablation:
        with _timed(meta, "effects"):  # your metric on your prompts, or the model's own loss or embedding
            own = s.own_metric
            meta.update(
                metric_effect_columns(loaded, cols, s, pairs, say)
                if own
                else effect_columns(loaded, cols, ids, s, say, features)
            )
    meta["role_thresholds"] = roles.THRESHOLDS
    return HeadTable(
        loaded.name, L, H, cols, head_roles, offsets, TextMeta.from_dict(meta), attention=list(loaded.attention_kinds)
    )


def _text_meta(loaded, ids: torch.Tensor, cut: int, limit, speech) -> dict:
    """The read's description of what it read: the kind, the tokens (and what was cut), the clip."""
    meta = {
        "kind": loaded.kind,
        "text_tokens": int(ids.shape[1]),
        "tokens": tokens_of(loaded.tokenizer, ids[0]),
        "tokens_cut": cut,
        "max_tokens": limit,
        "timings_s": {},
    }
    if speech is not None:
        meta["audio"] = speech.describe()
    return meta


@dataclass
class Speech:
    """A speech model's read: the clip, its features and how the decoder's text was had."""

    clip: Audio
    features: torch.Tensor  # [1, n_mels, 3000]
    transcript: str
    how: str  # "given (teacher-forced)" or "transcribed (greedy decoding)"

    def describe(self) -> dict:
        return {
            "clip": self.clip.describe(),
            "seconds": round(self.clip.seconds, 3),
            "transcript": self.transcript,
            "transcript_source": self.how,
        }


def _hears(audio: bool | None, clip: Audio | None, name: str) -> None:
    """Refuses a speech model without a clip and a text model with one (``audio`` None: not known yet)."""
    if audio is None or audio == (clip is not None):
        return
    raise ReadError(
        f"{name} reads audio: give `audio` (a .wav file or a bundled clip such as paris)"
        if audio
        else f"{name} reads text; `audio` is for a speech model (whisper-tiny)",
        field="audio",
    )


def _inputs(loaded, s: HeadsSettings, clip: Audio | None, say):
    """(decoder or text ids [1, T], tokens cut, the token limit, Speech or None): a speech model's transcript
    (given, or transcribed) behind Whisper's prompt; a text model's text, cut to its positions."""
    _hears(loaded.audio, clip, loaded.name)
    if clip is None:
        limit = loaded.fit(s.max_tokens, "max_tokens", "max_tokens") if s.max_tokens else loaded.max_positions or None
        ids, cut = encode_text(loaded.tokenizer, DEFAULT_TEXT if s.text is None else s.text, limit)
        return ids, cut, limit, None
    features = features_of(loaded, clip)
    if s.text is not None:
        ids, how = decoder_ids(loaded, s.text), "given (teacher-forced)"
    else:
        say("stage", "transcribing the audio (greedy decoding)")
        ids, how = transcribe(loaded, features)[0], "transcribed (greedy decoding)"
    P = prompt_length(loaded, ids)
    text = loaded.tokenizer.decode(ids[0, P:-1]).strip()
    return ids, 0, loaded.max_positions, Speech(clip, features, text, how)


@contextlib.contextmanager
def _timed(meta: dict, name: str):
    t0 = time.perf_counter()
    yield
    meta["timings_s"][name] = time.perf_counter() - t0


def _verified(loaded, s: HeadsSettings, reuse: Reuse | None, meta: dict, say) -> dict | None:
    """The routing check (None when skipped): reused, or measured now."""
    if reuse is not None:
        return reuse.routing_check
    if not s.verify:
        return None
    with _timed(meta, "routing_check"):
        say("stage", "verifying routed attention against the model's own eager attention")
        return routing_check(loaded)


def _stimulus(loaded, s: HeadsSettings, reuse: Reuse | None, cols: dict, meta: dict, say, features=None) -> list[dict]:
    """The repeated-random-token scores into ``cols`` (reused when the seeds match); per seed, for roles.
    A speech model's decoder reads the tokens while its encoder hears ``features``."""
    say("stage", f"repeated random tokens ({len(s.seeds)} seeds)")
    if reuse is not None and reuse.seeds == tuple(s.seeds):
        per_seed, stim, induction = reuse.stimulus
    else:
        per_seed, stim, induction = stimulus_scores(loaded, s.seeds, s.stimulus_batch, features)
    if stim.S < DEFAULT_LEN:
        say(
            "warn",
            f"the repeated-token stimulus uses {stim.S} tokens per repeat "
            f"(the model has {loaded.max_positions} positions)",
        )
    cols.update(mean_scores(per_seed))
    meta["stimulus"] = stim.describe() + f"; scores averaged over seeds {list(s.seeds)}"
    if induction is not None:
        meta["induction_loss"] = induction
    return per_seed


def reusable(loaded: LoadedModel, settings: HeadsSettings, progress=None) -> Reuse:
    """The model's routing check and repeated-token block, measured once for many reads (read_heads'
    ``reuse``): neither depends on the text."""
    say = reporter(progress)
    say("stage", "verifying routed attention against the model's own eager attention")
    check = routing_check(loaded)
    say("stage", f"repeated random tokens ({len(settings.seeds)} seeds)")
    per_seed, stim, induction = stimulus_scores(loaded, settings.seeds, settings.stimulus_batch)
    return Reuse(check, (per_seed, stim, induction), tuple(settings.seeds))


STIMULUS_SCORES = ("prev_token", "duplicate", "induction")


def stimulus_scores(loaded: LoadedModel, seeds, batch: int, features=None) -> tuple[list[dict], Repeated, dict | None]:
    """The repeated-token scores per probe seed, the first seed's stimulus (its description) and, for a causal LM,
    its induction loss, read from the logits of the first seed's own forward (a second forward of the model on
    the same tokens was a fifth of a SmolLM2 read): the one repeated-stimulus block of a text read and a corpus
    read. A speech model's decoder reads <|startoftranscript|> r r (its encoder hears ``features``)."""
    S = stimulus_length(loaded)

    def stimulus(seed):
        causal = loaded.causal or loaded.audio
        stim = repeated_random_tokens(loaded.tokenizer, S=S, batch=batch, seed=seed, causal=causal)
        if loaded.audio:
            stim.input_ids[:, 0] = int(loaded.model.config.decoder_start_token_id)
        return stim

    first, kept = stimulus(seeds[0]), [] if loaded.causal else None
    heard: dict = {}  # a speech model's clip, encoded by the first seed's forward and heard by every seed's
    per_seed = [repeated_scores(loaded, first, features=features, logits=kept, heard=heard)]
    induction = induction_loss(first, kept.pop()) if loaded.causal else None  # its logits freed here
    per_seed += [repeated_scores(loaded, stimulus(s), features=features, heard=heard) for s in seeds[1:]]
    return per_seed, first, induction


def stimulus_length(loaded: LoadedModel, S: int = DEFAULT_LEN) -> int:
    """Random tokens per repeat: ``S``, or fewer so that BOS/[CLS] + 2·S (+ [SEP]) fit the model's positions."""
    limit = loaded.max_positions
    if not limit:
        return S
    extra = (loaded.tokenizer.bos_token_id if loaded.causal else loaded.tokenizer.cls_token_id) is not None
    extra += (not loaded.causal) and loaded.tokenizer.sep_token_id is not None
    fitted = min(S, (limit - int(extra)) // 2)
    if fitted < 4:
        raise InputError(f"the model has {limit} positions: too few for a repeated-token stimulus", field="model")
    return fitted


def mean_scores(per_seed: list[dict]) -> dict:
    """prev_token, duplicate, induction [L, H]: the mean over probe seeds."""
    return {name: np.mean([p[name] for p in per_seed], axis=0) for name in STIMULUS_SCORES}


@torch.no_grad()
def repeated_scores(
    loaded: LoadedModel, stim: Repeated, impl: str | None = None, features=None, logits=None, heard=None
) -> dict:
    """prev_token, duplicate, induction [L, H] on one repeated-random-token batch. Fused backend (three
    named weights per row) unless the model needs the weights (``impl="eager"`` asks for them: the
    benchmark compares both paths). ``logits``: a list that receives the model's logits on the batch (the
    whole model runs, its output head included; else its body alone). ``heard``: a dict that keeps a speech
    model's encoding of ``features`` between calls on the same clip (the first call fills it)."""
    if impl not in (None, "fused", "eager"):
        raise InputError(f"impl: expected 'fused' or 'eager', got {impl!r}", field="impl")
    fused = _fused_refusal(loaded) is None and impl != "eager"
    if impl == "fused" and not fused:
        raise InputError(f"impl: the fused path cannot read this model: {_fused_refusal(loaded)}", field="impl")
    S = stim.S
    diag = PerLayer(lambda: FusedRowStats(diagonals=(1, S, S - 1), entropy=False)) if fused else repeat_probe(S)
    batch = {"input_ids": stim.input_ids, "attention_mask": stim.attention_mask}
    if loaded.seq2seq and not loaded.audio:  # the decoder reads the stimulus too: its diagonals mean the encoder's
        batch.update(decoder_input_ids=stim.input_ids, decoder_attention_mask=stim.attention_mask)
    with routed(loaded, probes=[diag], impl="fused" if fused else "eager"):  # three named weights per row
        out = (body(loaded) if logits is None else loaded.model)(
            **(_speech_stimulus(loaded, features, stim, heard) if loaded.audio else batch)
        )
    if logits is not None:
        logits.append(out.logits)
    # a query and a key of two streams (cross), or audio frames (a speech encoder): no "previous token" (NaN)
    kinds = loaded.attention_kinds or ["self"] * loaded.n_layers
    read = [layer for layer, kind in enumerate(kinds) if not (kind == "cross" or (loaded.audio and kind == "self"))]
    return diagonal_scores(diag, stim, loaded.n_layers, loaded.n_heads, layers=read)


def _speech_stimulus(loaded: LoadedModel, features, stim: Repeated, heard: dict | None = None) -> dict:
    """A speech model's inputs for a token stimulus: the decoder reads the rows, the encoder hears the clip (or
    silence) once for them all, not once a row (its frames are not tokens: its layers' scores are not read).
    Run inside the stimulus's routed context, so the encoder runs on the engine it ran on before. ``heard``
    keeps that encoding for the next seed's stimulus: the same clip on the same engine (a 1,500-frame encoder,
    1.3 s on one core, ran once a seed)."""
    ids = stim.input_ids
    heard = {} if heard is None else heard
    if "clip" not in heard:
        heard["clip"] = loaded.model.get_encoder()(input_features=_audio_features(loaded, features)).last_hidden_state
    enc = heard["clip"]  # [1, F, d]
    enc = enc.expand(ids.shape[0], -1, -1) if enc.shape[0] == 1 else enc
    return {"encoder_outputs": (enc,), "decoder_input_ids": ids, "decoder_attention_mask": torch.ones_like(ids)}


def _audio_features(loaded: LoadedModel, features):
    """The features a speech model's encoder hears during a token stimulus: the clip's, or silence."""
    if features is not None:
        return features
    return torch.full((1, int(loaded.model.config.num_mel_bins), 3000), -1.5)  # WhisperFeatureExtractor's silence


@torch.no_grad()
def induction_loss(stim: Repeated, logits: torch.Tensor) -> dict:
    """Mean next-token loss predicting the first repeat's tokens versus the second's (bf16 logits widened by
    token_loss a block at a time, not whole), from the model's ``logits`` on ``stim`` (stimulus_scores: the
    stimulus forward's own)."""
    ce = token_loss(logits[:, :-1], stim.input_ids[:, 1:])
    S, P = stim.S, stim.prefix
    # target position t is predicted by row t−1
    first = ce[:, P : P + S - 1]  # targets P+1 … P+S−1 (token P is unpredictable)
    second = ce[:, P + S - 1 : P + 2 * S - 1]  # targets P+S … P+2S−1
    return {"first_repeat": float(first.mean()), "second_repeat": float(second.mean()), "S": S}


def label_heads(cols: dict, per_seed: list[dict]):
    """Every head's role, and the share of probe seeds whose own scores give it the same role."""
    names = roles.label_grid(cols)
    per_seed_names = [roles.label_grid(cols, seed_scores) for seed_scores in per_seed]
    agree = [
        [[p[layer][h] == names[layer][h] for p in per_seed_names] for h in range(len(names[0]))]
        for layer in range(len(names))
    ]
    return names, np.array(agree, dtype=float).mean(-1)


# ------------------------------------------------------------------------------------ pass 3: effects


def effect_columns(loaded, cols, ids, s: HeadsSettings, say, features=None) -> dict:
    """grad_attr for every head (one backward), then exact ablation for the ``s.exact`` heads the estimate
    ranks highest by magnitude (or all): the columns of the modes not run stay NaN."""
    batch, described = _effect_batch(loaded, ids, s, features)
    say("stage", "gradient estimate (one forward, one backward)")
    cols["grad_attr"] = effects.gradient_estimate(loaded, batch)
    L, H = cols["grad_attr"].shape
    deltas, info = _sweep(loaded, batch, cols["grad_attr"], s, say)
    cols["ablation_delta"] = deltas.get("zero", cols["ablation_delta"])
    cols["ablation_mean"] = deltas.get("mean", cols["ablation_mean"])
    cols["ablation_uniform"] = deltas.get("uniform", cols["ablation_uniform"])
    n = int(info.get("heads_measured", 0))
    first = next(iter(deltas.values())) if deltas else np.full((L, H), np.nan)
    pairs = [(int(i // H), int(i % H)) for i in np.flatnonzero(~np.isnan(first.ravel()))]
    agree = effects.rank_agreement(cols["grad_attr"], first, k=min(10, max(1, n)))
    statement = _measured(n, L * H, s.exact)
    return {
        "effect_batch": described,
        "grad_vs_ablation": agree,
        "ablation": {"statement": statement, "modes": list(s.modes), "exact_heads": pairs, **info},
    }


def _effect_batch(loaded, ids, s: HeadsSettings, features) -> tuple[dict, str]:
    """What an ablation's effect is measured on, and how it is said: repeated random tokens' loss (a causal
    LM), the clip's transcript loss (speech), the text's decoder loss (seq2seq), the pooled embedding (encoder)."""
    if loaded.audio:
        return speech_batch(features, ids), (
            "the clip; effect = Δ the decoder's loss on the transcript (teacher-forced, prompt excluded)"
        )
    if loaded.causal:
        S = stimulus_length(loaded, s.effect_len)
        stim = repeated_random_tokens(loaded.tokenizer, S=S, batch=s.effect_batch, seed=s.seeds[0], causal=True)
        batch = {"input_ids": stim.input_ids, "attention_mask": stim.attention_mask}
        return batch, stim.describe() + "; effect = Δ mean next-token loss"
    if loaded.seq2seq:
        batch = model_inputs(loaded, ids, torch.ones_like(ids))
        return batch, "the text; effect = Δ the decoder's loss on the text (decoder ids: the text shifted right)"
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    return batch, "the text; effect = 1 − cosine of the mean-pooled sentence embedding"


def _sweep(loaded, batch: dict, grad_attr: np.ndarray, s: HeadsSettings, say) -> tuple[dict, dict]:
    """The exact ablations asked: every head, none, or the estimate's top settled (10 more at a time)."""
    L, H = grad_attr.shape
    exact, modes, started = s.exact, s.modes, time.perf_counter()

    def progress(mode, layer, done, total):
        left = eta(started, time.perf_counter(), done, total)
        say("ablate", f"{mode}, layer {layer}", done=done, total=total, eta=left)

    if exact == "all" or exact >= L * H:
        say("stage", f"exact {'/'.join(modes)} ablation of all {L * H} heads")
        info: dict = {}
        return effects.exact_sweep(loaded, batch, modes=modes, info=info, progress=progress), info
    if exact == 0:
        return {}, {"heads_measured": 0}
    say("stage", f"exact {'/'.join(modes)} ablation: the top {exact} of the estimate, then 10 more at a time")
    return effects.settled_sweep(  # settle the exact top min(10, N): --exact 2 stays cheap
        loaded, batch, np.abs(grad_attr), modes=modes, rule=exact_rule(exact), progress=progress
    )


def _measured(n: int, heads: int, exact) -> str:
    """How many heads were ablated exactly, as the read says it."""
    if n == heads:
        return f"exact for all {heads} heads"
    if n == 0:
        return f"estimated for all {heads} heads (no exact ablation asked)"
    return (
        f"exact for {n} heads (by |gradient estimate|: the top {exact}, then 10 more at a time until a round "
        f"changed nothing in the exact top {min(10, exact)}), estimated for {heads - n}"
    )


__all__ = [
    "DEFAULT_TEXT",
    "ReadError",
    "Reuse",
    "diagonal_scores",
    "induction_loss",
    "mean_scores",
    "read_heads",
    "repeat_probe",
    "repeated_scores",
    "reusable",
    "stimulus_scores",
]
