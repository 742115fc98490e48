"""reference: plain Python lists and floats, written to be read. The oracle for small inputs.

Holds everything as Python objects (≈ 100× the bytes of a tensor), so it refuses inputs with
more than REFERENCE_LIMIT score entries. Arithmetic is Python float (fp64).
"""

from __future__ import annotations

import math

import torch

from ..trace import Trace
from .common import Request, UnsupportedRequest

REFERENCE_LIMIT = 2_000_000  # B·H·Tq·Tk·D multiply-adds


def run(req: Request) -> tuple[torch.Tensor, Trace | None]:
    if torch.is_grad_enabled() and any(t.requires_grad for t in (req.q, req.k, req.v)):
        raise UnsupportedRequest(
            "reference computes in Python floats and carries no gradients; use impl='eager' "
            "for autograd (or torch.no_grad() to compare values)"
        )
    if req.probes or req.interventions:
        raise UnsupportedRequest("reference is the specification and runs no probes or interventions; use 'eager'")
    B, H, Hkv, Tq, Tk, D, Dv = req.dims
    if B * H * Tq * Tk * max(D, Dv) > REFERENCE_LIMIT:
        raise UnsupportedRequest(f"reference is for small inputs (≤ {REFERENCE_LIMIT:,} multiply-adds); use 'eager'")
    G = H // Hkv
    q, k, v = req.q.double().tolist(), req.k.double().tolist(), req.v.double().tolist()
    keep = req.keep_rows(0, Tq)
    keep = None if keep is None else keep.expand(B, H, Tq, Tk).tolist()
    bias = None if req.bias is None else req.bias.double().expand(B, H, Tq, Tk).tolist()
    sinks = None if req.sinks is None else req.sinks.double().tolist()
    out = [[[[0.0] * Dv for _ in range(Tq)] for _ in range(H)] for _ in range(B)]
    weights = [[[[0.0] * Tk for _ in range(Tq)] for _ in range(H)] for _ in range(B)]
    for b in range(B):
        for h in range(H):
            g = h // G  # query head h reads kv head h // G (repeat_interleave order)
            for i in range(Tq):
                keep_i = keep[b][h][i] if keep else [True] * Tk
                bias_i = bias[b][h][i] if bias else [0.0] * Tk
                row = _row(q[b][h][i], k[b][g], v[b][g], keep_i, bias_i, sinks[h] if sinks else None, req)
                weights[b][h][i], out[b][h][i] = row
    out_t = torch.tensor(out, dtype=torch.float64).to(req.q.dtype)
    trace = (
        Trace("reference", weights=torch.tensor(weights, dtype=torch.float64), out=out_t) if req.want_trace else None
    )
    return out_t, trace


def _row(q_i, keys, values, keep_i, bias_i, sink, req):
    """One query row: score every visible key (scale, soft-cap, add the bias), softmax over them and
    the head's sink logit if it has one (the sink takes mass and carries no value), average the values."""
    visible = [j for j, ok in enumerate(keep_i) if ok]
    Tk, Dv = len(keys), len(values[0]) if values else 0
    w = [0.0] * Tk
    if not visible:
        return w, [0.0] * Dv  # a row that may attend to nothing returns zeros
    s = {j: sum(a * b for a, b in zip(q_i, keys[j])) * req.scale for j in visible}
    if req.softcap:
        s = {j: req.softcap * math.tanh(x / req.softcap) for j, x in s.items()}
    s = {j: x + bias_i[j] for j, x in s.items()}
    m = max(list(s.values()) + ([sink] if sink is not None else []))
    e = {j: math.exp(x - m) for j, x in s.items()}
    z = sum(e.values()) + (math.exp(sink - m) if sink is not None else 0.0)
    for j in visible:
        w[j] = e[j] / z
    out = [sum(w[j] * values[j][d] for j in visible) for d in range(Dv)]
    return w, out
