"""learn/: TinyTransformers trained from scratch on synthetic routing tasks, read with the engine's probes and stimuli.

induction   an induction circuit forms (phase change, head scores, ablation proof)
scale       the 1/√d_k scale: logit std at init, saturation, gradients, stalls
pruning     1–8 heads on a mixture of routes, pruned by importance (Michel et al.)
ff          routing alone versus routing plus feed-forward layers at the same budget
crossattn   an encoder-decoder: heads pruned per attention mode, cross-attention maps swapped
"""

from ..engine import InputError
from ..settings.base import verb
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
    s = Settings.of(settings, None, fields)  # an unknown field or both given: refused naming it, never a TypeError
    return LearnResult.from_dict(fn(s, progress=progress))


# One function per experiment, named as the command (`attnroute learn induction` -> learn_induction): each
# signature lists its settings' fields (settings.verb), so help() shows them. run_experiment(name) stays.
@verb(InductionSettings)
def learn_induction(*, settings: InductionSettings | None = None, progress=None, **fields) -> LearnResult:
    """An induction circuit forms in a 2-layer TinyTransformer: phase change, head scores, ablation proof."""
    return run_experiment("induction", settings, progress, **fields)


@verb(ScaleSettings)
def learn_scale(*, settings: ScaleSettings | None = None, progress=None, **fields) -> LearnResult:
    """The 1/sqrt(d_k) scale: logit std at init, saturation, gradients, stalls."""
    return run_experiment("scale", settings, progress, **fields)


@verb(PruneSettings)
def learn_pruning(*, settings: PruneSettings | None = None, progress=None, **fields) -> LearnResult:
    """1-8 heads on a mixture of routes, pruned by importance (Michel et al.)."""
    return run_experiment("pruning", settings, progress, **fields)


@verb(FFSettings)
def learn_ff(*, settings: FFSettings | None = None, progress=None, **fields) -> LearnResult:
    """Routing alone versus routing plus feed-forward layers at the same parameter budget."""
    return run_experiment("ff", settings, progress, **fields)


@verb(CrossSettings)
def learn_crossattn(*, settings: CrossSettings | None = None, progress=None, **fields) -> LearnResult:
    """An encoder-decoder: heads pruned per attention mode, cross-attention maps swapped."""
    return run_experiment("crossattn", settings, progress, **fields)


__all__ = [
    "EXPERIMENTS",
    "Batch",
    "CrossSettings",
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
    "learn_crossattn",
    "learn_ff",
    "learn_induction",
    "learn_pruning",
    "learn_scale",
    "run_experiment",
    "train",
]
