"""read/: real models through the engine — the transformers adapter, the run-time routing check,
stimuli, head statistics, roles, ablation effects, and the data the routing report shows.

Three tiers, each importing only those below it (tests/test_floors.py):

    floor         the top-level modules — adapter, verify, stimuli, heads (the three passes), headtable,
                  effects, roles, moments, capture — and ground/, what the rooms share (metrics, prompts,
                  positions, the settle rule, the process group, checkpoints, statistics)
    rooms         corpus/ (a corpus read), experiments/ (knockout, swap, needle), patching/ (patch, routes):
                  each imports the floor, never another room
    composition   report.py: the routing report's data (a text read, its weights, a corpus read)

Analysis only: numbers and data classes; no printing, no figures, no argparse. Models are loaded by
attnroute.models, one floor down.
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
