"""read/: real models through the engine — the transformers adapter, the run-time routing check,
stimuli, head statistics, roles, ablation effects, and the data the routing report shows.

    core          adapter, verify, stimuli, heads (the three passes), headtable, effects, roles, moments,
                  capture (the report's view)
    corpus/       a corpus read: documents, accumulator, checkpoint, distributed, significance
    experiments/  knockout, swap, needle

Analysis only: numbers and data classes; no printing, no figures, no argparse. Models are loaded by
attnroute.models, one floor down.
"""

from ..models import BUNDLED, LoadedModel, ModelLoadError, load
from .adapter import routed
from .capture import RoutingView, capture_weights, routing_view
from .corpus import read_corpus
from .experiments import KnockoutResult, NeedleResult, SwapResult, knockout, needle, swap
from .heads import DEFAULT_TEXT, ReadError, read_heads
from .headtable import COLUMNS, OFFSET_BUCKETS, HeadTable
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
