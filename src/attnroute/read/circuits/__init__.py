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
"""

from .circuit import CircuitResult, circuit
from .layout import CircuitUnsupported
from .path import PathPatchResult, path_patch

__all__ = ["CircuitResult", "CircuitUnsupported", "PathPatchResult", "circuit", "path_patch"]
