"""The settings of your question with your metric: activation patching and route attribution."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..errors import InputError, InputTypeError
from ..promptset import FLAT_AT_CLEAN, MetricArg, metric_setting, pairs_of
from .base import (
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
    number,
    opt,
    position_spec,
    set_field,
)
from .read import (
    CHECKPOINT_DOC,
    DEFAULT_MODEL,
    DEVICE_DOC,
    DEVICE_MAP_DOC,
    DTYPE_DOC,
    MAX_MEMORY_DOC,
    MODEL_DOC,
    NO_CHECKPOINT_DOC,
    PROCESSOR_DOC,
    SETTLE_TOP,
    SKIP_BAD_DOC,
    TOKENIZER_DOC,
)

PATCH_SITES = ("head", "layer", "q", "k", "v")  # a head's output, a layer's attention output, a head's q / k / v
DIRECTIONS = ("denoising", "noising")  # run corrupt, patch in clean / run clean, patch in corrupt
PROMPTS_DOC = "a .jsonl of {clean, corrupt, answer, wrong} rows, 'ioi' (bundled), or a sequence of pairs"


def positions_spec(value) -> str:
    """'all' (the whole sequence at once), 'each' (every position on its own: [L, H, T]), or indices/a word."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"positions must be 'all', 'each', token indices or a word, got {value!r}", field="positions")
    return value.strip()


@dataclass(frozen=True)
class PairSettings(Settings):
    """What every verb on prompt pairs takes first: the model, the pairs, the metric, the direction."""

    model: ModelArg = opt(DEFAULT_MODEL, MODEL_DOC)
    tokenizer: object = opt(None, TOKENIZER_DOC)
    processor: object = opt(None, PROCESSOR_DOC)
    dtype: str = opt("auto", DTYPE_DOC)
    device: str | None = opt(None, DEVICE_DOC)
    device_map: object = opt(None, DEVICE_MAP_DOC)
    prompts: PromptsArg | None = opt(None, PROMPTS_DOC)
    clean: str | None = opt(None, "one clean prompt (with corrupt), instead of prompts")
    corrupt: str | None = opt(None, "its corrupted twin: the same number of tokens")
    answer: str | None = opt(None, "the metric's answer token, for every row that names none")
    wrong: str | None = opt(None, "the metric's wrong token, likewise")
    metric: MetricArg = opt("logit-diff", "a built-in name, or metric(logits, batch) -> Tensor [B] from Python")
    direction: str = opt("denoising", "denoising: run corrupt, patch in clean; noising: the reverse")
    skip_bad: bool = opt(False, SKIP_BAD_DOC)
    max_memory: int | str | None = opt(None, MAX_MEMORY_DOC)

    def check_metric_direction(self) -> None:
        metric_setting(self.metric)
        if self.direction not in DIRECTIONS:
            raise InputError(f"direction {self.direction!r} is not one of {', '.join(DIRECTIONS)}", field="direction")

    def read_pairs(self) -> tuple:
        """The prompt pairs, read and checked (a file is read here): the verb calls it once."""
        return pairs_of(self.prompts, self.clean, self.corrupt, self.answer, self.wrong, metric_setting(self.metric))


@dataclass(frozen=True)
class PatchSettings(PairSettings):
    """Activation patching between clean and corrupted prompts, measured with ``metric``."""

    sites: tuple[str, ...] = opt(("head",), f"what is patched: some of {', '.join(PATCH_SITES)}")
    positions: str = opt("all", "all, each (every position: [L, H, T]), token indices or a word of the prompt")
    exact: int | str = opt("settle", "settle (the estimate's top until the exact top holds), all, or a number")
    top: int = opt(SETTLE_TOP, "the exact top that must stop changing")
    checkpoint: str | None = opt(None, CHECKPOINT_DOC)
    no_checkpoint: bool = opt(False, NO_CHECKPOINT_DOC)

    def __post_init__(self):
        self.check_metric_direction()
        set_field(self, "sites", names(self.sites, "sites", PATCH_SITES, "site"))
        set_field(self, "positions", positions_spec(self.positions))
        set_field(self, "exact", exact_count(self.exact, "components", settle=True))
        integer(self.top, "top", 1)
        pair_fields(self)


@dataclass(frozen=True)
class ClipPairSettings(PairSettings):
    """Prompt pairs, or — on a speech model — one pair of clips: the same words, one spoken differently."""

    audio_clean: str | None = opt(None, "a speech model's clean clip (.wav or bundled, e.g. paris), instead of prompts")
    audio_corrupt: str | None = opt(None, "the corrupted clip: the same words, one spoken differently (e.g. rome)")
    text: str | None = opt(None, "with clips: the decoder text both runs read (unset: the words the transcripts share)")

    @property
    def clips(self) -> bool:
        return self.audio_clean is not None or self.audio_corrupt is not None


