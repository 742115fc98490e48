"""The settings of the experiments that intervene on routes: knockout, swap, needle."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..promptset import METRICS, MetricArg, metric_setting
from .base import SEED_MAX, ModelArg, Settings, integer, integers, nonempty_text, opt, position_spec, set_field
from .read import DEFAULT_MODEL, DEVICE_DOC, DEVICE_MAP_DOC, DTYPE_DOC, MODEL_DOC, PROCESSOR_DOC, TOKENIZER_DOC


def last_position_metric(metric) -> None:
    """knockout and swap read the last position: loss (the whole prompt) and cosine (encoders) are refused."""
    if metric is None or metric_setting(metric) is None:
        return
    if not METRICS[metric].last_only or METRICS[metric].reads != "logits":
        raise InputError(
            f"metric {metric} does not read the last position; use logit-diff, prob, logprob or kl", field="metric"
        )


def heads_list(heads) -> tuple[int, ...] | None:
    return None if heads is None else integers(heads, "heads", 0)


@dataclass(frozen=True)
class KnockoutSettings(Settings):
    """Cut the route source → target (query → key edges) in every window of ``window`` layers."""

    model: ModelArg = opt(DEFAULT_MODEL, MODEL_DOC)
    tokenizer: object = opt(None, TOKENIZER_DOC)
    processor: object = opt(None, PROCESSOR_DOC)
    dtype: str = opt("auto", DTYPE_DOC)
    device: str | None = opt(None, DEVICE_DOC)
    device_map: object = opt(None, DEVICE_MAP_DOC)
    text: str = opt("", "the prompt")
    source: str = opt("", "query positions: a word of the text, or indices '3,4'")
    target: str = opt("", "key positions, likewise")
    window: int = opt(5, "layers per window, slid over the depth")
    heads: tuple[int, ...] | None = opt(None, "only these heads (unset: every head)")
    target_token: str | None = opt(None, "the token whose probability is read (unset: the model's own top prediction)")
    seed: int = opt(0, "the control route's draw")
    metric: MetricArg | None = opt(
        None, "also your metric at the last position: logit-diff, prob, logprob, kl, or a callable"
    )
    answer: str | None = opt(None, "the metric's answer token (e.g. ' Mary')")
    wrong: str | None = opt(None, "the metric's wrong token")

    def __post_init__(self):
        nonempty_text(self.text, "text", optional=False)
        for name in ("source", "target"):
            set_field(self, name, position_spec(getattr(self, name), name))
        integer(self.window, "window", 1)
        integer(self.seed, "seed", 0, SEED_MAX)
        set_field(self, "heads", heads_list(self.heads))
        last_position_metric(self.metric)


@dataclass(frozen=True)
class SwapSettings(Settings):
    """Run prompt B with prompt A's attention maps in every window of ``window`` layers."""

    model: ModelArg = opt(DEFAULT_MODEL, MODEL_DOC)
    tokenizer: object = opt(None, TOKENIZER_DOC)
    processor: object = opt(None, PROCESSOR_DOC)
    dtype: str = opt("auto", DTYPE_DOC)
    device: str | None = opt(None, DEVICE_DOC)
    device_map: object = opt(None, DEVICE_MAP_DOC)
    prompt_a: str = opt("", "the prompt whose maps are used")
    prompt_b: str = opt("", "the prompt that runs (the same number of tokens)")
    window: int = opt(1, "layers swapped together")
    heads: tuple[int, ...] | None = opt(None, "only these heads (unset: every head)")
    metric: MetricArg | None = opt(None, "also your metric on B's output: logit-diff, prob, logprob, kl, or a callable")
    answer: str | None = opt(None, "the metric's answer token")
    wrong: str | None = opt(None, "the metric's wrong token")

    def __post_init__(self):
        nonempty_text(self.prompt_a, "prompt_a", optional=False)
        nonempty_text(self.prompt_b, "prompt_b", optional=False)
        integer(self.window, "window", 1)
        set_field(self, "heads", heads_list(self.heads))
        last_position_metric(self.metric)


SPEECH_MODEL = "whisper-tiny"
SPEECH_MODEL_DOC = "a speech model: whisper-tiny, or a Whisper directory / CTranslate2 folder"


@dataclass(frozen=True)
class CrossKnockoutSettings(Settings):
    """Cut a decoder word's routes to a span of audio frames in every window of cross-attention layers."""

    model: ModelArg = opt(SPEECH_MODEL, SPEECH_MODEL_DOC)
    tokenizer: object = opt(None, TOKENIZER_DOC)
    processor: object = opt(None, PROCESSOR_DOC)
    dtype: str = opt("auto", DTYPE_DOC)
    device: str | None = opt(None, DEVICE_DOC)
    device_map: object = opt(None, DEVICE_MAP_DOC)
    audio: str = opt("", "the clip: a .wav file or a bundled clip (paris, fox …)")
    text: str | None = opt(None, "its transcript, teacher-forced (unset: transcribed by greedy decoding)")
    source: str = opt("", "the decoder word whose routes are cut (a word of the transcript)")
    target: str = opt("word", "the frames: 'word' (the source's own), another word, or seconds 'a-b'")
    window: int = opt(1, "cross-attention layers per window, slid over the depth")
    heads: tuple[int, ...] | None = opt(None, "only these heads (unset: every head)")
    seed: int = opt(0, "the control span's draw")

    def __post_init__(self):
        nonempty_text(self.audio, "audio", optional=False)
        nonempty_text(self.text, "text")
        nonempty_text(self.source, "source", optional=False)
        nonempty_text(self.target, "target", optional=False)
        integer(self.window, "window", 1)
        integer(self.seed, "seed", 0, SEED_MAX)
        set_field(self, "heads", heads_list(self.heads))


