"""The settings of every verb, validated once: what the command line, notebooks and the explorer build.

Each verb's settings are one frozen dataclass whose fields carry their default and one line of
meaning (``opt``); defaults are written there and nowhere else — argparse defaults are None, and a
flag left out keeps the settings' own. The checks that need no model and read no file run in
``__post_init__`` and refuse in one line naming the *field* (``max_tokens``), which the command line
maps to its flag. Reading a prompt file is the verb's (``settings.read_pairs()``, once, before the
model loads); checks that need the model (a window wider than its layers, a word missing from its
tokens) stay with the verb.

    s = HeadsSettings(model="minilm", max_tokens=128)
    s = HeadsSettings.from_name("report")            # the cheap read the routing report runs
    s = s.replace(exact="all")                        # validated again

    base         validators, the Settings base, opt(), the @verb signature
    read         HeadsSettings, CorpusSettings, ReportSettings (and the settle rule's counts)
    experiments  KnockoutSettings, SwapSettings, NeedleSettings
    patching     PatchSettings, RoutesSettings, CircuitSettings, EvaluateSettings, PathPatchSettings,
                 WhySettings, CompositionSettings
    tools        CheckSettings, FitSettings, KVSettings, SimulateSettings, ServeSettings
    learn        TrainSettings and each learn experiment's (InductionSettings, ScaleSettings, …)

Like errors.py, this package imports no torch, so a bad flag is refused before torch loads.
"""

from .base import SEED_MAX, Settings, exact_count, integer, integers, opt, verb
from .experiments import (
    CrossKnockoutSettings,
    CrossSwapSettings,
    KnockoutSettings,
    NeedleSettings,
    SpeechPatchSettings,
    SpeechRoutesSettings,
    SwapSettings,
)
from .patching import (
    ABLATIONS,
    DIRECTIONS,
    PATCH_SITES,
    CircuitSettings,
    CompositionSettings,
    EvaluateSettings,
    PatchSettings,
    PathPatchSettings,
    RoutesSettings,
    WhySettings,
)
from .read import (
    ABLATION_MODES,
    ADD_KINDS,
    DEFAULT_EXACT,
    DEFAULT_MODEL,
    DEFAULT_SEEDS,
    MAX_GENERATE,
    PAGE_TOKENS,
    SETTLE_FIRST,
    SETTLE_STEP,
    SETTLE_TOP,
    CorpusSettings,
    HeadsSettings,
    ReportSettings,
    probe_seeds,
)
from .tools import (
    CONVENTIONS,
    FIT_VERBS,
    KV_DTYPES,
    MASK_FAMILIES,
    SERVE_TOKENS,
    CheckSettings,
    FitSettings,
    KVSettings,
    ServeSettings,
    SimulateSettings,
)

__all__ = [
    "FIT_VERBS",
    "ADD_KINDS",
    "ABLATIONS",
    "ABLATION_MODES",
    "CONVENTIONS",
    "DEFAULT_EXACT",
    "DEFAULT_MODEL",
    "DEFAULT_SEEDS",
    "DIRECTIONS",
    "KV_DTYPES",
    "MASK_FAMILIES",
    "MAX_GENERATE",
    "PAGE_TOKENS",
    "SERVE_TOKENS",
    "PATCH_SITES",
    "SEED_MAX",
    "SETTLE_FIRST",
    "SETTLE_STEP",
    "SETTLE_TOP",
    "CheckSettings",
    "CircuitSettings",
    "CompositionSettings",
    "CorpusSettings",
    "EvaluateSettings",
    "HeadsSettings",
    "FitSettings",
    "KVSettings",
    "KnockoutSettings",
    "CrossKnockoutSettings",
    "CrossSwapSettings",
    "SpeechPatchSettings",
    "SpeechRoutesSettings",
    "NeedleSettings",
    "PatchSettings",
    "PathPatchSettings",
    "WhySettings",
    "ReportSettings",
    "RoutesSettings",
    "ServeSettings",
    "Settings",
    "SimulateSettings",
    "SwapSettings",
    "exact_count",
    "integer",
    "integers",
    "opt",
    "probe_seeds",
    "verb",
]
