"""blocked: walks the queries in blocks of rows; holds one block's scores [B, H, bq, kspan] at a time.

For each block only the key columns some row of the block may see are visited (the span from
the first to the last visible key), so a causal block skips the future and a sliding window
skips the distant past. Probes receive each block; the full matrix never exists.
"""

from __future__ import annotations

import torch

from ..errors import InputError
from ..stages import all_finite
from ..trace import Trace
from ..validate import as_int
from .common import Request
from .eager import attend_rows

BLOCK_BYTES = 16 << 20  # one block's fp32 scores; measured best at 4096 (128 rows) and 8192 (64 rows), H=8


def rows_per_block(B: int, H: int, Tk: int, block_size: int | None) -> int:
    if block_size is not None:
        block_size = as_int(block_size, "block_size")
        if block_size < 1:
            raise InputError(f"block_size must be >= 1, got {block_size}")
        return block_size
    return int(max(16, min(1024, BLOCK_BYTES // max(1, B * H * Tk * 4))))


def visible_span(keep: torch.Tensor | None, Tk: int) -> tuple[int, int]:
    """[kv0, kv1) covering every key some row of the block may see (at least one column)."""
    if keep is None:
        return 0, Tk
    cols = keep.reshape(-1, keep.shape[-1]).any(dim=0)  # (Tk,): one reduction over b, h and rows
    idx = torch.nonzero(cols).flatten()
    if idx.numel() == 0:
        return 0, min(1, Tk)
    return int(idx[0]), int(idx[-1]) + 1


def run(req: Request) -> tuple[torch.Tensor, Trace | None]:
    B, H, Hkv, Tq, Tk, D, Dv = req.dims
    bq = rows_per_block(B, H, Tk, req.block_size)
    req.v_finite = all_finite(req.v)  # once, not once per block
    outs = []
    for q0 in range(0, Tq, bq):
        q1 = min(Tq, q0 + bq)
        keep = req.keep_rows(q0, q1)  # (b?, h?, bq, Tk)
        kv0, kv1 = visible_span(keep, Tk)
        keep = None if keep is None else keep[..., kv0:kv1]
        out, _, _ = attend_rows(req, q0, q1, kv0, kv1, keep)
        outs.append(out)
    out = torch.cat(outs, dim=2)  # (B, H, Tq, Dv)
    trace = Trace("blocked", out=out, notes=[f"{bq} query rows per block"]) if req.want_trace else None
    return out, trace