def clip_fields(s: ClipPairSettings) -> None:
    """Clips instead of prompts: both clips, no prompt fields, ``text`` with its answer and wrong."""
    if not s.clips:
        if s.text is not None:
            msg = "`text` is the decoder text of two clips: give audio_clean and audio_corrupt"
            raise InputError(msg, field="text")
        return
    for name in ("prompts", "clean", "corrupt"):
        if getattr(s, name) is not None:
            raise InputError(f"give two clips or prompts, not both: `{name}` with audio clips", field=name)
    if s.skip_bad:
        raise InputError("skip_bad skips prompt rows; two clips are one pair: leave it out", field="skip_bad")
    for name, other in (("audio_clean", "audio_corrupt"), ("audio_corrupt", "audio_clean")):
        if getattr(s, name) is None:
            raise InputError(f"`{other}` needs `{name}` too: a circuit compares two clips", field=name)
        nonempty_text(getattr(s, name), name, optional=False)
    nonempty_text(s.text, "text")
    if s.text is not None and (s.answer is None or s.wrong is None):
        raise InputError("with `text`, give `answer` and `wrong` too (the words to compare after it)", field="text")
    if isinstance(s.metric, str) and s.metric in ("loss", "cosine"):
        raise InputError(
            f"metric {s.metric} reads a text's tokens or an encoder's embedding; two clips are compared where the "
            "word is predicted: use logit-diff, prob, logprob or kl",
            field="metric",
        )
    if getattr(s, "checkpoint", None) is not None:
        raise InputError(
            "checkpoint resumes a prompt set's run; a pair of clips runs in minutes: leave it out", field="checkpoint"
        )
    if getattr(s, "ablation", "corrupt") == "mean":
        raise InputError(
            "mean ablation averages writes over prompts, and two clips are one pair: use ablation corrupt",
            field="ablation",
        )


def pair_fields(s) -> None:
    """The pair fields that can be checked without reading a file: prompts or one clean/corrupt pair (or, for
    settings that take them, two clips)."""
    checkpoint_fields(s)
    memory_field(s)
    if not isinstance(s.skip_bad, bool):
        raise InputError(f"skip_bad must be True or False, got {s.skip_bad!r}", field="skip_bad")
    if isinstance(s, ClipPairSettings):
        clip_fields(s)
        if s.clips:
            return
    if s.prompts is not None and s.clean is not None:
        raise InputError("give prompts (a file) or one clean/corrupt pair, not both", field="prompts")
    if s.prompts is None and (s.clean is None or s.corrupt is None):
        raise InputError("give prompts (a .jsonl file) or both clean and corrupt", field="prompts")
    for name in ("clean", "corrupt", "answer", "wrong"):
        if getattr(s, name) is not None and not isinstance(getattr(s, name), str):
            raise InputError(f"{name} must be a text, got {type(getattr(s, name)).__name__}", field=name)