@dataclass(frozen=True)
class CrossSwapSettings(Settings):
    """Transcribe clip B with clip A's cross-attention maps, window by window of cross layers."""

    model: ModelArg = opt(SPEECH_MODEL, SPEECH_MODEL_DOC)
    tokenizer: object = opt(None, TOKENIZER_DOC)
    processor: object = opt(None, PROCESSOR_DOC)
    dtype: str = opt("auto", DTYPE_DOC)
    device: str | None = opt(None, DEVICE_DOC)
    device_map: object = opt(None, DEVICE_MAP_DOC)
    audio_a: str = opt("", "the clip whose maps are used")
    audio_b: str = opt("", "the clip that is transcribed")
    window: int = opt(1, "cross-attention layers swapped together")
    heads: tuple[int, ...] | None = opt(None, "only these heads (unset: every head)")

    def __post_init__(self):
        nonempty_text(self.audio_a, "audio_a", optional=False)
        nonempty_text(self.audio_b, "audio_b", optional=False)
        integer(self.window, "window", 1)
        set_field(self, "heads", heads_list(self.heads))


@dataclass(frozen=True)
class SpeechPatchSettings(Settings):
    """Patch every head's output from a clean clip into a corrupted one (one word spoken differently)."""

    model: ModelArg = opt(SPEECH_MODEL, SPEECH_MODEL_DOC)
    tokenizer: object = opt(None, TOKENIZER_DOC)
    processor: object = opt(None, PROCESSOR_DOC)
    dtype: str = opt("auto", DTYPE_DOC)
    device: str | None = opt(None, DEVICE_DOC)
    device_map: object = opt(None, DEVICE_MAP_DOC)
    clean: str = opt("", "the clean clip: a .wav file or a bundled clip (paris …)")
    corrupt: str = opt("", "the corrupted clip: the same words, one spoken differently (rome …)")
    text: str | None = opt(None, "the decoder text both runs read (unset: the words the transcripts share)")
    answer: str | None = opt(None, "the clean word (unset: where the transcripts first differ)")
    wrong: str | None = opt(None, "the corrupted word, likewise")

    def __post_init__(self):
        nonempty_text(self.clean, "clean", optional=False)
        nonempty_text(self.corrupt, "corrupt", optional=False)
        nonempty_text(self.text, "text")
        if self.text is not None and (self.answer is None or self.wrong is None):
            raise InputError("with `text`, give `answer` and `wrong` too (the words to compare after it)", field="text")


@dataclass(frozen=True)
class SpeechRoutesSettings(Settings):
    """Route attribution on a clip: every route of the chosen layers (default: cross-attention) estimated."""

    ARITHMETIC = "float32"  # bf16/fp16 weights read in float32 arithmetic (models/arithmetic.py, docs/precision.md)

    model: ModelArg = opt(SPEECH_MODEL, SPEECH_MODEL_DOC)
    tokenizer: object = opt(None, TOKENIZER_DOC)
    processor: object = opt(None, PROCESSOR_DOC)
    dtype: str = opt("auto", DTYPE_DOC)
    device: str | None = opt(None, DEVICE_DOC)
    device_map: object = opt(None, DEVICE_MAP_DOC)
    audio: str = opt("", "the clip: a .wav file or a bundled clip (paris, rome …)")
    answer: str = opt("", "the word whose logit is read (the decoder reads the transcript up to it)")
    wrong: str | None = opt(None, "the word it is compared with (unset: log p(answer))")
    text: str | None = opt(None, "the decoder text before the answer (unset: the transcript up to the answer)")
    top: int = opt(20, "routes kept")
    verify: int = opt(10, "of those, knocked out exactly")
    layers: tuple[int, ...] | None = opt(None, "only these layers (unset: the cross-attention layers)")

    def __post_init__(self):
        nonempty_text(self.audio, "audio", optional=False)
        nonempty_text(self.answer, "answer", optional=False)
        nonempty_text(self.wrong, "wrong")
        nonempty_text(self.text, "text")
        integer(self.top, "top", 1, 100_000)
        integer(self.verify, "verify", 0)
        if self.verify > self.top:
            raise InputError(f"verify ({self.verify}) cannot exceed top ({self.top})", field="verify")
        if self.layers is not None:
            set_field(self, "layers", integers(self.layers, "layers", 0))


@dataclass(frozen=True)
class NeedleSettings(Settings):
    """A needle at a seeded depth in growing distractor context; the retrieval heads followed."""

    model: ModelArg = opt(DEFAULT_MODEL, MODEL_DOC)
    tokenizer: object = opt(None, TOKENIZER_DOC)
    processor: object = opt(None, PROCESSOR_DOC)
    dtype: str = opt("auto", DTYPE_DOC)
    device: str | None = opt(None, DEVICE_DOC)
    device_map: object = opt(None, DEVICE_MAP_DOC)
    lengths: tuple[int, ...] = opt((256, 512, 1024, 2048, 4096, 8192), "context lengths in tokens")
    seed: int = opt(0, "the needle's depth")
    code: str = opt("4729", "the secret the needle states")
    top: int = opt(3, "retrieval heads: the heads with most weight on the needle at the shortest length")

    def __post_init__(self):
        set_field(self, "lengths", tuple(sorted(integers(self.lengths, "lengths", 32))))
        integer(self.seed, "seed", 0, SEED_MAX)
        integer(self.top, "top", 1)
        if not isinstance(self.code, str) or not self.code.strip():
            raise InputError("code is empty: give the secret the needle states", field="code")


__all__ = [
    "CrossKnockoutSettings",
    "CrossSwapSettings",
    "SpeechPatchSettings",
    "KnockoutSettings",
    "NeedleSettings",
    "SwapSettings",
]
