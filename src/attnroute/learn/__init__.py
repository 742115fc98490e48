"""learn/: TinyTransformers trained from scratch on synthetic routing tasks, read with the engine's probes and stimuli.

induction   an induction circuit forms (phase change, head scores, ablation proof)
scale       the 1/√d_k scale: logit std at init, saturation, gradients, stalls
pruning     1–8 heads on a mixture of routes, pruned by importance (Michel et al.)
ff          routing alone versus routing plus feed-forward layers at the same budget
crossattn   an encoder-decoder: heads pruned per attention mode, cross-attention maps swapped
"""

from ..engine import InputError
from . import crossattn, feedforward, induction, pruning, scale
from .crossattn import CrossSettings
from .feedforward import FFSettings
from .induction import InductionSettings
from .pruning import PruneSettings
from .scale import ScaleSettings
from .tasks import Batch, LookupTask, MixtureTask, RepeatTask
from .train import History, TrainSettings, train

EXPERIMENTS = {
    "induction": (induction.run, InductionSettings),
    "scale": (scale.run, ScaleSettings),
    "pruning": (pruning.run, PruneSettings),
    "ff": (feedforward.run, FFSettings),
    "crossattn": (crossattn.run, CrossSettings),
}


def run_experiment(experiment: str, progress=None, **settings) -> dict:
    """Run one learn experiment by name with its settings' fields as keywords; the result dict
    (curves, verdict lines, summary) that `attnroute learn` writes as JSON.

        attnroute.run_experiment("induction", steps=900, positions="learned")
    """
    if experiment not in EXPERIMENTS:
        raise InputError(f"experiment must be one of {sorted(EXPERIMENTS)}, got {experiment!r}", field="experiment")
    fn, Settings = EXPERIMENTS[experiment]
    return fn(Settings(**settings), progress=progress)


__all__ = [
    "EXPERIMENTS",
    "Batch",
    "FFSettings",
    "History",
    "InductionSettings",
    "LookupTask",
    "MixtureTask",
    "PruneSettings",
    "RepeatTask",
    "ScaleSettings",
    "TrainSettings",
    "run_experiment",
    "train",
]
