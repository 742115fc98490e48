"""The settings of your question with your metric: activation patching and route attribution."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..promptset import MetricArg, metric_setting, pairs_of
from .base import ModelArg, PromptsArg, Settings, exact_count, integer, integers, names, nonempty_text, opt, set_field
from .read import DEFAULT_MODEL, MODEL_DOC, SETTLE_TOP

PATCH_SITES = ("head", "layer", "q", "k", "v")  # a head's output, a layer's attention output, a head's q / k / v
DIRECTIONS = ("denoising", "noising")  # run corrupt, patch in clean / run clean, patch in corrupt
PROMPTS_DOC = "a .jsonl of {clean, corrupt, answer, wrong} rows, 'ioi' (bundled), or a sequence of pairs"


def positions_spec(value) -> str:
    """'all' (the whole sequence at once), 'each' (every position on its own: [L, H, T]), or indices/a word."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"positions must be 'all', 'each', token indices or a word, got {value!r}", field="positions")
    return value.strip()


@dataclass(frozen=True)
class PatchSettings(Settings):
    """Activation patching between clean and corrupted prompts, measured with ``metric``."""

    model: ModelArg = opt(DEFAULT_MODEL, MODEL_DOC)
    prompts: PromptsArg | None = opt(None, PROMPTS_DOC)
    clean: str | None = opt(None, "one clean prompt (with corrupt), instead of prompts")
    corrupt: str | None = opt(None, "its corrupted twin: the same number of tokens")
    answer: str | None = opt(None, "the metric's answer token, for every row that names none")
    wrong: str | None = opt(None, "the metric's wrong token, likewise")
    metric: MetricArg = opt("logit-diff", "a built-in name, or metric(logits, batch) -> Tensor [B] from Python")
    direction: str = opt("denoising", "denoising: run corrupt, patch in clean; noising: the reverse")
    sites: tuple[str, ...] = opt(("head",), f"what is patched: some of {', '.join(PATCH_SITES)}")
    positions: str = opt("all", "all, each (every position: [L, H, T]), token indices or a word of the prompt")
    exact: int | str = opt("settle", "settle (the estimate's top until the exact top holds), all, or a number")
    top: int = opt(SETTLE_TOP, "the exact top that must stop changing")
    checkpoint: str | None = opt(None, "the per-prompt arrays, saved after every round; rerun to resume")

    def __post_init__(self):
        metric_setting(self.metric)
        if self.direction not in DIRECTIONS:
            raise InputError(f"direction {self.direction!r} is not one of {', '.join(DIRECTIONS)}", field="direction")
        set_field(self, "sites", names(self.sites, "sites", PATCH_SITES, "site"))
        set_field(self, "positions", positions_spec(self.positions))
        set_field(self, "exact", "settle" if self.exact == "settle" else exact_count(self.exact))
        integer(self.top, "top", 1)
        pair_fields(self)

    def read_pairs(self) -> tuple:
        """The prompt pairs, read and checked (a file is read here): the verb calls it once."""
        return pairs_of(self.prompts, self.clean, self.corrupt, self.answer, self.wrong, metric_setting(self.metric))


def pair_fields(s) -> None:
    """The pair fields that can be checked without reading a file: prompts or one clean/corrupt pair."""
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

    model: ModelArg = opt(DEFAULT_MODEL, MODEL_DOC)
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

    def __post_init__(self):
        metric_setting(self.metric)
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


__all__ = ["DIRECTIONS", "PATCH_SITES", "PatchSettings", "RoutesSettings", "pair_fields", "positions_spec"]
