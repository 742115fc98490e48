"""patching/: activation patching and route attribution with your metric.

    runs               the runs behind a patching experiment, for one group of same-length prompts
    sites              where a patch goes: the engine interventions that record, tap and exchange activations
    patch              patch(): which heads (and which side of their routes) carry the difference
    direct             direct effects: what each head writes straight onto the answer's logit
    qkfix              AtP*'s QK fix for patching a query or a key
    routes             every single query→key route's first-order effect on your metric
    suffix             exact route knockouts that recompute only what a route can change
    route_attribution  route_attribution(): every route estimated, the top verified exactly
    sinks              attention sinks among the routes' keys, and the content routes ranked apart

Their speech variants (two clips, routes across streams) are read/speech's.

Each module imports read/'s floor, never another room (tests/test_floors.py).
"""

from .patch import PatchResult, patch
from .route_attribution import RoutesResult, route_attribution

__all__ = [
    "PatchResult",
    "RoutesResult",
    "patch",
    "route_attribution",
]
