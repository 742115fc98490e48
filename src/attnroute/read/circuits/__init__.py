"""circuits/: which head feeds which through its queries, keys or values, and the smallest set of edges that
carries your behaviour — estimated for every edge at once, settled exactly.

layout    where a model's stream is written and read (found by watching a forward, then checked)
graph     senders, receivers and the edges between them
nodes     edges by name: SENDER>RECEIVER
stream    the stream inside one forward: senders' writes, receivers' inputs changed on request
runs      one group of prompts: recorded runs, exact path patching, circuits run whole
estimate  EAP and EAP-IG for every edge
circuit   circuit(): estimate, settle, the faithfulness curve
path      path_patch(): one edge, exactly
qk        a head's query and key split into the stream's components (norm scales frozen)
why       why(): a route's score as (query side × key side) pairs that add up to it
"""

from .circuit import CircuitResult, circuit
from .layout import CircuitUnsupported
from .path import PathPatchResult, path_patch
from .why import WhyResult, why

__all__ = ["CircuitResult", "CircuitUnsupported", "PathPatchResult", "WhyResult", "circuit", "path_patch", "why"]
