"""Backends: each computes the same attention and states what it holds in memory.

    common     what every backend receives: a resolved request
    reference  Python lists, fp64: the specification (small inputs)
    eager      the whole [B, H, Tq, Tk] matrix at once
    blocked    one block of query rows at a time (probes read each block)
    sdpa       torch's fused kernel, no weights
    fused      torch's fused CPU flash kernel with each row's log-sum-exp: statistics without n×n
    rows       the fused kernel for every row, the rows interventions touch recomputed through the stages

attend(impl=...) picks one by name; auto picks by what the request needs (engine/attend.py).
"""

__all__ = ["blocked", "eager", "reference", "sdpa"]
