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

# How closely the circuit family's decomposition checks hold a model computed in a dtype (docs/precision.md):
# - "rounding": one operation's result against the same computed again, element by element and relative to
#   max(1, |element|) — finding a model's modules by the tensors they read and write (circuits' layout, the
#   norms' forms). float32: room for a different summation order; bfloat16 and float16: two roundings of the
#   dtype (2^-8, 2^-11 each; a residual add and the subtraction that reads a write back out of it). Measured: an
#   MLP's write read back from SmolLM2's bfloat16 stream misses by 7.7e-3 of the element, a wrong module by > 2.
# - "split": a sum of parts against the whole the model computed, relative to the whole's largest |value| (at
#   least 1) — a block's output against its input plus its writes, a stream against its senders' writes, q, k
#   and a score against their split. In half precision the model rounds every residual add to its dtype while the
#   parts are summed in float64, so the two differ by the dtype's rounding built up over the layers (measured on
#   SmolLM2's 30 layers and Gemma 3's 18: benchmarks/precision.py).
SPLIT_TOLERANCE = {
    torch.float64: {"rounding": 1e-4, "split": 1e-4},
    torch.float32: {"rounding": 1e-4, "split": 1e-4},
    torch.float16: {"rounding": 2e-3, "split": 1e-2},
    torch.bfloat16: {"rounding": 1.6e-2, "split": 5e-2},
}


def rounding(dtype: torch.dtype) -> float:
    """SPLIT_TOLERANCE's "rounding" for the dtype a tensor was computed in (integers are exact: float32's)."""
    return _of(dtype)["rounding"]


def split_tolerance(dtype: torch.dtype) -> float:
    """SPLIT_TOLERANCE's "split" for the dtype the model computed the whole in (integers are exact: float32's)."""
    return _of(dtype)["split"]


def _of(dtype: torch.dtype) -> dict:
    """A floating dtype with no stated tolerance (float8) is refused by name rather than given float32's."""
    if not dtype.is_floating_point:
        return SPLIT_TOLERANCE[torch.float32]
    if dtype not in SPLIT_TOLERANCE:
        raise ValueError(f"no tolerance is stated for {dtype}: expected one of {list(SPLIT_TOLERANCE)}")
    return SPLIT_TOLERANCE[dtype]


def max_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref.double()).abs().max()) if x.numel() else 0.0


def split_gap(parts: torch.Tensor, whole: torch.Tensor) -> tuple[float, bool]:
    """(the largest |parts − whole|, whether it is within the split tolerance of the dtype the model computed the
    whole in, relative to max(1, the whole's largest |value|)): the one check of every decomposition's sum."""
    gap = max_error(parts, whole)
    return gap, gap <= split_tolerance(whole.dtype) * max(1.0, float(whole.abs().max()))


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
