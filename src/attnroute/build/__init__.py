"""build/: attention from its five stages, masks, positions, layers, caches, ProbSparse, probes."""

from .attend import IMPLS, attend, choose_impl
from .backends.common import UnsupportedRequest
from .convert import (combine_additive, from_additive, from_hf_2d, from_mha, to_additive, to_hf,
                      to_key_padding_mask, to_mha)
from .interventions import (Intervention, ReplaceOutput, SubstituteWeights, Temperature, UniformWeights,
                            ZeroHead)
from .kvcache import KVCache
from .layers import Block, FeedForward, MultiHeadAttention, TinyConfig, TinyTransformer
from .masks import (Mask, causal, document, from_hf, full, padding, predicate, prefix_lm, sliding_window,
                    window_from, window_to)
from .positions import (RoPE, LearnedPositions, SinusoidalPositions, apply_rope, half_split_to_interleaved,
                        interleaved_to_half_split, rope_frequencies, sinusoidal, sinusoidal_shift)
from .probes import CallbackProbe, KeyMass, Probe, RowStats
from .probsparse import probsparse_attend, probsparse_sizes
from .stages import aggregate, normalize, project, scale_and_mask, score
from .tolerance import TOLERANCE, assert_close_to_reference
from .trace import Trace, WeightBlock
