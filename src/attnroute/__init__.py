"""attnroute: transformer attention as routing.

Build attention from its five stages, check any implementation for the bugs that ship, read
how a real model routes a text, cost what routing takes, and show it.

Floors (each imports only those below it): errors, settings → engine → models → read, check, cost,
learn → show → cli. The public names are re-exported here and loaded on first use (PEP 562), so
`import attnroute` — and with it `attnroute --help` and every refusal of a bad flag — loads no
torch until a name that needs it is touched; transformers waits until a model is read.
"""

import importlib as _importlib
import sys as _sys
import types as _types

__version__ = "0.1.0"

_ENGINE = (
    "IMPLS",
    "TOLERANCE",
    "Block",
    "CallbackProbe",
    "FeedForward",
    "Intervention",
    "KeyMass",
    "KnockoutEdges",
    "KVCache",
    "LearnedPositions",
    "Mask",
    "MultiHeadAttention",
    "Probe",
    "ReplaceOutput",
    "RoPE",
    "RowStats",
    "SinusoidalPositions",
    "SubstituteWeights",
    "Temperature",
    "TinyConfig",
    "TinyTransformer",
    "Trace",
    "UniformWeights",
    "UnsupportedRequest",
    "WeightBlock",
    "ZeroHead",
    "aggregate",
    "apply_rope",
    "assert_close_to_reference",
    "attend",
    "causal",
    "choose_impl",
    "combine_additive",
    "document",
    "from_additive",
    "from_hf",
    "from_hf_2d",
    "from_mha",
    "full",
    "half_split_to_interleaved",
    "interleaved_to_half_split",
    "normalize",
    "padding",
    "predicate",
    "prefix_lm",
    "probsparse_attend",
    "probsparse_sizes",
    "project",
    "rope_frequencies",
    "scale_and_mask",
    "score",
    "sinusoidal",
    "sinusoidal_shift",
    "sliding_window",
    "to_additive",
    "to_hf",
    "to_key_padding_mask",
    "to_mha",
    "window_from",
    "window_to",
)
# public name -> (module under attnroute, attribute there); one home per name
_HOMES: dict[str, tuple[str, str]] = {
    **{n: ("engine", n) for n in _ENGINE},
    "InputError": ("errors", "InputError"),
    "InputTypeError": ("errors", "InputTypeError"),
    "Interrupted": ("errors", "Interrupted"),
    "HeadsSettings": ("settings", "HeadsSettings"),
    "CorpusSettings": ("settings", "CorpusSettings"),
    "ReportSettings": ("settings", "ReportSettings"),
    "KnockoutSettings": ("settings", "KnockoutSettings"),
    "SwapSettings": ("settings", "SwapSettings"),
    "NeedleSettings": ("settings", "NeedleSettings"),
    "CheckSettings": ("settings", "CheckSettings"),
    "KVSettings": ("settings", "KVSettings"),
    "FitSettings": ("settings", "FitSettings"),
    "PatchSettings": ("settings", "PatchSettings"),
    "RoutesSettings": ("settings", "RoutesSettings"),
    "Metric": ("promptset", "Metric"),
    "PromptPair": ("promptset", "PromptPair"),
    "patch": ("read.patching.patch", "patch"),
    "route_attribution": ("read.patching.route_attribution", "route_attribution"),
    "PatchResult": ("read.patching.patch", "PatchResult"),
    "circuit": ("read.verbs", "circuit"),
    "path_patch": ("read.verbs", "path_patch"),
    "CircuitResult": ("read.circuits.circuit", "CircuitResult"),
    "evaluate_circuit": ("read.circuits.evaluate", "evaluate_circuit"),
    "edge_graph": ("read.circuits.graph", "edge_graph"),
    "CircuitEvaluation": ("read.circuits.evaluate", "CircuitEvaluation"),
    "EvaluateSettings": ("settings", "EvaluateSettings"),
    "PathPatchResult": ("read.circuits.path", "PathPatchResult"),
    "why": ("read.verbs", "why"),
    "WhyResult": ("read.circuits.why", "WhyResult"),
    "composition": ("read.circuits.composition", "composition"),
    "CompositionResult": ("read.circuits.composition", "CompositionResult"),
    "RoutesResult": ("read.patching.route_attribution", "RoutesResult"),
    "METRICS": ("read.ground.metrics", "BUILT_IN"),
    "tokens": ("read.stimuli", "tokens"),
    "read_heads": ("read.heads", "read_heads"),
    "read_corpus": ("read.corpus.read", "read_corpus"),
    "read_routed": ("read.adapter", "routed"),
    "knockout": ("read.experiments.knockout", "knockout"),
    "swap": ("read.experiments.swap", "swap"),
    "needle": ("read.experiments.needle", "needle"),
    "cross_knockout": ("read.speech.cross", "cross_knockout"),
    "cross_swap": ("read.speech.cross", "cross_swap"),
    "ablate_modes": ("read.mode_ablation", "ablate_modes"),
    "speech_patch": ("read.speech.patch", "speech_patch"),
    "speech_routes": ("read.speech.routes", "speech_routes"),
    "audio": ("audio", "audio"),
    "Audio": ("audio", "Audio"),
    "HeadTable": ("read.headtable", "HeadTable"),
    "load_model": ("models", "load"),
    "routing_check": ("read.verify", "routing_check"),
    "RoutingMismatch": ("read.verify", "RoutingMismatch"),
    "check": ("check.report", "check"),
    "CheckReport": ("check.report", "CheckReport"),
    "run_experiment": ("learn", "run_experiment"),
    "LearnResult": ("learn", "LearnResult"),
    "serve": ("serve.server", "serve"),
    "ServeSettings": ("settings", "ServeSettings"),
    # the model's one door and its type
    "LoadedModel": ("models", "LoadedModel"),
    # every verb's settings and result
    "CircuitSettings": ("settings", "CircuitSettings"),
    "PathPatchSettings": ("settings", "PathPatchSettings"),
    "WhySettings": ("settings", "WhySettings"),
    "CompositionSettings": ("settings", "CompositionSettings"),
    "SpeechPatchSettings": ("settings", "SpeechPatchSettings"),
    "SpeechRoutesSettings": ("settings", "SpeechRoutesSettings"),
    "CrossKnockoutSettings": ("settings", "CrossKnockoutSettings"),
    "CrossSwapSettings": ("settings", "CrossSwapSettings"),
    "SimulateSettings": ("settings", "SimulateSettings"),
    "TrainSettings": ("settings.learn", "TrainSettings"),
    "InductionSettings": ("settings.learn", "InductionSettings"),
    "ScaleSettings": ("settings.learn", "ScaleSettings"),
    "PruneSettings": ("settings.learn", "PruneSettings"),
    "FFSettings": ("settings.learn", "FFSettings"),
    "CrossSettings": ("settings.learn", "CrossSettings"),
    "KnockoutResult": ("read.experiments.knockout", "KnockoutResult"),
    "SwapResult": ("read.experiments.swap", "SwapResult"),
    "NeedleResult": ("read.experiments.needle", "NeedleResult"),
    "CrossKnockoutResult": ("read.speech.cross", "CrossKnockoutResult"),
    "CrossSwapResult": ("read.speech.cross", "CrossSwapResult"),
    "SpeechPatchResult": ("read.speech.patch", "SpeechPatchResult"),
    "SpeechRoutesResult": ("read.speech.routes", "SpeechRoutesResult"),
    "CheckRun": ("check.audit", "CheckRun"),
    # names that follow the commands (`attnroute routes` -> routes); the older names above stay as aliases
    "heads": ("read.heads", "read_heads"),
    "routes": ("read.patching.route_attribution", "route_attribution"),
    "report": ("read.report", "routing_view"),
    "learn": ("learn", "run_experiment"),
    "learn_induction": ("learn", "learn_induction"),
    "learn_scale": ("learn", "learn_scale"),
    "learn_pruning": ("learn", "learn_pruning"),
    "learn_ff": ("learn", "learn_ff"),
    "learn_crossattn": ("learn", "learn_crossattn"),
    "cache_clear": ("read.ground.runs", "clear"),
    "cache_list": ("read.ground.runs", "entries"),
    "load": ("show.results", "load"),  # any result's JSON back as its typed result
    "Result": ("engine.jsonable", "Result"),
    "cost_kv": ("cost.footprint", "kv"),
    "cost_fit": ("cost.fit", "fit"),
    "cost_simulate": ("cost.serving", "serve_stream"),
}


def _load(name: str):
    module, attr = _HOMES[name]
    value = getattr(_importlib.import_module(f"{__name__}.{module}"), attr)
    _Package.__setattr__(_sys.modules[__name__], name, value, _force=True)  # loaded once
    return value


class _Package(_types.ModuleType):
    """attnroute's module: public names load on first use, and a subpackage that shares a public
    name (``attnroute.check``, the function, and ``attnroute/check/``) never replaces the name when
    the import system binds the subpackage on its parent."""

    def __getattr__(self, name: str):
        if name in _HOMES:
            return _load(name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __setattr__(self, name: str, value, _force: bool = False):
        if not _force and name in _HOMES and isinstance(value, _types.ModuleType):
            return  # `import attnroute.check.report` would bind the package over the function
        super().__setattr__(name, value)

    def __dir__(self):  # the public names (and dunders): not the modules the package or its users imported
        return sorted(set(_HOMES) | {n for n in super().__dir__() if n.startswith("__")})


_sys.modules[__name__].__class__ = _Package

# the public surface, one name per line above (tests/test_namespace.py pins its digest: a change is a decision)
__all__ = list(_HOMES)
