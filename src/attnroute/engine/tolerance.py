"""Per-dtype tolerances, and flash-attention's rule for fast paths.

flash-attention's test rule (README, "Tests"): a fast path's max error against an fp64
reference may be at most twice that of a plain implementation in the same dtype (plus a
small floor for outputs that the plain path gets exactly). Absolute floors, for unit-scale
inputs and outputs (|out| ≲ 3):
"""

from __future__ import annotations

import torch

TOLERANCE = {
    torch.float64: 1e-10,
    torch.float32: 2e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}

# What a reading of a model computed in a dtype is worth against the same weights in float32 (docs/precision.md:
# measured on SmolLM2's 30 layers, where rounding builds up — 2.7e-2 of entropy in bfloat16 — and on tiny Llamas;
# tests/read/test_low_precision.py, tests/models/test_dtype.py). "weights": statistics of attention weights and
# scores in [0, 1] or nats (entropy, sink mass, head scores), absolute. "effects": a verb's metric differences
# (patching, ablation), relative to the largest |value| of the reading (at least 1). Sums are kept in float32.
READ_TOLERANCE = {
    torch.float32: {"weights": 1e-5, "effects": 1e-4},
    torch.float16: {"weights": 5e-3, "effects": 2e-2},
    torch.bfloat16: {"weights": 5e-2, "effects": 1e-1},
}


def max_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref.double()).abs().max()) if x.numel() else 0.0


def assert_close_to_reference(fast: torch.Tensor, plain: torch.Tensor, ref64: torch.Tensor, what: str = "") -> None:
    """fast and plain are outputs in the same low dtype; ref64 the fp64 truth."""
    floor = TOLERANCE[fast.dtype]
    err_fast, err_plain = max_error(fast, ref64), max_error(plain, ref64)
    limit = 2 * err_plain + floor
    if not err_fast <= limit:
        raise AssertionError(
            f"{what}: max error {err_fast:.3g} vs fp64 exceeds 2 × plain {fast.dtype} error "
            f"({err_plain:.3g}) + {floor:g}"
        )
