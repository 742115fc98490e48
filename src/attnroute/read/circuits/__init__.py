"""circuits/: which head feeds which through its queries, keys or values, and the smallest set of edges that
carries your behaviour — estimated for every edge at once, settled exactly.

    layout       where a model's stream is written and read (found by watching a forward, then checked)
    graph        senders, receivers and the edges between them
    nodes        edges by name: SENDER>RECEIVER
    stream       the stream inside one forward: senders' writes, receivers' inputs changed on request
    runs         one group of prompts: recorded runs, exact path patching, circuits run whole
    means        mean ablation's reference: writes and reads averaged over the clean prompts of a length
    sliced       a receiver's q, k or v from its own head's columns, where the channel is a plain projection
    headvjp      a receiver's gradient through its projection, one head's columns at a time
    products     the edges' scores from senders' deltas and receivers' gradients, a chunk at a time
    estimate     EAP and EAP-IG for every edge
    qkfix        AtP*'s QK fix for edges into a self-attention's queries and keys
    evaluate     a circuit run whole: the faithfulness curve (Curve) and evaluate_circuit() on any edge set
    settling     the settle rule over the edges: a band per receiving channel, each on its closer estimate
    circuit      circuit(): estimate, settle, the faithfulness curve
    path         path_patch(): one edge, exactly
    qk           a head's query and key split into the stream's components (norm scales frozen)
    postln       a post-LN model's stream split for why (every LayerNorm frozen at its σ)
    why_core     the split behind why(): one forward recorded at the head's attention call
    why          why(): a route's score as (query side × key side) pairs that add up to it
    composition  composition(): how strongly each head's output can feed each later head's q, k or v

Their speech variants (a pair of clips, a route over a clip) are read/speech's.
Definitions and the method: docs/circuits.md.
"""

from .circuit import CircuitResult, circuit
from .layout import CircuitUnsupported
from .path import PathPatchResult, path_patch
from .why import WhyResult, why

__all__ = ["CircuitResult", "CircuitUnsupported", "PathPatchResult", "WhyResult", "circuit", "path_patch", "why"]