@dataclass(frozen=True)
class RoutesSettings(Settings):
    """Route attribution: the first-order effect of removing every query→key route, top K kept, top N verified."""

    ARITHMETIC = "float32"  # bf16/fp16 weights read in float32 arithmetic (models/arithmetic.py, docs/precision.md)

    model: ModelArg = opt(DEFAULT_MODEL, MODEL_DOC)
    tokenizer: object = opt(None, TOKENIZER_DOC)
    processor: object = opt(None, PROCESSOR_DOC)
    dtype: str = opt("auto", DTYPE_DOC)
    device: str | None = opt(None, DEVICE_DOC)
    device_map: object = opt(None, DEVICE_MAP_DOC)
    text: str | None = opt(None, "one text (the metric's fields from answer / wrong), or prompts / a pair")
    prompts: PromptsArg | None = opt(None, PROMPTS_DOC)
    clean: str | None = opt(None, "one clean prompt (with corrupt), instead of prompts")
    corrupt: str | None = opt(None, "its corrupted twin: the same number of tokens")
    answer: str | None = opt(None, "the metric's answer token, for every row that names none")
    wrong: str | None = opt(None, "the metric's wrong token, likewise")
    metric: MetricArg = opt("logit-diff", "a built-in name, or metric(logits, batch) -> Tensor [B] from Python")
    top: int = opt(20, "routes kept")
    verify: int = opt(10, "of those, knocked out exactly")
    layers: tuple[int, ...] | None = opt(None, "only these layers (unset: every layer)")
    checkpoint: str | None = opt(None, CHECKPOINT_DOC)
    no_checkpoint: bool = opt(False, NO_CHECKPOINT_DOC)
    skip_bad: bool = opt(False, SKIP_BAD_DOC)
    max_memory: int | str | None = opt(None, MAX_MEMORY_DOC)

    def __post_init__(self):
        metric_setting(self.metric)
        checkpoint_fields(self)
        memory_field(self)
        integer(self.top, "top", 1, 100_000)
        integer(self.verify, "verify", 0)
        if self.verify > self.top:
            raise InputError(
                f"verify ({self.verify}) cannot exceed top ({self.top}): only kept routes are verified", field="verify"
            )
        if self.layers is not None:
            set_field(self, "layers", integers(self.layers, "layers", 0))
        if self.text is not None:
            nonempty_text(self.text, "text", optional=False)
            if self.prompts is not None or self.clean is not None:
                raise InputError("give text, or prompts / a clean-corrupt pair, not both", field="text")
        else:
            pair_fields(self)

    @property
    def single(self) -> bool:
        """One text: the metric itself is attributed (no corrupt run to move towards)."""
        return self.text is not None

    def read_pairs(self) -> tuple:
        """The text as one pair, or the prompt pairs, read and checked: the verb calls it once."""
        name = metric_setting(self.metric)
        if self.single:
            return pairs_of(None, self.text, self.text, self.answer, self.wrong, name)
        return pairs_of(self.prompts, self.clean, self.corrupt, self.answer, self.wrong, name)


ABLATIONS = ("corrupt", "mean")  # what the edges outside a circuit carry
# an edge by its nodes' labels: SENDER>RECEIVER, e.g. L5.H1>L18.KV2.k, embed>L0.H3.q, L29.MLP>logits
NODE = r"(?:embed|enc\.embed|logits|[LE]\d+\.(?:MLP|x?H\d+(?:\.q)?|x?KV\d+\.[kv]))"
EDGE = re.compile(rf"^\s*({NODE})\s*(?:>|->)\s*({NODE})\s*$")


def edge_labels(values) -> tuple[tuple[str, str], ...]:
    """(sender, receiver) label pairs from 'SENDER>RECEIVER' strings."""
    values = (values,) if isinstance(values, str) else tuple(values)
    out = []
    for v in values:
        m = EDGE.match(v) if isinstance(v, str) else None
        kv = re.search(r"([LE]\d+\.x?)H(\d+)\.([kv])\s*$", v) if isinstance(v, str) and m is None else None
        if kv is not None:  # a query head named where keys and values are read by kv heads
            raise InputError(
                f"edge {v!r}: keys and values are read by kv heads — name the receiver {kv[1]}KV<n>.{kv[3]} (query "
                f"head {kv[2]} reads kv head {kv[2]} // heads per kv head), or give path_patch receiver="
                f"'{kv[1]}H{kv[2]}' with channel='{kv[3]}', which maps it",
                field="edges",
            )
        if m is None:
            raise InputError(
                f"edge {v!r} is not SENDER>RECEIVER with nodes such as embed, L5.H1, L5.MLP (senders) and L18.H6.q, "
                "L18.KV2.k, L18.MLP, logits (receivers)",
                field="edges",
            )
        out.append((m.group(1), m.group(2)))
    return tuple(out)


# A circuit's defaults (issue 53.3): EAP-IG beside EAP, so that each channel settles on the closer and each edge
# reaches from the larger of the two (read/ground/settle.py); the top 20 settled, IOI's at 150 edges (docs/circuits.md)
CIRCUIT_IG_STEPS, CIRCUIT_TOP = 5, 20


