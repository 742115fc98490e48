"""experiments/: questions asked by intervening on routes of a real model.

    common    the model, loaded after the metric's tokens are checked; windows and heads checked
    knockout  cut a route (Geva et al. 2023)
    swap      run a prompt with another's maps
    needle    does long context dilute retrieval

Each returns a typed result whose to_dict() is the command's JSON. Knockout and swap across a speech
model's streams are read/speech's.
"""

from .knockout import KnockoutError, KnockoutResult, knockout
from .needle import NeedleResult, needle
from .swap import SwapError, SwapResult, swap

__all__ = [
    "KnockoutError",
    "KnockoutResult",
    "NeedleResult",
    "SwapError",
    "SwapResult",
    "knockout",
    "needle",
    "swap",
]
