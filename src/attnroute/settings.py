"""The settings of every verb, validated once: what the command line, notebooks and the explorer build.

Each verb's settings are one frozen dataclass. Defaults are written here and nowhere else; the
checks that need no model run in ``__post_init__`` and refuse in one line naming the *field*
(``max_tokens``), which the command line maps to its flag. Checks that need the model (a window
wider than its layers, a word missing from its tokens) stay with the verb.

    s = HeadsSettings(model="minilm", max_tokens=128)
    s = HeadsSettings.from_name("report")            # the cheap read the routing report runs
    s = dataclasses.replace(s, exact="all")          # validated again

Like errors.py, this module imports no torch, so a bad flag is refused before torch loads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .errors import InputError, InputTypeError

DEFAULT_MODEL = "smollm2"
DEFAULT_EXACT = 20  # heads ablated exactly by default: the top of the one-backward estimate
# the settle rule (read/ground/settle.py): exact measurement of the estimate's first SETTLE_FIRST components,
# then SETTLE_STEP more at a time until the exact top SETTLE_TOP stops changing
SETTLE_FIRST, SETTLE_STEP, SETTLE_TOP = 20, 10, 10
ABLATION_MODES = ("zero", "mean", "uniform")
CONVENTIONS = ("sdpa", "mha", "additive", "hf", "causal")
MASK_FAMILIES = ("any", "causal", "bidirectional")
KV_DTYPES = ("fp32", "fp16", "bf16", "fp8", "int8")
SEED_MAX = 2**32 - 1  # numpy's and torch's seed range
MAX_GENERATE = 512
DEFAULT_SEEDS = (0, 1, 2)  # probe seeds of the repeated-token stimulus: one --seed and the next two


# ------------------------------------------------------------------------------------ validators


def integer(value, name: str, lo: int, hi: int | None = None, *, optional: bool = False) -> int | None:
    """``value`` as an int in [lo, hi]; None passes when ``optional``. Bools are not integers here."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputTypeError(f"{name} must be an integer, got {value!r}", field=name)
    if value < lo or (hi is not None and value > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise InputError(f"{name} must be {bound}, got {value}", field=name)
    return value


def integers(values, name: str, lo: int, hi: int | None = None) -> tuple[int, ...]:
    """A non-empty tuple of integers in [lo, hi] (an empty list is refused: it would mean nothing)."""
    values = tuple(values)
    if not values:
        raise InputError(f"{name} is empty: give at least one value", field=name)
    return tuple(integer(v, name, lo, hi) for v in values)


def exact_count(value) -> int | str:
    """How many heads to ablate exactly: an integer ≥ 0, or "all"."""
    if value == "all":
        return "all"
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise InputError(f"exact must be a number of heads (≥ 0) or 'all', got {value!r}", field="exact")


def nonempty_text(value, name: str, *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{name} is empty: give a non-empty text, or none for the built-in paragraph", field=name)
    return value


def one_of(value, name: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InputError(f"{name} {value!r} is not one of {', '.join(choices)}", field=name)
    return value


def _set(obj, name: str, value) -> None:
    object.__setattr__(obj, name, value)  # frozen dataclasses normalise their own fields


class Settings:
    """Named presets (gpt-fast's ``ModelArgs.from_name``): ``PRESETS`` maps a name to field values."""

    PRESETS: dict[str, dict] = {}

    @classmethod
    def from_name(cls, name: str, **overrides):
        if name not in cls.PRESETS:
            raise InputError(f"preset {name!r} is not one of {', '.join(cls.PRESETS)}", field="preset")
        return cls(**{**cls.PRESETS[name], **overrides})

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, settings=None, model=None, fields: dict | None = None, **given):
        """A verb's settings: ``settings`` as given, or built from the model, the verb's positional inputs
        (``given``, None = left out) and keyword ``fields`` — never both, so nothing is dropped."""
        fields = fields or {}
        if settings is not None:
            if model is not None or fields or any(v is not None for v in given.values()):
                raise InputError("give settings, or the model, inputs and fields, not both", field="settings")
            if not isinstance(settings, cls):
                raise InputTypeError(
                    f"settings must be {cls.__name__}, got {type(settings).__name__}", field="settings"
                )
            return settings
        given = {k: v for k, v in given.items() if v is not None}
        return cls(**({} if model is None else {"model": model}), **given, **fields)


# ------------------------------------------------------------------------------------ read


@dataclass(frozen=True)
class HeadsSettings(Settings):
    """One text read: statistics (pass 1), repeated tokens (pass 2), effects (pass 3)."""

    model: object = DEFAULT_MODEL  # a name, a path, a hub id, or a LoadedModel
    text: str | None = None  # None: the built-in paragraph
    max_tokens: int | None = None  # None: the model's context
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    ablation: bool = True
    effect_batch: int = 8  # sequences of repeated tokens the effects are measured on
    effect_len: int = 40  # random tokens per repeat in that batch
    modes: tuple[str, ...] = ("zero",)
    stimulus_batch: int = 8
    max_weight: bool = False  # adds the row maximum and argmax offsets (a blocked pass)
    exact: int | str = DEFAULT_EXACT  # or "all": the full sweep
    verify: bool = True  # the routing check against the model's own eager attention
    # your metric: effects measured on your prompts (their clean side) instead of repeated random tokens
    metric: object = "loss"  # a name (promptset.METRIC_FIELDS) or metric(logits, batch) -> Tensor[B]
    prompts: object = None  # a .jsonl path or a sequence of pairs; None with a metric: the text
    answer: str | None = None
    wrong: str | None = None
    effect_prompts: tuple = ()  # filled from prompts / text when the metric or prompts are given

    PRESETS = {
        "default": {},
        # the routing report's read, sized for a one-minute page on 2 cores: 2 probe seeds of 4
        # sequences, zero ablation of every head on one sequence of 16 tokens repeated
        "report": {"seeds": (0, 1), "effect_batch": 1, "effect_len": 16, "exact": "all", "stimulus_batch": 4},
        "full": {"exact": "all", "modes": ABLATION_MODES},
    }

    def __post_init__(self):
        nonempty_text(self.text, "text")
        integer(self.max_tokens, "max_tokens", 2, optional=True)
        _set(self, "seeds", integers(self.seeds, "seeds", 0, SEED_MAX))
        integer(self.effect_batch, "effect_batch", 1)
        integer(self.effect_len, "effect_len", 2)
        integer(self.stimulus_batch, "stimulus_batch", 1)
        modes = tuple(self.modes)
        bad = [m for m in modes if m not in ABLATION_MODES] or ([] if modes else ["(none)"])
        if bad:
            raise InputError(
                f"unknown ablation mode {bad[0]!r}: expected some of {', '.join(ABLATION_MODES)}", field="modes"
            )
        _set(self, "modes", modes)
        _set(self, "exact", exact_count(self.exact))
        _set(self, "effect_prompts", _effect_prompts(self))

    @property
    def own_metric(self) -> bool:
        """Effects are measured with the user's metric on the user's prompts (not the repeated tokens)."""
        return bool(self.effect_prompts)


def _effect_prompts(s) -> tuple:
    """The prompts an own metric is measured on (their clean side), or () for the built-in effect."""
    name = metric_setting(s.metric)
    if s.effect_prompts or (name == "loss" and s.prompts is None and s.answer is None and s.wrong is None):
        return tuple(s.effect_prompts)
    if s.prompts is None and s.text is None:
        raise InputError(
            f"metric {name or 'custom'} is measured on your prompts: give `prompts`, or `text` with `answer` and "
            "`wrong`",
            field="metric",
        )
    if not s.ablation:
        raise InputError("a metric is an ablation effect; it cannot be asked with the ablation off", field="metric")
    text = s.text if s.prompts is None else None
    return _pairs(s.prompts, text, None, s.answer, s.wrong, name or "loss", sides=("clean",))


def probe_seeds(seed: int) -> tuple[int, int, int]:
    """The three probe seeds of one ``--seed``: seed, seed + 1, seed + 2 (each in numpy's range)."""
    integer(seed, "seed", 0, SEED_MAX - 2)
    return tuple(seed + s for s in DEFAULT_SEEDS)


@dataclass(frozen=True)
class CorpusSettings(Settings):
    """A corpus read: per-document statistics merged into means with 95 % intervals, and per-document
    ablation of the candidate heads (read/corpus/read.py)."""

    model: object = DEFAULT_MODEL
    corpus: str = ""
    field: str = "text"  # the .jsonl field / dataset column
    per_line: bool = False  # a .txt corpus holds one document per line
    limit: int | None = None  # documents at most
    skip_bad: bool = False  # skip (and count) documents that are not text, instead of refusing them
    max_tokens: int | None = None  # window length; None: min(the model's context, 1024)
    exact: int | str = DEFAULT_EXACT  # candidate heads: the top of |estimate| on document 0, or "all"
    importance_tokens: int = 256  # per-document ablation on each document's first N tokens
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    stimulus_batch: int = 8
    max_weight: bool = False
    checkpoint: str | None = None
    checkpoint_every: int = 10
    verify: bool = True

    def __post_init__(self):
        if not self.corpus:
            raise InputError("corpus is empty: give a file or folder of documents", field="corpus")
        integer(self.limit, "limit", 1, optional=True)
        integer(self.max_tokens, "max_tokens", 2, optional=True)
        integer(self.importance_tokens, "importance_tokens", 2)
        integer(self.checkpoint_every, "checkpoint_every", 1)
        integer(self.stimulus_batch, "stimulus_batch", 1)
        _set(self, "seeds", integers(self.seeds, "seeds", 0, SEED_MAX))
        _set(self, "exact", exact_count(self.exact))


@dataclass(frozen=True)
class ReportSettings(Settings):
    """The routing report: one text read (the "report" preset of HeadsSettings), every layer's
    weights, optionally a continuation (``generate``) and a corpus read."""

    model: object = DEFAULT_MODEL
    text: str | None = None
    max_tokens: int | None = None  # None: 256 or the model's positions, whichever is fewer
    ablation: bool = True
    verify: bool = True
    generate: int = 0  # greedy tokens decoded with the KV cache, their routes recorded
    corpus: CorpusSettings | None = None

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


# ------------------------------------------------------------------------------------ experiments


def _last_position_metric(metric) -> None:
    """knockout and swap read the last position: loss (the whole prompt) and cosine (encoders) are refused."""
    from .promptset import metric_name

    if metric is None or callable(metric):
        return
    metric_name(metric)
    if metric in ("loss", "cosine"):
        raise InputError(f"metric {metric} does not read the last position; use logit-diff, prob, logprob or kl",
                         field="metric")  # fmt: skip


def _heads_list(heads) -> tuple[int, ...] | None:
    return None if heads is None else integers(heads, "heads", 0)


@dataclass(frozen=True)
class KnockoutSettings(Settings):
    """Cut the route source → target (query → key edges) in every window of ``window`` layers."""

    model: object = DEFAULT_MODEL
    text: str = ""
    source: str = ""  # query positions: a word of the text, or indices "3,4"
    target: str = ""  # key positions, likewise
    window: int = 5
    heads: tuple[int, ...] | None = None  # None: every head
    target_token: str | None = None  # None: the model's own top prediction
    seed: int = 0  # the control route's draw
    metric: object = None  # also your metric (logit-diff, prob, logprob, kl, or a callable) at the last position
    answer: str | None = None
    wrong: str | None = None

    def __post_init__(self):
        nonempty_text(self.text, "text", optional=False)
        for name in ("source", "target"):
            if not str(getattr(self, name)).strip():
                raise InputError(f"{name} is empty: give a word of the text or token indices", field=name)
        integer(self.window, "window", 1)
        integer(self.seed, "seed", 0, SEED_MAX)
        _set(self, "heads", _heads_list(self.heads))
        _last_position_metric(self.metric)


@dataclass(frozen=True)
class SwapSettings(Settings):
    """Run prompt B with prompt A's attention maps in every window of ``window`` layers."""

    model: object = DEFAULT_MODEL
    prompt_a: str = ""
    prompt_b: str = ""
    window: int = 1
    heads: tuple[int, ...] | None = None
    metric: object = None  # also your metric on B's output (the answer / wrong tokens, or kl from B's own)
    answer: str | None = None
    wrong: str | None = None

    def __post_init__(self):
        nonempty_text(self.prompt_a, "prompt_a", optional=False)
        nonempty_text(self.prompt_b, "prompt_b", optional=False)
        integer(self.window, "window", 1)
        _set(self, "heads", _heads_list(self.heads))
        _last_position_metric(self.metric)


@dataclass(frozen=True)
class NeedleSettings(Settings):
    """A needle at a seeded depth in growing distractor context; the retrieval heads followed."""

    model: object = DEFAULT_MODEL
    lengths: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192)
    seed: int = 0
    code: str = "4729"
    top: int = 3  # retrieval heads: the heads with most weight on the needle at the shortest length

    def __post_init__(self):
        _set(self, "lengths", tuple(sorted(integers(self.lengths, "lengths", 32))))
        integer(self.seed, "seed", 0, SEED_MAX)
        integer(self.top, "top", 1)
        if not self.code.strip():
            raise InputError("code is empty: give the secret the needle states", field="code")


# ------------------------------------------------------------------------------------ patching

PATCH_SITES = ("head", "layer", "q", "k", "v")  # a head's output, a layer's attention output, a head's q / k / v
DIRECTIONS = ("denoising", "noising")  # run corrupt, patch in clean / run clean, patch in corrupt


def _pairs(prompts, clean, corrupt, answer, wrong, metric, sides=("clean", "corrupt")):
    """The prompt pairs: a .jsonl path, a sequence of PromptPair / dicts, or one pair from the fields;
    ``answer`` / ``wrong`` fill the rows that do not name their own, then every row is checked."""
    from .promptset import FIELDS, PromptPair, check_pairs, read_jsonl

    if prompts is not None and clean is not None:
        raise InputError("give prompts (a file) or one clean/corrupt pair, not both", field="prompts")
    where = "prompts"
    if prompts is None:
        if clean is None or ("corrupt" in sides and corrupt is None):
            raise InputError("give prompts (a .jsonl file) or both clean and corrupt", field="prompts")
        pairs, where = [PromptPair(clean, corrupt if corrupt is not None else clean)], "the pair"
    elif isinstance(prompts, str | bytes) or hasattr(prompts, "__fspath__"):
        pairs, where = read_jsonl(prompts), f"prompts {prompts}"
    else:
        pairs = [p if isinstance(p, PromptPair) else PromptPair(*(dict(p).get(k) for k in FIELDS), row=i) for i, p in
                 enumerate(prompts, 1)]  # fmt: skip
    if answer is not None or wrong is not None:  # one answer for every row, unless a row names its own
        pairs = [dataclasses.replace(p, answer=p.answer or answer, wrong=p.wrong or wrong) for p in pairs]
    return check_pairs(pairs, metric, where=where, sides=sides)


def metric_setting(metric) -> str | None:
    """A metric's name (checked), or None for a Python callable; anything else is refused."""
    from .promptset import metric_name

    if isinstance(metric, str):
        return metric_name(metric)
    if not callable(metric):
        raise InputTypeError(f"metric must be a name or a callable, got {type(metric).__name__}", field="metric")
    return None


def positions_spec(value) -> str:
    """'all' (the whole sequence at once), 'each' (every position on its own: [L, H, T]), or indices/a word."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"positions must be 'all', 'each', token indices or a word, got {value!r}", field="positions")
    return value.strip()


@dataclass(frozen=True)
class PatchSettings(Settings):
    """Activation patching between clean and corrupted prompts, measured with ``metric``."""

    model: object = DEFAULT_MODEL
    prompts: object = None  # a .jsonl path or a sequence of pairs
    clean: str | None = None  # or one pair
    corrupt: str | None = None
    answer: str | None = None  # the metric's fields for every row that does not name its own
    wrong: str | None = None
    metric: object = "logit-diff"  # a name, or metric(logits, batch) -> Tensor[B] from Python
    direction: str = "denoising"
    sites: tuple[str, ...] = ("head",)
    positions: str = "all"
    exact: int | str = "settle"  # "settle": the top of the estimate until the exact top 10 holds; "all"; N
    top: int = 10  # the exact top that must stop changing
    checkpoint: str | None = None  # the per-prompt arrays, saved after every round; rerun to resume
    pairs: tuple = ()  # filled from prompts / clean+corrupt

    def __post_init__(self):
        name = metric_setting(self.metric)
        one_of(self.direction, "direction", DIRECTIONS)
        sites = tuple(self.sites)
        bad = [x for x in sites if x not in PATCH_SITES] or ([] if sites else ["(none)"])
        if bad:
            raise InputError(f"unknown site {bad[0]!r}: expected some of {', '.join(PATCH_SITES)}", field="sites")
        _set(self, "sites", tuple(dict.fromkeys(sites)))
        _set(self, "positions", positions_spec(self.positions))
        _set(self, "exact", "settle" if self.exact == "settle" else exact_count(self.exact))
        integer(self.top, "top", 1)
        if not self.pairs:  # a Python metric reads whatever fields it likes: only clean/corrupt are required
            pairs = _pairs(self.prompts, self.clean, self.corrupt, self.answer, self.wrong, name or "loss")
            _set(self, "pairs", pairs)


@dataclass(frozen=True)
class RoutesSettings(Settings):
    """Route attribution: the first-order effect of removing every query→key route, top K kept, top N verified."""

    model: object = DEFAULT_MODEL
    text: str | None = None  # one text (the metric's fields from answer / wrong), or prompts / a pair
    prompts: object = None
    clean: str | None = None
    corrupt: str | None = None
    answer: str | None = None
    wrong: str | None = None
    metric: object = "logit-diff"
    top: int = 20  # routes kept
    verify: int = 10  # of those, knocked out exactly
    layers: tuple[int, ...] | None = None  # None: every layer
    pairs: tuple = ()

    def __post_init__(self):
        name = metric_setting(self.metric)
        integer(self.top, "top", 1, 100_000)
        integer(self.verify, "verify", 0)
        if self.verify > self.top:
            raise InputError(f"verify ({self.verify}) cannot exceed top ({self.top}): only kept routes are verified",
                             field="verify")  # fmt: skip
        if self.layers is not None:
            _set(self, "layers", integers(self.layers, "layers", 0))
        if not self.pairs:
            if self.text is not None:
                nonempty_text(self.text, "text", optional=False)
                if self.prompts is not None or self.clean is not None:
                    raise InputError("give text, or prompts / a clean-corrupt pair, not both", field="text")
                pair = _pairs(None, self.text, self.text, self.answer, self.wrong, name or "loss")
            else:
                pair = _pairs(self.prompts, self.clean, self.corrupt, self.answer, self.wrong, name or "loss")
            _set(self, "pairs", pair)

    @property
    def single(self) -> bool:
        """One text: the metric itself is attributed (no corrupt run to move towards)."""
        return self.text is not None


# ------------------------------------------------------------------------------------ check, cost


@dataclass(frozen=True)
class CheckSettings(Settings):
    """Audit an attention implementation: ``target`` is module:function, torch.sdpa, hf:NAME, …"""

    target: str = ""
    convention: str = "sdpa"
    only: tuple[str, ...] | None = None
    skip: tuple[str, ...] | None = None
    scale: float | None = None  # None: the target's own (1/√D, or the model's scaling)
    softcap: float | None = None  # cap·tanh(s/cap) before the mask; None: the target's own (a model's config)
    strict: bool = False  # hazards fail too
    timeout: float = 10.0  # seconds per call before the target counts as hung
    # the masks the target can express: any; causal (a decoder: it takes its mask in its convention, but
    # only causal ones, so every check uses the causal family); bidirectional (an encoder)
    mask_family: str | None = None  # None: the target's own (an hf: model knows), else "any"

    def __post_init__(self):
        if not self.target:
            raise InputError("target is empty: give module:function, torch.sdpa or hf:NAME", field="target")
        one_of(self.convention, "convention", CONVENTIONS)
        if self.mask_family is not None:
            one_of(self.mask_family, "mask_family", MASK_FAMILIES)
        if self.scale is not None and not (0 < self.scale < float("inf")):
            raise InputError(f"scale must be a positive finite number, got {self.scale}", field="scale")
        if self.softcap is not None and not (0 < self.softcap < float("inf")):
            raise InputError(f"softcap must be a positive finite number, got {self.softcap}", field="softcap")
        if not (0 < self.timeout < float("inf")):
            raise InputError(f"timeout must be a positive number of seconds, got {self.timeout}", field="timeout")


@dataclass(frozen=True)
class KVSettings(Settings):
    """What a model's KV cache costs: from --model (a name, a directory, a .gguf, a config.json) or sizes."""

    model: str | None = None
    layers: int | None = None
    heads: int | None = None
    kv_heads: int | None = None  # None: heads (MHA); 1 = MQA
    head_dim: int | None = None
    dtype: str = "fp16"
    context: int = 4096
    batch: int = 1
    window: int | None = None  # sliding window: at most W tokens held

    def __post_init__(self):
        given = [n for n in ("layers", "heads", "kv_heads", "head_dim") if getattr(self, n) is not None]
        if self.model and given:
            flags = ", ".join(f"`{n}`" for n in given)
            raise InputError(f"give `model` or explicit sizes, not both: {flags} would be ignored", field="model")
        if not self.model and any(getattr(self, n) is None for n in ("layers", "heads", "head_dim")):
            raise InputError("give `model` (a name, a directory or a config.json), or `layers`, `heads` and `head_dim`")
        integer(self.context, "context", 1)
        integer(self.batch, "batch", 1)
        integer(self.window, "window", 1, optional=True)

    def sizes(self) -> tuple:
        return self.layers, self.heads, self.kv_heads, self.head_dim


@dataclass(frozen=True)
class SimulateSettings(Settings):
    """Serve a request stream with contiguous reservation and with paging (cost/serving.py)."""

    kv: KVSettings = field(default_factory=lambda: KVSettings(model=DEFAULT_MODEL))
    requests: str | None = None  # a CSV; None: synthetic lengths
    dist: str = "chat"
    n: int = 300
    seed: int = 0
    budget_gb: float = 1.0
    block_size: int = 16
    max_len: int = 2048


# ------------------------------------------------------------------------------------ serve


@dataclass(frozen=True)
class ServeSettings(Settings):
    """The live explorer: one model per process, requests serialized through one bounded queue."""

    model: object = DEFAULT_MODEL
    host: str = "127.0.0.1"  # anything else is said loudly (the token is still required)
    port: int = 0  # 0: a free port chosen by the OS
    max_tokens: int | None = None  # a longer text gets 413; None: 1024, or the model's positions if fewer
    time_limit: float = 120.0  # seconds a request may run; past it: stopped, 504
    queue: int = 8  # requests waiting beyond the running one; past it: 503 with Retry-After
    cache_mb: int = 256  # the LRU of results, bounded in bytes

    def __post_init__(self):
        if not isinstance(self.host, str) or not self.host.strip() or any(c in self.host for c in "/ ?#@"):
            raise InputError(f"host must be an address such as 127.0.0.1, got {self.host!r}", field="host")
        integer(self.port, "port", 0, 65535)
        integer(self.max_tokens, "max_tokens", 2, 1_000_000, optional=True)
        if (
            isinstance(self.time_limit, bool)
            or not isinstance(self.time_limit, (int, float))
            or not (0 < self.time_limit <= 86_400)
        ):
            raise InputError(f"time_limit must be seconds in (0, 86400], got {self.time_limit!r}", field="time_limit")
        integer(self.queue, "queue", 0, 1000)
        integer(self.cache_mb, "cache_mb", 0, 1_000_000)


__all__ = [
    "ABLATION_MODES",
    "CONVENTIONS",
    "MASK_FAMILIES",
    "DEFAULT_EXACT",
    "DEFAULT_MODEL",
    "DEFAULT_SEEDS",
    "MAX_GENERATE",
    "KV_DTYPES",
    "CheckSettings",
    "CorpusSettings",
    "HeadsSettings",
    "KVSettings",
    "KnockoutSettings",
    "NeedleSettings",
    "PATCH_SITES",
    "PatchSettings",
    "RoutesSettings",
    "ReportSettings",
    "Settings",
    "ServeSettings",
    "SimulateSettings",
    "SwapSettings",
    "exact_count",
    "integer",
    "integers",
    "probe_seeds",
]
