"""read/: real models through the engine — the transformers adapter, the run-time routing check,
stimuli, head statistics, roles, ablation effects, and the data the routing report shows.

Three tiers, each importing only those below it (tests/test_floors.py): the floor (the top-level modules
and ground/), the rooms (each imports the floor, never another room), and the compositions above them
(report.py, the speech wing, verbs.py).

    adapter        a transformers model's attention routed through the engine, for the length of a `with`
    hooks          hook lifetime in one home: module hooks added and removed together, outputs recorded
    verify         the run-time routing check: the routed model against its own eager attention
    study          one run object per verb: the checks before the weights, the model, ranks, checkpoint, shard
    stimuli        texts as token ids, the tokens every verb runs
    heads          read_heads(): where every head routes, its role and its effect (the three passes)
    textpass       pass 1 of a read: the text's statistics per head from the probes, block by block
    headtable      HeadTable: [L, H] statistics, roles and effects, with export
    effects        weight versus effect: a head ablated, measured and estimated
    roles          role labels from head statistics (names, rules, thresholds, colours)
    moments        mergeable running statistics (count, mean, variance)
    capture        every layer's weights of one text, kept for the page, the explorer and a map swap
    alignment      a speech model's cross-attention heads against the audio
    mode_ablation  heads pruned per attention mode of a speech model, scored by word error rate
    ground/        what the rooms share: metrics, prompts, positions, the settle rule, the process group,
                   checkpoints, statistics (its own docstring lists its modules)
    corpus/        room: a corpus read, streamed, merged over ranks, resumable
    experiments/   room: knockout, swap, needle
    patching/      room: patch, routes
    circuits/      room: circuit, path_patch, why, composition
    report         composition: the routing report's data (a text read, its weights, a corpus read)
    speech/        composition, the speech wing: every verb's variant for clips (its own docstring lists them)
    verbs          composition: circuit, path_patch and why, each sent once to its text room or the wing

Analysis only: numbers and data classes; no printing, no figures, no argparse. Models come through
attnroute.models (the one door), one floor down.
"""

from ..models import BUNDLED, LoadedModel, ModelLoadError, load
from .adapter import routed
from .capture import capture_weights
from .corpus import read_corpus
from .experiments import KnockoutResult, NeedleResult, SwapResult, knockout, needle, swap
from .heads import DEFAULT_TEXT, ReadError, read_heads
from .headtable import COLUMNS, OFFSET_BUCKETS, HeadTable
from .report import RoutingView, routing_view
from .roles import ROLES, Role
from .verify import RoutingMismatch, routing_check

__all__ = [
    "BUNDLED",
    "COLUMNS",
    "DEFAULT_TEXT",
    "OFFSET_BUCKETS",
    "ROLES",
    "HeadTable",
    "KnockoutResult",
    "LoadedModel",
    "ModelLoadError",
    "NeedleResult",
    "ReadError",
    "Role",
    "RoutingMismatch",
    "RoutingView",
    "SwapResult",
    "capture_weights",
    "knockout",
    "load",
    "needle",
    "read_corpus",
    "read_heads",
    "routed",
    "routing_check",
    "routing_view",
    "swap",
]
