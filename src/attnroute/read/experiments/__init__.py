"""experiments/: questions asked by intervening on routes of a real model.

    common    the model, loaded after the metric's tokens are checked; windows and heads checked
    knockout  cut a route (Geva et al. 2023)
    swap      run a prompt with another's maps
    needle    does long context dilute retrieval
    cross     knockout and swap across streams on a speech model

Each returns a typed result whose to_dict() is the command's JSON.
"""

from .cross import CrossError, CrossKnockoutResult, CrossSwapResult, cross_knockout, cross_swap
from .knockout import KnockoutError, KnockoutResult, knockout
from .needle import NeedleResult, needle
from .swap import SwapError, SwapResult, swap

__all__ = [
    "CrossError",
    "CrossKnockoutResult",
    "CrossSwapResult",
    "cross_knockout",
    "cross_swap",
    "KnockoutError",
    "KnockoutResult",
    "NeedleResult",
    "SwapError",
    "SwapResult",
    "knockout",
    "needle",
    "swap",
]
