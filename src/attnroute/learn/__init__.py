"""learn/: TinyTransformers trained from scratch on synthetic routing tasks, read with the engine's probes and stimuli.

induction   an induction circuit forms (phase change, head scores, ablation proof)
scale       the 1/√d_k scale: logit std at init, saturation, gradients, stalls
pruning     1–8 heads on a mixture of routes, pruned by importance (Michel et al.)
ff          routing alone versus routing plus feed-forward layers at the same budget
crossattn   an encoder-decoder: heads pruned per attention mode, cross-attention maps swapped
"""

from ..engine import InputError
from ..settings.learn import CrossSettings, FFSettings, InductionSettings, PruneSettings, ScaleSettings, TrainSettings
from . import crossattn, feedforward, induction, pruning, scale
from .result import LearnResult
from .tasks import Batch, LookupTask, MixtureTask, RepeatTask
from .train import History, train

EXPERIMENTS = {
    "induction": (induction.run, InductionSettings),
    "scale": (scale.run, ScaleSettings),
    "pruning": (pruning.run, PruneSettings),
    "ff": (feedforward.run, FFSettings),
    "crossattn": (crossattn.run, CrossSettings),
}


def run_experiment(experiment: str, settings=None, progress=None, **fields) -> LearnResult:
    """Run one learn experiment by name — with its frozen settings object (InductionSettings, …) or its
    fields as keywords — and return its LearnResult (what `attnroute learn` writes as JSON).

        attnroute.run_experiment("induction", steps=900, positions="learned")
    """
    if experiment not in EXPERIMENTS:
        raise InputError(f"experiment must be one of {sorted(EXPERIMENTS)}, got {experiment!r}", field="experiment")
    fn, Settings = EXPERIMENTS[experiment]
    if settings is not None and fields:
        raise InputError("give settings or fields, not both", field="settings")
    if settings is not None and not isinstance(settings, Settings):
        raise InputError(f"settings must be {Settings.__name__}, got {type(settings).__name__}", field="settings")
    return LearnResult.from_dict(fn(settings or Settings(**fields), progress=progress))


__all__ = [
    "EXPERIMENTS",
    "Batch",
    "FFSettings",
    "History",
    "InductionSettings",
    "LearnResult",
    "LookupTask",
    "MixtureTask",
    "PruneSettings",
    "RepeatTask",
    "ScaleSettings",
    "TrainSettings",
    "run_experiment",
    "train",
]
