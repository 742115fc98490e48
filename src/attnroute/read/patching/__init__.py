"""patching/: your question, your metric — activation patching, attribution and route-level effects.

sites              the components and the interventions that record, tap and patch them
runs               the recorded clean / corrupt runs of one group of prompts; exact and estimated patching
direct             direct effects (direct logit attribution) of every head
qkfix              AtP*'s QK fix: the estimate of a patched query or key, the softmax recomputed
patch              patch(): estimate, then exact settling, with per-prompt statistics
routes             the streaming probe of route attribution
route_attribution  route_attribution(): every query→key route's estimated effect, the top verified
speech             speech_patch(): every head of a speech model patched from a clean clip into a corrupted one
speech_routes      speech_routes(): route attribution on a clip, cross-attention routes (decoder row → frame)

What the rooms of read/ share — metrics, prompt pairs as tokens, positions, the settle rule, the
process group, checkpoints, statistics — is the ground floor, read/ground/.
"""

from .patch import PatchResult, patch
from .route_attribution import RoutesResult, route_attribution
from .speech import SpeechPatchResult, speech_patch
from .speech_routes import SpeechRoutesResult, speech_routes

__all__ = [
    "PatchResult",
    "RoutesResult",
    "SpeechPatchResult",
    "SpeechRoutesResult",
    "patch",
    "route_attribution",
    "speech_patch",
    "speech_routes",
]
