"""engine/: attention from its five stages, masks, positions, layers, caches, ProbSparse, probes.

The bottom floor: it imports torch and nothing else of attnroute's.
"""

from .attend import IMPLS, attend, choose_impl
from .backends.common import UnsupportedRequest
from .convert import (
    combine_additive,
    from_additive,
    from_hf_2d,
    from_mha,
    to_additive,
    to_hf,
    to_key_padding_mask,
    to_mha,
)
from .errors import InputError, InputTypeError
from .fused_probes import FusedKeyMass, FusedRowStats
from .interventions import (
    HeadGate,
    Intervention,
    KnockoutEdges,
    ReplaceOutput,
    SubstituteWeights,
    Temperature,
    UniformWeights,
    ZeroHead,
)
from .kvcache import KVCache
from .layers import Block, FeedForward, MultiHeadAttention, TinyConfig, TinyTransformer
from .masks import (
    Mask,
    causal,
    document,
    from_hf,
    full,
    padding,
    predicate,
    prefix_lm,
    sliding_window,
    window_from,
    window_to,
)
from .positions import (
    LearnedPositions,
    RoPE,
    SinusoidalPositions,
    apply_rope,
    half_split_to_interleaved,
    interleaved_to_half_split,
    rope_frequencies,
    sinusoidal,
    sinusoidal_shift,
)
from .probes import CallbackProbe, Diagonals, KeyMass, KeyVectors, PerLayer, Probe, RowStats
from .probsparse import probsparse_attend, probsparse_sizes
from .stages import aggregate, normalize, project, scale_and_mask, score
from .tolerance import TOLERANCE, assert_close_to_reference
from .trace import Trace, WeightBlock

__all__ = [
    # one entry point and its backends
    "IMPLS",
    "attend",
    "choose_impl",
    "UnsupportedRequest",
    # refusals
    "InputError",
    "InputTypeError",
    # the five stages and what they record
    "project",
    "score",
    "scale_and_mask",
    "normalize",
    "aggregate",
    "Trace",
    "WeightBlock",
    # masks (True = may attend) and conversions at the edges
    "Mask",
    "causal",
    "document",
    "from_hf",
    "full",
    "padding",
    "predicate",
    "prefix_lm",
    "sliding_window",
    "window_from",
    "window_to",
    "combine_additive",
    "from_additive",
    "from_hf_2d",
    "from_mha",
    "to_additive",
    "to_hf",
    "to_key_padding_mask",
    "to_mha",
    # probes and interventions
    "Probe",
    "RowStats",
    "KeyMass",
    "CallbackProbe",
    "PerLayer",
    "Diagonals",
    "KeyVectors",
    "FusedRowStats",
    "FusedKeyMass",
    "HeadGate",
    "Intervention",
    "ZeroHead",
    "ReplaceOutput",
    "UniformWeights",
    "Temperature",
    "SubstituteWeights",
    "KnockoutEdges",
    # positions
    "sinusoidal",
    "sinusoidal_shift",
    "LearnedPositions",
    "SinusoidalPositions",
    "RoPE",
    "apply_rope",
    "rope_frequencies",
    "interleaved_to_half_split",
    "half_split_to_interleaved",
    # layers and caches
    "MultiHeadAttention",
    "FeedForward",
    "Block",
    "TinyConfig",
    "TinyTransformer",
    "KVCache",
    # sparse variant and tolerances
    "probsparse_attend",
    "probsparse_sizes",
    "TOLERANCE",
    "assert_close_to_reference",
]