@dataclass(frozen=True)
class CircuitSettings(ClipPairSettings):
    """Circuits: every edge between heads, MLPs and the embeddings estimated (EAP, EAP-IG), the top settled by
    exact path patching, and the smallest set of edges that carries the behaviour."""

    ig_steps: int = opt(
        CIRCUIT_IG_STEPS,
        "the estimate: 1 is EAP; m > 1 is EAP-IG with m steps, EAP beside it (each channel the closer)",
    )
    exact: int | str = opt("settle", "settle (the estimate's top until the exact top holds), all, or a number")
    top: int = opt(CIRCUIT_TOP, "the exact top that must stop changing")
    limit: int = opt(150, "at most this many edges path-patched while settling (what could still enter is said)")
    edges: tuple[str, ...] | None = opt(None, "edges measured exactly whatever their estimate: SENDER>RECEIVER")
    faithfulness: float = opt(0.8, "the faithfulness the smallest circuit must reach")
    ablation: str = opt("corrupt", "what edges outside a circuit carry: corrupt (the corrupt run) or mean")
    checkpoint: str | None = opt(None, CHECKPOINT_DOC)
    no_checkpoint: bool = opt(False, NO_CHECKPOINT_DOC)

    def __post_init__(self):
        self.check_metric_direction()
        if self.ablation not in ABLATIONS:
            raise InputError(f"ablation {self.ablation!r} is not one of {', '.join(ABLATIONS)}", field="ablation")
        if self.direction == "noising" and self.metric in FLAT_AT_CLEAN:
            raise InputError(
                f"metric {self.metric} is flat (zero gradient) at the clean run that noising differentiates, so every "
                "edge's estimate would be 0: use denoising, or another metric",
                field="metric",
            )
        integer(self.ig_steps, "ig_steps", 1, 64)
        set_field(self, "exact", exact_count(self.exact, "edges", settle=True))
        integer(self.top, "top", 1)
        integer(self.limit, "limit", 1)
        number(self.faithfulness, "faithfulness", 0, 1)
        if self.edges is not None:
            set_field(self, "edges", tuple(f"{a}>{b}" for a, b in edge_labels(self.edges)))
        pair_fields(self)


@dataclass(frozen=True)
class EvaluateSettings(PairSettings):
    """A circuit you chose — circuit()'s chosen edges, an ACDC result, one drawn by hand or edited — evaluated
    on prompt pairs with circuit()'s own checks: the full edge set gives the clean run, the empty set the
    corrupt run (or the mean-ablated one)."""

    edges: tuple[str, ...] = opt((), "the circuit: SENDER>RECEIVER edges (none: the empty circuit)")
    ablation: str = opt("corrupt", "what edges outside the circuit carry: corrupt (the corrupt run) or mean")

    def __post_init__(self):
        self.check_metric_direction()
        if self.ablation not in ABLATIONS:
            raise InputError(f"ablation {self.ablation!r} is not one of {', '.join(ABLATIONS)}", field="ablation")
        if self.edges is None:
            raise InputError("edges: give the circuit's edges as SENDER>RECEIVER labels", field="edges")
        set_field(self, "edges", tuple(dict.fromkeys(f"{a}>{b}" for a, b in edge_labels(self.edges))))
        pair_fields(self)


@dataclass(frozen=True)
class PathPatchSettings(ClipPairSettings):
    """One edge path-patched exactly, beside its estimate: the sender's change reaches the receiver directly."""

    sender: str = opt("embed", "embed, L5.H1 (a head), L5.MLP; an encoder's enc.embed, E2.H0")
    receiver: str = opt("logits", "L18.H6 (a query head), L18.KV2 (a kv head), L18.MLP, logits")
    channel: str | None = opt(None, "q, k or v for a head receiver (k, v of L18.H6: the kv head it reads)")
    ig_steps: int = opt(1, "the estimate beside it: 1 is EAP; m > 1 is EAP-IG")

    def __post_init__(self):
        self.check_metric_direction()
        if self.channel is not None and self.channel not in ("q", "k", "v"):
            raise InputError(f"channel must be q, k or v, got {self.channel!r}", field="channel")
        integer(self.ig_steps, "ig_steps", 1, 64)
        set_field(self, "sender", _node(self.sender, "sender", SENDER, "embed, L5.H1 (a head), L5.MLP, enc.embed"))
        set_field(self, "receiver", _node(self.receiver, "receiver", RECEIVER, "L18.H6, L18.KV2, L18.MLP, logits"))
        head = re.fullmatch(r"[LE]\d+\.x?(H|KV)\d+", self.receiver)
        if head and self.channel is None:
            raise InputError(f"receiver {self.receiver} is a head: give the channel (q, k or v)", field="channel")
        if not head and self.channel is not None:
            raise InputError(f"receiver {self.receiver} has no channels: leave channel unset", field="channel")
        if head and head.group(1) == "KV" and self.channel == "q":
            raise InputError(f"{self.receiver} is a kv head: its channels are k and v", field="channel")
        pair_fields(self)

    @property
    def edge(self) -> str:
        """The edge as a label, SENDER>RECEIVER (a query head's k or v named as the kv head it reads)."""
        r = self.receiver
        if self.channel is not None:
            r = f"{r}.{self.channel}"
        return f"{self.sender}>{r}"


