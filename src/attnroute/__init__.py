"""attnroute: transformer attention as routing.

Build attention from its five stages, check any implementation for the bugs that ship, read
how a real model routes a text, cost what routing takes, and show it.
"""

from .build import *  # noqa: F401,F403  (the public surface is pinned by tests/test_namespace.py)

from . import learn as _learn_package  # noqa: F401  (as for read: `learn` below is the function)
from . import read as _read_package  # noqa: F401  (bind the package first, so `read` below is the function)
from .check.report import CheckReport, check
from .learn import run as learn
from .read.adapter import routed as read_routed
from .read.headtable import HeadTable
from .read.heads import read
from .read.models import load as load_model

__version__ = "0.1.0"

__all__ = sorted(
    name for name in (
        "attend choose_impl IMPLS UnsupportedRequest "
        "Mask causal sliding_window window_from window_to padding from_hf document prefix_lm predicate full "
        "to_mha from_mha to_key_padding_mask to_hf from_hf_2d to_additive from_additive combine_additive "
        "project score scale_and_mask normalize aggregate Trace WeightBlock "
        "Probe RowStats KeyMass CallbackProbe "
        "Intervention ZeroHead ReplaceOutput UniformWeights Temperature SubstituteWeights "
        "sinusoidal sinusoidal_shift LearnedPositions SinusoidalPositions RoPE apply_rope rope_frequencies "
        "interleaved_to_half_split half_split_to_interleaved "
        "MultiHeadAttention FeedForward Block TinyConfig TinyTransformer KVCache "
        "probsparse_attend probsparse_sizes TOLERANCE assert_close_to_reference "
        "read read_routed HeadTable load_model check CheckReport learn"
    ).split()
)
