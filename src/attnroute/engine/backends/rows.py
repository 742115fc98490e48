"""rows: torch's fused kernel for every row, then the rows the interventions touch recomputed through the stages.

A knockout of single routes (KnockoutEdges) changes only its query rows. Running the whole layer eagerly
for that holds [B, H, Tq, Tk] scores and costs several passes over them (5 s of a 22 s rerun at 4,096
tokens on 2 cores); here SDPA runs the layer untouched and only the touched rows go through the stages,
with the interventions, one block of rows at a time:

    out           = sdpa(q, k, v, mask)                   [B, H, Tq, Dv], no interventions
    out[:, :, r]  = stages(q[:, :, r], k, v, mask, ivs)   for each touched row r

Taken by impl='auto' (or asked for as impl='rows') only when every intervention names the rows it can
change (``Intervention.rows``), nothing reads the weights (no probes) and SDPA could run the untouched
request.
"""

from __future__ import annotations

import dataclasses

import torch

from ..stages import all_finite
from ..trace import Trace
from . import sdpa
from .blocked import rows_per_block, visible_span
from .common import Request, UnsupportedRequest
from .eager import attend_rows


def touched_rows(req: Request) -> list[int] | None:
    """The rows the interventions can change, when this backend can take the request; else None."""
    if not req.interventions or req.probes:
        return None
    B, H, Hkv, Tq, Tk, D, Dv = req.dims
    rows: set[int] = set()
    for iv in req.interventions:
        mine = iv.rows(Tq, Tk)
        if mine is None:
            return None
        rows.update(mine)
    if sdpa.why_not(untouched(req)) is not None:
        return None
    return sorted(rows)


def spans(rows: list[int], most: int) -> list[tuple[int, int]]:
    """Sorted rows as [q0, q1) runs of consecutive rows, none longer than ``most``: rows 3, 4, 5, 9 → (3, 6),
    (9, 10). Rows far apart never share a block (a block spanning them would recompute every row between)."""
    out: list[tuple[int, int]] = []
    for r in rows:
        if out and out[-1][1] == r and r - out[-1][0] < most:
            out[-1] = (out[-1][0], r + 1)
        else:
            out.append((r, r + 1))
    return out


def untouched(req: Request) -> Request:
    return dataclasses.replace(req, interventions=(), want_trace=False)


def run(req: Request) -> tuple[torch.Tensor, Trace | None]:
    rows = touched_rows(req)
    if rows is None:
        raise UnsupportedRequest(
            "impl='rows' needs interventions that name the rows they change (KnockoutEdges), no probes, and a "
            "request sdpa could run without them; use impl='eager' or 'blocked'"
        )
    B, H, Hkv, Tq, Tk, D, Dv = req.dims
    out, _ = sdpa.run(untouched(req))
    req.v_finite = all_finite(req.v)
    for q0, q1 in spans(rows, rows_per_block(B, H, Tk, req.block_size)):
        keep = req.keep_rows(q0, q1)
        kv0, kv1 = visible_span(keep, Tk)
        keep = None if keep is None else keep[..., kv0:kv1]
        out[:, :, q0:q1] = attend_rows(req, q0, q1, kv0, kv1, keep)[0].to(out.dtype)
    trace = Trace("rows", out=out, notes=[f"sdpa, then {len(rows)} touched row(s) through the stages"])
    return out, (trace if req.want_trace else None)