@dataclass(frozen=True)
class WhySettings(Settings):
    """Why a head attends where it does: one route's score (or a head's, averaged over routes) split exactly
    into (query-side component, key-side component) pairs."""

    model: ModelArg = opt(DEFAULT_MODEL, MODEL_DOC)
    tokenizer: object = opt(None, TOKENIZER_DOC)
    processor: object = opt(None, PROCESSOR_DOC)
    dtype: str = opt("auto", DTYPE_DOC)
    device: str | None = opt(None, DEVICE_DOC)
    device_map: object = opt(None, DEVICE_MAP_DOC)
    text: str | None = opt(None, "the text (an encoder-decoder's encoder input; its decoder reads its start token)")
    head: str = opt("", "the head: L18.H6 (a decoder's self-attention), E2.H0 (an encoder's), L3.xH2 (cross)")
    query: str | None = opt(None, "query positions: a word of the text or indices '3,4' (every pair with key)")
    key: str | None = opt(None, "key positions, likewise")
    routes: str | None = opt(
        None,
        "instead of query and key: 'induction' (every token → the one after its earlier occurrence), a "
        "routes --json file (its rows of this head), or from Python (query, key) index pairs",
    )
    top: int = opt(20, "pairs listed, largest |term| first (the totals cover every pair)")
    audio: str | None = opt(
        None,
        "a speech model's clip: the text is its transcript (unset: decoded); a decoder word names the rows that "
        "predict it, frames are seconds 'a-b', a word's frames by the alignment, or indices",
    )

    def __post_init__(self):
        nonempty_text(self.text, "text")
        nonempty_text(self.audio, "audio")
        set_field(self, "head", _node(self.head, "head", HEAD, "L18.H6, E2.H0, L3.xH2"))
        for name in ("query", "key"):
            set_field(self, name, position_spec(getattr(self, name), name, optional=True))
        integer(self.top, "top", 1)
        if self.text is None and self.audio is None:
            raise InputError("why reads a text: give it (or audio, on a speech model)", field="text")
        if self.audio is not None and self.routes is not None:
            raise InputError("with audio, name the route by query and key (routes reads text prompts)", field="routes")
        if self.routes is None and (self.query is None or self.key is None):
            raise InputError("why needs a route: give query and key (words or indices), or routes", field="query")
        if self.routes is not None and (self.query is not None or self.key is not None):
            raise InputError("give either query and key, or routes, not both", field="routes")
        set_field(self, "routes", route_spec(self.routes))


def route_spec(value):
    """why's routes: None, 'induction', a file path, or (query, key) index pairs (a tuple of int pairs)."""
    if value is None or isinstance(value, str) and value.strip():
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    index = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0  # noqa: E731
    if isinstance(value, list | tuple) and value:
        pairs = [tuple(p) for p in value if isinstance(p, list | tuple) and len(p) == 2 and all(map(index, p))]
        if len(pairs) == len(value):
            return tuple(pairs)
    raise InputTypeError(
        f"routes must be 'induction', a routes --json file, or (query, key) index pairs such as [(3, 0)], got "
        f"{value!r}"[:300],
        field="routes",
    )


@dataclass(frozen=True)
class CompositionSettings(Settings):
    """Q-, K- and V-composition between every pair of heads, from the weights (Elhage et al. 2021)."""

    model: ModelArg = opt(DEFAULT_MODEL, MODEL_DOC)
    tokenizer: object = opt(None, TOKENIZER_DOC)
    processor: object = opt(None, PROCESSOR_DOC)
    dtype: str = opt("auto", DTYPE_DOC)
    device: str | None = opt(None, DEVICE_DOC)
    device_map: object = opt(None, DEVICE_MAP_DOC)


HEAD = re.compile(r"^[LE]\d+\.x?H\d+$")
SENDER = re.compile(r"^(embed|enc\.embed|[LE]\d+\.(?:MLP|x?H\d+))$")
RECEIVER = re.compile(r"^(logits|[LE]\d+\.(?:MLP|x?H\d+|x?KV\d+))$")


def _node(value, name: str, pattern, examples: str) -> str:
    if not isinstance(value, str) or not pattern.match(value.strip()):
        raise InputError(f"{name} {value!r} is not a node of the kind {examples}", field=name)
    return value.strip()


__all__ = [
    "EvaluateSettings",
    "ABLATIONS",
    "DIRECTIONS",
    "PATCH_SITES",
    "CircuitSettings",
    "PairSettings",
    "CompositionSettings",
    "PatchSettings",
    "PathPatchSettings",
    "RoutesSettings",
    "WhySettings",
    "edge_labels",
    "pair_fields",
    "positions_spec",
]
