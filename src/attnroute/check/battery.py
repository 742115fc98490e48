"""The audit battery: each check a small function (masks.py, scale.py, numerics.py) run by the harness
(harness.py) in fp32, then in fp16 and bf16; ``run_check`` turns one into an outcome."""

from __future__ import annotations

import torch

from .conventions import TargetFailed, Unsupported
from .decode import check_kv_decode
from .harness import RAISED, TOL, Ctx, dtype_suffix, inputs
from .masks import (
    check_batch_independence,
    check_causal,
    check_decode_alignment,
    check_document,
    check_empty_rows,
    check_grouped_heads,
    check_masked_keys,
    check_masked_values,
    check_padding,
    check_q_longer_than_k,
    check_sliding_window,
)
from .numerics import check_normalization_axis, check_overflow, check_sentinel_overrun
from .outcome import CheckResult
from .scale import check_scale, check_scale_dv

BASE = {
    "scale": check_scale,  # first: its temperature is the reference's for every mask check
    "scale_dv": check_scale_dv,
    "normalization_axis": check_normalization_axis,
    "causal": check_causal,
    "padding_right": lambda c, dtype: check_padding(c, dtype, "right"),
    "padding_left": lambda c, dtype: check_padding(c, dtype, "left"),
    "batch_independence": check_batch_independence,
    "decode_alignment": check_decode_alignment,
    "q_longer_than_k": check_q_longer_than_k,
    "sliding_window": check_sliding_window,
    "kv_decode": check_kv_decode,
    "document": check_document,
    "grouped_heads": check_grouped_heads,
    "empty_rows": check_empty_rows,
    "masked_keys": check_masked_keys,
    "masked_values": check_masked_values,
    "sentinel_overrun": check_sentinel_overrun,
    "overflow": check_overflow,
}
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# every check in fp32, then everything again in fp16 and bf16 (a sentinel that overflows in low
# precision, or a masked_fill value fp16 cannot hold, shows up there)
CHECKS = {f"{name}{dtype_suffix(dt)}": (fn, dt) for dt in DTYPES for name, fn in BASE.items()}


def run_check(ctx: Ctx, name: str) -> CheckResult:
    """One check as an outcome: Unsupported -> n/a; the target raising, hanging or returning the wrong
    shape -> fail, naming what happened; a dtype that crashes where fp32 ran is therefore a fail."""
    fn, dtype = CHECKS[name]
    try:
        with torch.no_grad():
            result = fn(ctx, dtype)
    except Unsupported as e:
        result = CheckResult.na(
            name, f"the target cannot express this case: {e}" if str(e) else "the target cannot express this case"
        )
    except TargetFailed as e:
        result = CheckResult.fail(name, f"the target {e}" if not str(e).startswith("not called") else str(e))
    result.name = name
    return result


__all__ = ["BASE", "CHECKS", "RAISED", "Ctx", "TOL", "inputs", "run_check"]
