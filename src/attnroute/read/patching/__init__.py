"""patching/: your question, your metric — activation patching, attribution and route-level effects.

metrics     metric(logits, batch) -> Tensor[B]; the built-ins by name
prompts     prompt pairs as token ids, checked (same length, single-token answers)
sites       the components and the interventions that record, tap and patch them
runs        the recorded clean / corrupt runs of one group of prompts; exact and estimated patching
patch       patch(): estimate, then exact settling, with per-prompt statistics
agreement   estimate against exact: Spearman, R², slope
"""

from .agreement import agreement
from .metrics import BUILT_IN as METRICS
from .patch import PatchResult, patch
from .route_attribution import RoutesResult, route_attribution

__all__ = ["METRICS", "PatchResult", "RoutesResult", "agreement", "patch", "route_attribution"]
