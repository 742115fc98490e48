"""read/: real models through the engine — loading, the transformers adapter, stimuli, head
statistics, roles, ablation effects, and the data the routing report shows.

Analysis only: numbers and data classes; no printing, no figures, no argparse.
"""

from .adapter import routed
from .capture import RoutingView, capture_weights, routing_view
from .corpus_read import read_corpus
from .heads import DEFAULT_TEXT, ReadError, read_heads
from .headtable import COLUMNS, OFFSET_BUCKETS, HeadTable
from .knockout import knockout
from .mapswap import map_swap
from .models import BUNDLED, LoadedModel, ModelLoadError, load
from .needle import dilution
from .roles import ROLES, Role
from .verify import RoutingMismatch, routing_check

__all__ = [
    "BUNDLED",
    "COLUMNS",
    "DEFAULT_TEXT",
    "OFFSET_BUCKETS",
    "ROLES",
    "HeadTable",
    "LoadedModel",
    "ModelLoadError",
    "ReadError",
    "Role",
    "RoutingMismatch",
    "RoutingView",
    "capture_weights",
    "load",
    "dilution",
    "knockout",
    "map_swap",
    "read_corpus",
    "read_heads",
    "routed",
    "routing_check",
    "routing_view",
]
