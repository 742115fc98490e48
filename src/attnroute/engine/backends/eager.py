"""eager: materializes scores and weights for all rows at once ([B, H, Tq, Tk], several copies).

The plain implementation: what transformers' eager_attention_forward does, with a safe softmax.
It refuses a request whose score matrix exceeds ``memory_budget`` and names ``blocked``.
"""

from __future__ import annotations

import torch

from .. import interventions as iv
from ..stages import aggregate, normalize, normalize_with_sinks, scale_and_mask, score
from ..trace import Trace, WeightBlock
from .common import Request

DEFAULT_MEMORY_BUDGET = 1 << 30  # bytes for one [B, H, Tq, Tk] fp32 score matrix


def score_matrix_bytes(B: int, H: int, Tq: int, Tk: int, itemsize: int = 4) -> int:
    return B * H * Tq * Tk * itemsize


def attend_rows(req: Request, q0: int, q1: int, kv0: int, kv1: int, keep: torch.Tensor | None):
    """Run the stages for query rows [q0, q1) against keys [kv0, kv1).

    Returns (out [B, H, q1-q0, Dv], block with masked_scores/weights/lse, raw scores).
    """
    B, H, Hkv, Tq, Tk, D, Dv = req.dims
    q = req.q[:, :, q0:q1]  # (B, H, bq, D)
    k = req.k[:, :, kv0:kv1]  # (B, Hkv, kspan, D)
    v = req.v[:, :, kv0:kv1]  # (B, Hkv, kspan, Dv)
    block = WeightBlock(q0, q1, kv0, kv1, Tq, Tk, keep, layer=req.layer)
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad)
    bias = req.bias_rows(q0, q1, kv0, kv1)
    if req.want_trace or needs_grad:  # keep the raw scores: the trace shows them, autograd needs them
        scores = score(q, k)  # (B, H, bq, kspan)
        masked = scale_and_mask(scores, req.scale, keep, req.softcap, bias=bias)
    else:  # scale the [bq, D] queries instead of the [bq, kspan] scores, and reuse the scores' memory
        scores = score(q * req.scale, k)  # (B, H, bq, kspan), already scaled
        masked = scale_and_mask(scores, 1.0, keep, req.softcap, inplace=True, bias=bias)
    masked = iv.apply_scores(req.interventions, masked, block)
    want_lse = req.want_trace or any(getattr(p, "needs_lse", False) for p in req.probes)
    if req.sinks is not None:
        weights, lse, block.sink_mass = normalize_with_sinks(masked, req.sinks)
    else:
        # an intervention may have cut every key of a row: then find empty rows from the scores themselves
        weights, lse = normalize(masked, with_lse=want_lse, keep=None if req.interventions else keep)
    edited = iv.apply_weights(req.interventions, weights, block)
    block.weights_edited, weights = edited is not weights, edited
    block.masked_scores, block.weights, block.lse = masked, weights, lse
    for probe in req.probes:
        probe.update(block)
    out = aggregate(weights, v, req.v_finite)  # (B, H, bq, Dv)
    out = iv.apply_out(req.interventions, out, q0, q1, req.layer)
    return out, block, scores


def run(req: Request) -> tuple[torch.Tensor, Trace | None]:
    B, H, Hkv, Tq, Tk, D, Dv = req.dims
    budget = DEFAULT_MEMORY_BUDGET if req.memory_budget is None else req.memory_budget
    need = score_matrix_bytes(B, H, Tq, Tk)
    if need > budget:
        raise MemoryError(
            f"eager would hold a [B, H, Tq, Tk] = [{B}, {H}, {Tq}, {Tk}] score matrix of {need / 2**30:.2f} GiB "
            f"(several copies), over memory_budget={budget / 2**30:.2f} GiB; use impl='blocked', which holds one "
            "block of rows at a time, or raise memory_budget"
        )
    out, block, scores = attend_rows(req, 0, Tq, 0, Tk, req.keep_rows(0, Tq))
    trace = None
    if req.want_trace:
        trace = Trace(
            "eager", scores=scores, masked_scores=block.masked_scores, weights=block.weights, lse=block.lse, out=out
        )
    return out, trace
