"""Experiments on a real model, each a question asked by intervening on routes: knockout (cut a route),
swap (run a prompt with another's maps), needle (does long context dilute retrieval)."""

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
