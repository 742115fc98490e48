"""Backends: each computes the same attention and states what it holds in memory.

reference  Python lists, fp64: the specification (small inputs)
eager      the whole [B, H, Tq, Tk] matrix at once
blocked    one block of query rows at a time (probes read each block)
sdpa       torch's fused kernel, no weights
"""

__all__ = ["blocked", "eager", "reference", "sdpa"]
