"""The settings of reading a model: one text (HeadsSettings), a corpus (CorpusSettings), the report page."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError, InputTypeError
from ..promptset import MetricArg, metric_setting, pairs_of
from .base import (
    SEED_MAX,
    ModelArg,
    PromptsArg,
    Settings,
    checkpoint_fields,
    exact_count,
    integer,
    integers,
    memory_field,
    names,
    nonempty_text,
    opt,
    path_arg,
    set_field,
)

DEFAULT_MODEL = "smollm2"
MODEL_DOC = (
    "a name (smollm2, minilm, gemma3-270m, whisper-tiny), a model directory, a .gguf file, a hub id org/name, "
    "a LoadedModel, or a transformers model object (with tokenizer=)"
)
SKIP_BAD_DOC = "skip (and list, with the reason) prompt rows this model cannot run, instead of refusing the file"
CHECKPOINT_DOC = "the per-prompt arrays, saved after every round; rerun to resume (unset: to attnroute's cache)"
MAX_MEMORY_DOC = (
    "cap this process's memory (4G, 3.5GiB, 2500M): the batches shrink to fit, a cap that cannot be met is "
    "refused before any work, and the peak is said beside the cap (unset: the default batches)"
)
NO_CHECKPOINT_DOC = "keep no checkpoint (by default a run checkpoints to attnroute's cache and a rerun resumes)"
DTYPE_DOC = (
    "auto (a model you hold: its own; a name or path: the dtype its checkpoint stores, float32 for the bundled "
    "models), float32, bfloat16 or float16"
)
DEVICE_DOC = (
    "where a name or path is loaded: cpu, cuda, cuda:N, mps or auto (unset: cpu; a model you hold stays where it is)"
)
DEVICE_MAP_DOC = "accelerate's device map for a name or path: auto, balanced, a {module: device} dict or a .json file"
TOKENIZER_DOC = (
    "with a transformers model object: its tokenizer (or a Whisper processor); unset: the one saved where the "
    "model was loaded from"
)
PROCESSOR_DOC = "with a speech model object: its processor (Whisper's), the same as tokenizer=; give one of them"
DEFAULT_EXACT = 20  # heads ablated exactly by default: the top of the one-backward estimate
# the settle rule (read/ground/settle.py): exact measurement of the estimate's first SETTLE_FIRST components,
# then SETTLE_STEP more at a time until the exact top SETTLE_TOP stops changing
SETTLE_FIRST, SETTLE_STEP, SETTLE_TOP = 20, 10, 10
ABLATION_MODES = ("zero", "mean", "uniform")
MAX_GENERATE = 512
PAGE_TOKENS = 256  # the report page's length when max_tokens is unset (or the model's positions, if fewer)
# the results `report --add` draws, by the command that writes them (show/sections.VERBS draws each; a test holds
# the two equal, so --help and the refusal never list fewer or more kinds than are read)
ADD_KINDS = ("knockout", "swap", "needle", "patch", "routes", "circuit", "why")
DEFAULT_SEEDS = (0, 1, 2)  # probe seeds of the repeated-token stimulus: one --seed and the next two


def probe_seeds(seed: int) -> tuple[int, int, int]:
    """The three probe seeds of one ``--seed``: seed, seed + 1, seed + 2 (each in numpy's range)."""
    integer(seed, "seed", 0, SEED_MAX - 2)
    return tuple(seed + s for s in DEFAULT_SEEDS)


@dataclass(frozen=True)
class HeadsSettings(Settings):
    """One text read: statistics (pass 1), repeated tokens (pass 2), effects (pass 3)."""

    model: ModelArg = opt(DEFAULT_MODEL, MODEL_DOC)
    tokenizer: object = opt(None, TOKENIZER_DOC)
    processor: object = opt(None, PROCESSOR_DOC)
    dtype: str = opt("auto", DTYPE_DOC)
    device: str | None = opt(None, DEVICE_DOC)
    device_map: object = opt(None, DEVICE_MAP_DOC)
    text: str | None = opt(None, "the text to read (unset: the built-in paragraph)")
    max_tokens: int | None = opt(None, "cut the text to this many tokens (unset: the model's context)")
    audio: str | None = opt(
        None,
        "a speech model's input: a .wav file or a bundled clip (paris, fox …); `text` is its transcript "
        "(unset: transcribed by greedy decoding)",
    )
    seeds: tuple[int, ...] = opt(DEFAULT_SEEDS, "probe seeds of the repeated-random-token stimulus")
    ablation: bool = opt(True, "measure each head's effect: the one-backward estimate, then exact ablation")
    effect_batch: int = opt(8, "sequences of repeated tokens the built-in effect is measured on")
    effect_len: int = opt(40, "random tokens per repeat in that batch")
    modes: tuple[str, ...] = opt(("zero",), "exact ablation modes: zero, mean, uniform")
    stimulus_batch: int = opt(8, "sequences per probe seed of the repeated-token stimulus")
    max_weight: bool = opt(False, "also the row maximum and argmax offsets (a blocked pass over the weights)")
    exact: int | str = opt(DEFAULT_EXACT, "heads ablated exactly: the top N of the estimate, settled; or 'all'")
    verify: bool = opt(True, "compare the routed model with its own eager attention before reading")
    metric: MetricArg = opt(
        "loss", "the effect: Δ loss on repeated tokens, or Δ your metric (a name or metric(logits, batch)) on prompts"
    )
    prompts: PromptsArg | None = opt(
        None, "your prompts (a .jsonl path or pairs) the metric is measured on, their clean side"
    )
    answer: str | None = opt(None, "the metric's answer token, for rows (or a text) that name none")
    wrong: str | None = opt(None, "the metric's wrong token, likewise")
    max_memory: int | str | None = opt(None, MAX_MEMORY_DOC)

    PRESETS = {
        "default": {},
        # the routing report's read, sized for a one-minute page on 2 cores: 2 probe seeds of 4
        # sequences, zero ablation of every head on one sequence of 16 tokens repeated
        "report": {"seeds": (0, 1), "effect_batch": 1, "effect_len": 16, "exact": "all", "stimulus_batch": 4},
        "full": {"exact": "all", "modes": ABLATION_MODES},
    }

    def __post_init__(self):
        nonempty_text(self.text, "text")
        memory_field(self)
        integer(self.max_tokens, "max_tokens", 2, optional=True)
        set_field(self, "seeds", integers(self.seeds, "seeds", 0, SEED_MAX))
        integer(self.effect_batch, "effect_batch", 1)
        integer(self.effect_len, "effect_len", 2)
        integer(self.stimulus_batch, "stimulus_batch", 1)
        set_field(self, "modes", names(self.modes, "modes", ABLATION_MODES, "ablation mode"))
        set_field(self, "exact", exact_count(self.exact))
        nonempty_text(self.audio, "audio")
        name = metric_setting(self.metric)
        if self.audio is not None and self.own_metric:
            raise InputError(
                "with `audio` the effect is Δ the decoder's loss on the transcript; a metric on prompts reads "
                "text models",
                field="metric",
            )
        if self.own_metric:
            if self.prompts is None and self.text is None:
                raise InputError(
                    f"metric {name or 'custom'} is measured on your prompts: give `prompts`, or `text` "
                    "with `answer` and `wrong`",
                    field="metric",
                )
            if not self.ablation:
                raise InputError(
                    "a metric is an ablation effect; it cannot be asked with the ablation off", field="metric"
                )

    @property
    def own_metric(self) -> bool:
        """Effects are measured with the user's metric on the user's prompts (not the repeated tokens)."""
        return not (self.metric == "loss" and self.prompts is None and self.answer is None and self.wrong is None)

    def read_pairs(self) -> tuple:
        """The prompts an own metric is measured on (their clean side), read and checked: the verb calls it
        once, before the model loads."""
        text = self.text if self.prompts is None else None
        name = metric_setting(self.metric) or "loss"
        return pairs_of(self.prompts, text, None, self.answer, self.wrong, name, sides=("clean",))


@dataclass(frozen=True)
class CorpusSettings(Settings):
    """A corpus read: per-document statistics merged into means with 95 % intervals, and per-document
    ablation of the candidate heads (read/corpus/read.py)."""

    model: ModelArg = opt(DEFAULT_MODEL, MODEL_DOC)
    tokenizer: object = opt(None, TOKENIZER_DOC)
    processor: object = opt(None, PROCESSOR_DOC)
    dtype: str = opt("auto", DTYPE_DOC)
    device: str | None = opt(None, DEVICE_DOC)
    device_map: object = opt(None, DEVICE_MAP_DOC)
    corpus: str = opt("", "a .txt, .jsonl, .parquet, a folder of .txt files or a saved Hugging Face dataset")
    field: str = opt("text", "the .jsonl field / dataset column holding the text")
    per_line: bool = opt(False, "a .txt corpus holds one document per line")
    limit: int | None = opt(None, "read at most this many documents")
    skip_bad: bool = opt(False, "skip (and count) documents that are not text, instead of refusing them")
    max_tokens: int | None = opt(None, "window length (unset: min(the model's context, 1024))")
    exact: int | str = opt(DEFAULT_EXACT, "candidate heads: the top N of |estimate| on document 0, or 'all'")
    importance_tokens: int = opt(256, "per-document ablation on each document's first N tokens")
    seeds: tuple[int, ...] = opt(DEFAULT_SEEDS, "probe seeds of the repeated-random-token stimulus")
    stimulus_batch: int = opt(8, "sequences per probe seed of the repeated-token stimulus")
    max_weight: bool = opt(False, "also the row maximum and argmax offsets (a blocked pass over the weights)")
    checkpoint: str | None = opt(
        None,
        "write the accumulator here every checkpoint_every documents; rerun to resume (unset: to attnroute's cache)",
    )
    no_checkpoint: bool = opt(False, NO_CHECKPOINT_DOC)
    checkpoint_every: int = opt(10, "documents between checkpoints")
    verify: bool = opt(True, "compare the routed model with its own eager attention before reading")

    def __post_init__(self):
        path_arg(self.corpus, "corpus", "a file or folder of documents")
        if not self.corpus:
            raise InputError("corpus is empty: give a file or folder of documents", field="corpus")
        if not isinstance(self.field, str) or not self.field:
            raise InputTypeError(
                f"field must be a .jsonl field or dataset column's name, got {self.field!r}", field="field"
            )
        integer(self.limit, "limit", 1, optional=True)
        integer(self.max_tokens, "max_tokens", 2, optional=True)
        integer(self.importance_tokens, "importance_tokens", 2)
        integer(self.checkpoint_every, "checkpoint_every", 1)
        checkpoint_fields(self)
        integer(self.stimulus_batch, "stimulus_batch", 1)
        set_field(self, "seeds", integers(self.seeds, "seeds", 0, SEED_MAX))
        set_field(self, "exact", exact_count(self.exact))


@dataclass(frozen=True)
class ReportSettings(Settings):
    """The routing report: one text read (the "report" preset of HeadsSettings), every layer's
    weights, optionally a continuation (``generate``) and a corpus read."""

    model: ModelArg = opt(DEFAULT_MODEL, MODEL_DOC)
    tokenizer: object = opt(None, TOKENIZER_DOC)
    processor: object = opt(None, PROCESSOR_DOC)
    dtype: str = opt("auto", DTYPE_DOC)
    device: str | None = opt(None, DEVICE_DOC)
    device_map: object = opt(None, DEVICE_MAP_DOC)
    text: str | None = opt(None, "the text to read (unset: the built-in paragraph)")
    max_tokens: int | None = opt(
        None, f"cut the text to this many tokens (unset: {PAGE_TOKENS}, or the model's positions if fewer)"
    )
    ablation: bool = opt(True, "measure every head's effect (zero ablation on repeated tokens)")
    verify: bool = opt(True, "compare the routed model with its own eager attention before reading")
    generate: int = opt(0, f"greedy tokens (≤ {MAX_GENERATE}) decoded with the KV cache, their routes recorded")
    corpus: CorpusSettings | None = opt(None, "a corpus read shown beside the text (CorpusSettings)")

    def __post_init__(self):
        nonempty_text(self.text, "text")
        integer(self.max_tokens, "max_tokens", 2, optional=True)
        integer(self.generate, "generate", 0, MAX_GENERATE)

    def heads(self, max_tokens: int | None) -> HeadsSettings:
        """The page's read: the "report" preset on this text, cut to ``max_tokens`` (fitted to the model)."""
        return HeadsSettings.from_name(
            "report",
            model=self.model,
            text=self.text,
            max_tokens=max_tokens,
            ablation=self.ablation,
            verify=self.verify,
        )


__all__ = [
    "ADD_KINDS",
    "ABLATION_MODES",
    "DEFAULT_EXACT",
    "DEFAULT_MODEL",
    "DEFAULT_SEEDS",
    "MAX_GENERATE",
    "PAGE_TOKENS",
    "MODEL_DOC",
    "SETTLE_FIRST",
    "SETTLE_STEP",
    "SETTLE_TOP",
    "CorpusSettings",
    "HeadsSettings",
    "ReportSettings",
    "probe_seeds",
]
