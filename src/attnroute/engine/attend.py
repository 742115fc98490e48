"""attnroute.attend: one entry point, explicit backends, no silent fallback.

    out = attend(q, k, v, mask=causal())                    # q [B,H,Tq,D], k/v [B,Hkv,Tk,D|Dv]
    out, trace = attend(q, k, v, impl="eager", return_trace=True)

impl      holds in memory                              probes/interventions
reference Python lists of every score (small inputs)   no
eager     scores and weights [B, H, Tq, Tk]            yes (one block: all rows)
blocked   one block of rows [B, H, bq, kspan]          yes (block by block)
sdpa      torch's fused kernel; no weights             no (raises UnsupportedRequest)
fused     the fused flash kernel with each row's lse;   fused probes only (FusedRowStats, FusedKeyMass):
          statistics in the same call: [V | K | c]      entropy, masses, named weights; no n×n
rows      sdpa, then the stages on the rows   interventions that name the rows they change
          the interventions change             (KnockoutEdges); no probes
auto      sdpa when nothing needs weights; rows when the interventions name their rows; else
          eager when its scores fit memory_budget, else blocked. The choice and its reason are in
          trace.impl / trace.reason and returned by choose_impl().
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, overload

import torch
from torch import Tensor

from .backends import blocked, eager, fused, reference, rows, sdpa
from .backends.common import Request, UnsupportedRequest
from .errors import InputError, InputTypeError
from .interventions import Intervention, apply_inputs
from .masks import Mask, TensorMask
from .probes import Probe
from .stages import all_finite, default_scale
from .trace import Trace
from .validate import validate_bias, validate_keep, validate_qkv, validate_sinks

BACKENDS = {
    "reference": reference.run,
    "eager": eager.run,
    "blocked": blocked.run,
    "sdpa": sdpa.run,
    "fused": fused.run,
    "rows": rows.run,
}
IMPLS = ("auto",) + tuple(BACKENDS)


def _as_mask(mask, B, H, Tq, Tk) -> Mask | None:
    if mask is None or isinstance(mask, Mask):
        return mask
    if isinstance(mask, torch.Tensor):
        validate_keep(mask, B, H, Tq, Tk)
        return TensorMask(mask)
    raise InputTypeError(
        f"mask must be None, an attnroute Mask or a bool tensor (True = may attend), got {type(mask).__name__}"
    )


def choose_impl(req: Request) -> tuple[str, str]:
    """The backend impl='auto' runs for this request, and why."""
    if sdpa.why_not(req) is None:
        return "sdpa", "nothing needs the weights: torch's fused kernel"
    if (touched := rows.touched_rows(req)) is not None:
        return "rows", f"the interventions change {len(touched)} row(s) only: sdpa for the others"
    B, H, Hkv, Tq, Tk, D, Dv = req.dims
    budget = eager.DEFAULT_MEMORY_BUDGET if req.memory_budget is None else req.memory_budget
    if eager.score_matrix_bytes(B, H, Tq, Tk) <= budget:
        return "eager", "weights needed and the score matrix fits memory_budget"
    return "blocked", "weights needed and the score matrix exceeds memory_budget"


@overload
def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Mask | Tensor | None = None,
    *,
    scale: float | None = None,
    impl: str = "auto",
    probes: Sequence[Probe] = (),
    interventions: Sequence[Intervention] = (),
    softcap: float | None = None,
    bias: Tensor | None = None,
    sinks: Tensor | None = None,
    layer: int | None = None,
    return_trace: Literal[False] = False,
    memory_budget: int | None = None,
    block_size: int | None = None,
) -> Tensor: ...


@overload
def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Mask | Tensor | None = None,
    *,
    scale: float | None = None,
    impl: str = "auto",
    probes: Sequence[Probe] = (),
    interventions: Sequence[Intervention] = (),
    softcap: float | None = None,
    bias: Tensor | None = None,
    sinks: Tensor | None = None,
    layer: int | None = None,
    return_trace: Literal[True],
    memory_budget: int | None = None,
    block_size: int | None = None,
) -> tuple[Tensor, Trace]: ...


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Mask | Tensor | None = None,
    *,
    scale: float | None = None,
    impl: str = "auto",
    probes: Sequence[Probe] = (),
    interventions: Sequence[Intervention] = (),
    softcap: float | None = None,
    bias: Tensor | None = None,
    sinks: Tensor | None = None,
    layer: int | None = None,
    return_trace: bool = False,
    memory_budget: int | None = None,
    block_size: int | None = None,
) -> Tensor | tuple[Tensor, Trace]:
    """softmax(q·kᵀ·scale, masked) · v, through the backend ``impl`` names.

    Shapes::

        q     [B, H,   Tq, D]     queries; H = G · Hkv query heads
        k     [B, Hkv, Tk, D]     keys; query heads g·G … (g+1)·G − 1 read kv head g
        v     [B, Hkv, Tk, Dv]    values
        mask  broadcastable to [B, H, Tq, Tk], True = may attend; or a Mask; or None (all visible)
        out   [B, H,   Tq, Dv]

        bias  float, broadcastable to [B, H, Tq, Tk]: added to the scaled (and soft-capped) scores
              before masking — T5's relative position bias, ALiBi
        sinks float [H]: one logit per query head in the softmax denominator (gpt-oss); the sink
              takes mass and carries no value, so a row's weights sum to 1 − p_sink

    scale: defaults to 1/√D. softcap: cap·tanh(s/cap) before masking; None and 0 both mean none.
    probes read the weights block by block; interventions edit q/k/v, scores, weights or head outputs
    (both need impl "eager" or "blocked"; "auto" picks one, and an intervention for another layer is not
    counted). layer: passed to probes and interventions. return_trace: also return a Trace (scores,
    weights, lse when the backend holds them, and which backend ran and why). memory_budget: bytes
    eager's score matrix may take (auto switches to blocked above it). block_size: query rows per block for blocked.
    A row that may attend to nothing returns zeros. Bad input raises InputError.
    """
    if impl not in IMPLS:
        raise InputError(f"impl must be one of {IMPLS}, got {impl!r}")
    B, H, Hkv, Tq, Tk, D, Dv = validate_qkv(q, k, v)
    # an intervention for another layer changes nothing here: left out, so "auto" may take the fused kernel
    # on every layer a knockout does not touch (a rerun from a cut route is then one eager layer, not all)
    interventions = [iv for iv in interventions if iv.applies(layer)]
    if interventions:  # edits of q, k, v come first: every backend that takes interventions sees them
        q, k, v = apply_inputs(interventions, q, k, v, layer)
        validate_qkv(q, k, v)
    if scale is not None and not math.isfinite(float(scale)):
        raise InputError(f"scale must be a finite number, got {scale}", field="scale")
    req = Request(
        q,
        k,
        v,
        _as_mask(mask, B, H, Tq, Tk),
        default_scale(D) if scale is None else float(scale),
        softcap=softcap or None,
        bias=validate_bias(bias, B, H, Tq, Tk),
        sinks=validate_sinks(sinks, H),
        probes=tuple(probes),
        interventions=tuple(interventions),
        layer=layer,
        want_trace=return_trace,
        memory_budget=memory_budget,
        block_size=block_size,
    )
    reason = "asked for by name"
    if impl == "auto":
        impl, reason = choose_impl(req)
    if Tq == 0 or Tk == 0:
        out, trace = q.new_zeros(B, H, Tq, Dv), Trace(impl, notes=["empty query or key set"])
    else:
        out, trace = BACKENDS[impl](req)
    _refuse_overflow(out, q, k, v, layer, impl)
    if not return_trace:
        return out
    trace = trace or Trace(impl, out=out)
    trace.impl, trace.reason = impl, reason
    return out, trace


def _refuse_overflow(out: Tensor, q: Tensor, k: Tensor, v: Tensor, layer: int | None, impl: str) -> None:
    """float16 holds at most 65,504: a q·k past it is inf before the scale, and its row's weights NaN. A fused
    kernel (torch's SDPA on the CPU, flash-attention) accumulates the scores in float32 and does not overflow, so
    a model that runs fine in float16 would be read as NaN — refused by name (Gemma 3's head dim 256 is the
    known case). One reduction of the output, and only in float16: bfloat16 has float32's range."""
    if q.dtype != torch.float16 or all_finite(out) or not all_finite(q, k, v):
        return
    where = "" if layer is None else f"layer {layer}: "
    raise InputError(
        f"{where}q·k overflows float16 (past 65,504) in the {impl} stages, so the weights would be NaN where the "
        "model's fused kernel computes its scores in float32; read this model in bfloat16 or float32",
        field="dtype",
    )


__all__ = ["attend", "choose_impl", "IMPLS", "UnsupportedRequest"]
