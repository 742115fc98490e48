"""The mask checks: causal, padding on either side, batch independence, decoding with a cache, Tq > Tk,
sliding windows, documents, grouped heads, rows that see nothing, and garbage behind the mask. Each is
judged on several shapes (batch 1 and > 1, odd head counts, an odd B × H, Tq = 1 and 1 < Tq < Tk)."""

from __future__ import annotations

import math

import torch

from ..engine import causal, document, padding, sliding_window
from .diagnose import tiled_heads, window_hint
from .harness import BIG_FINITE, TOL, case_inputs, compare, future, over_shapes, shape_label
from .outcome import CheckResult, Outcome

CAUSAL_SHAPES = ((2, 2, 8), (1, 3, 7), (3, 3, 8))  # (B, H, T): batch 1, odd heads, an odd B × H (9)


def check_causal(ctx, dtype):
    def case(B, H, T, seed):
        q, k, v = case_inputs(ctx, B=B, H=H, Tq=T, Tk=T, dtype=dtype, seed=seed)
        return lambda: compare(ctx, "causal", q, k, v, causal().materialize(B, 1, T, T), future, causal_case=True)

    return over_shapes(
        "causal", [(shape_label(B, H, T, T), case(B, H, T, 1 + n)) for n, (B, H, T) in enumerate(CAUSAL_SHAPES)]
    )


def _padding_reason(lengths, side, Tk):
    def why(b, i, j):
        pad = j >= lengths[b] if side == "right" else j < Tk - lengths[b]
        return "a padding position" if pad else "a future position"

    return why


def check_padding(ctx, dtype, side):
    def case(lengths, H, seed):
        B = len(lengths)
        q, k, v = case_inputs(ctx, B=B, H=H, dtype=dtype, seed=seed)
        keep = padding(lengths, Tk=8, side=side)
        if (side == "left" and ctx.mask_family != "bidirectional") or ctx.causal_only:  # decoder-style: causal too
            keep = keep & causal()
        keep = keep.materialize(B, 1, 8, 8)
        real = padding(lengths, Tk=8, side=side).materialize(B, 1, 8, 8)[:, 0, 0]  # (B, Tq) rows that are tokens
        rows = real[:, None, :, None]  # padded query rows are judged by empty_rows
        why = _padding_reason(lengths, side, 8)
        return lambda: compare(ctx, f"padding_{side}", q, k, v, keep, why, rows=rows)

    cases = [([8, 5, 3], 2, 2), ([8, 5, 3], 3, 22), ([6], 3, 23)]  # and an odd B × H (9), batch 1 with padding
    return over_shapes(f"padding_{side}", [(shape_label(len(n), H, 8, 8), case(n, H, s)) for n, H, s in cases])


def check_batch_independence(ctx, dtype):
    lengths = [8, 5, 3]
    q, k, v = case_inputs(ctx, B=3, seed=3, dtype=dtype)
    keep = padding(lengths, Tk=8)
    if ctx.causal_only:
        keep = keep & causal()
    keep = keep.materialize(3, 1, 8, 8)
    tol = TOL[dtype]
    batched = ctx.weights(q, k, v, keep)
    problems = []
    for b, n in enumerate(lengths):
        alone = ctx.weights(q[b : b + 1, :, :n], k[b : b + 1, :, :n], v[b : b + 1, :, :n, :], ctx.base_keep(1, n, n))
        diff = (batched[b : b + 1, :, :n, :n] - alone).abs().max()
        if float(diff) > tol:
            problems.append(f"example {b} alone differs from itself in the batch by {float(diff):.3g}")
    k2, q2 = k.clone(), q.clone()
    k2[1, :, 5:] = (torch.randn(k2[1, :, 5:].shape) * 3).to(dtype)
    q2[1, :, 5:] = (torch.randn(q2[1, :, 5:].shape) * 3).to(dtype)
    moved = ctx.weights(q2, k2, v, keep)
    others = (moved[[0, 2]] - batched[[0, 2]]).abs().max()
    if float(others) > tol:
        problems.append(f"changing example 1's padded positions changed other examples by {float(others):.3g}")
    own = (moved[1, :, :5] - batched[1, :, :5]).abs().max()
    if float(own) > tol:
        problems.append(f"changing example 1's padded positions changed its real rows by {float(own):.3g}")
    if problems:
        return CheckResult.fail("batch_independence", "; ".join(problems))
    return CheckResult.ok("batch_independence", "each example alone equals itself in a mixed-length batch")


def check_decode_alignment(ctx, dtype):
    """Decoding with a cache: Tq = 1 and 1 < Tq < Tk, at batch 1 (where fast paths drop the mask and call
    SDPA with is_causal=True, which is top-left) and batch 2, with odd head counts."""

    def case(B, H, Tq, seed):
        q, k, v = case_inputs(ctx, B=B, H=H, Tq=Tq, Tk=8, seed=seed, dtype=dtype)
        keep = causal().materialize(B, 1, Tq, 8)
        return lambda: compare(ctx, "decode_alignment", q, k, v, keep, future, causal_case=True)

    cases = [(2, 2, 1), (2, 2, 3), (1, 3, 1), (1, 3, 3)]
    r = over_shapes(
        "decode_alignment",
        [
            (shape_label(B, H, Tq, 8, text=f"Tq={Tq}, Tk=8, B={B}, H={H}"), case(B, H, Tq, 4 + n))
            for n, (B, H, Tq) in enumerate(cases)
        ],
    )
    if r.passed:
        r.detail = "Tq < Tk is aligned bottom-right" + r.detail.removeprefix("every row matches the reference")
    return r


def check_q_longer_than_k(ctx, dtype):
    q, k, v = case_inputs(ctx, B=1, Tq=6, Tk=3, seed=5, dtype=dtype)

    def why(b, i, j):
        return "q longer than k: bottom-right alignment leaves the top rows without keys"

    return compare(ctx, "q_longer_than_k", q, k, v, causal().materialize(1, 1, 6, 3), why, causal_case=True)


def check_sliding_window(ctx, dtype, W=3):
    """A window of W keys on a whole sequence, and while decoding with a cache (Tq = 1 and 3 after more
    than W cached keys): a decoder whose cached keys are never windowed sees them all."""

    def case(B, H, Tq, Tk, seed):
        q, k, v = case_inputs(ctx, B=B, H=H, Tq=Tq, Tk=Tk, seed=seed, dtype=dtype)
        keep = sliding_window(W).materialize(B, 1, Tq, Tk)
        off = Tk - Tq

        def why(b, i, j):
            return "outside its window" if j <= i + off else "a future position"

        extra = (lambda o: window_hint(o, W, W, TOL[dtype])) if Tq == Tk else None
        said = (
            f"the window is not applied while decoding with a cache (Tq = {Tq} < Tk = {Tk}): the queries see "
            "every cached key"
        )
        unwindowed = [("window_not_applied", said, causal().materialize(B, 1, Tq, Tk))] if Tq < Tk else []
        return lambda: compare(ctx, "sliding_window", q, k, v, keep, why, extra=extra, first=unwindowed)

    cases = [(1, 2, 10, 10), (2, 3, 10, 10), (1, 2, 1, 9), (2, 3, 3, 9)]
    return over_shapes(
        "sliding_window",
        [
            (shape_label(B, H, Tq, Tk, extra=f", W={W}"), case(B, H, Tq, Tk, 6 + n))
            for n, (B, H, Tq, Tk) in enumerate(cases)
        ],
    )


def check_document(ctx, dtype):
    ids = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2])
    q, k, v = case_inputs(ctx, B=1, seed=7, dtype=dtype)
    keep = (document(ids) & causal()).materialize(1, 1, 8, 8)
    return compare(
        ctx, "document", q, k, v, keep, lambda b, i, j: "another document" if ids[j] != ids[i] else "a future position"
    )


def check_grouped_heads(ctx, dtype):
    """Grouped heads: 6 query heads on 2 kv heads, and 9 on 3 (an odd group count, an odd B × H)."""

    def case(B, H, Hkv, seed):
        q, k, v = case_inputs(ctx, B=B, H=H, Hkv=Hkv, seed=seed, dtype=dtype)
        keep = None if ctx.mask_family == "bidirectional" else causal().materialize(B, 1, 8, 8)
        scale = ctx.scale_for(q.shape[-1], v.shape[-1])
        return lambda: compare(
            ctx,
            "grouped_heads",
            q,
            k,
            v,
            keep,
            future,
            extra=lambda o: tiled_heads(o, q, k, keep, scale, TOL[dtype], ctx.softcap),
        )

    cases = [(1, 6, 2), (3, 9, 3)]
    return over_shapes(
        "grouped_heads", [(shape_label(B, H, 8, 8, Hkv), case(B, H, Hkv, 8 + n)) for n, (B, H, Hkv) in enumerate(cases)]
    )


def check_empty_rows(ctx, dtype):
    """Rows that may attend to nothing (an all-padding example): zeros. NaN/inf there is a failure
    (it poisons every gradient); a finite average of masked keys is a hazard (see judge)."""
    q, k, v = case_inputs(ctx, B=2, dtype=dtype, seed=11)
    keep = padding([8, 0], Tk=8, side="left")
    if ctx.mask_family != "bidirectional":
        keep = keep & causal()
    keep = keep.materialize(2, 1, 8, 8)
    return compare(ctx, "empty_rows", q, k, v, keep, _padding_reason([8, 0], "left", 8))


GARBAGE_LENGTHS = [8, 5]


def _garbage_inputs(ctx, dtype):
    """(q, k, v, keep, padded keys, real rows) of example 1, three positions padded. A causal target gets
    *left* padding (batched decoding), where the padded keys lie in the past of the real rows — with
    right padding they would sit in the future, hidden by the causal mask alone."""
    left = ctx.causal_only
    q, k, v = case_inputs(ctx, B=2, seed=12, dtype=dtype)
    keep = padding(GARBAGE_LENGTHS, Tk=8, side="left" if left else "right")
    if ctx.causal_only:
        keep = keep & causal()
    keep = keep.materialize(2, 1, 8, 8)
    return q, k, v, keep, (slice(0, 3) if left else slice(5, 8)), (slice(3, 8) if left else slice(0, 5))


def _garbage_control(ctx, dtype, name: str) -> CheckResult | None:
    """With nothing behind the mask, the case itself must be right: when it is not, garbage leaking is the
    mask's own failure (its cause named), not the q·k matmul's or 0·NaN's."""
    q, k, v, keep, _, real = _garbage_inputs(ctx, dtype)
    rows = torch.zeros(2, 1, 8, 1, dtype=torch.bool)
    rows[1, :, real] = True
    r = compare(
        ctx, name, q, k, v, keep, _padding_reason(GARBAGE_LENGTHS, "left" if ctx.causal_only else "right", 8), rows=rows
    )
    if r.outcome is not Outcome.FAIL:
        return None
    r.detail = f"the mask does not hold even with nothing behind it: {r.detail}"
    return r


def _garbage_case(ctx, dtype, where: str):
    """Garbage in example 1's padded keys or values; the real rows must not change. Returns the garbage
    values that leaked, and ``leaks(value)`` to probe others (the magnitude a finite mask holds to)."""
    q, k, v, keep, pad, real = _garbage_inputs(ctx, dtype)
    clean = ctx.weights(q, k, v, keep)[1, :, real, real]

    def leaks(garbage: float) -> bool:
        k2, v2 = k.clone(), v.clone()
        (k2 if where == "keys" else v2)[1, :, pad] = garbage
        d = ctx.weights(q, k2, v2, keep)[1, :, real, real]
        return not bool(torch.isfinite(d).all()) or float((d - clean).abs().max()) > TOL[dtype]

    def logit(garbage: float) -> float:  # the largest scaled logit a masked key gets at this magnitude
        k2 = k.clone().double()
        k2[1, :, pad] = garbage
        G = q.shape[1] // k.shape[1]
        s = q.double() @ k2.repeat_interleave(G, 1).transpose(-1, -2) * ctx.scale_for(q.shape[-1], v.shape[-1])
        return float(s[1, :, real, pad].max())  # the largest (positive) logit leaks first

    found = [g for g in (float("nan"), float("inf"), BIG_FINITE[dtype]) if leaks(g)]
    return found, leaks, logit


def leak_threshold(leaks, logit, high: float) -> str:
    """The magnitude at which a finite mask gives way: bisection on log10 of the garbage between 1 and
    ``high`` (which leaked), said as the masked key's logit there."""
    lo, hi = 0.0, math.log10(high)
    if leaks(1.0):
        return "even a masked key entry of 1 leaks: the mask does not hide keys at all"
    for _ in range(12):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if leaks(10**mid) else (mid, hi)
    return f"masked keys leak once a masked key's logit exceeds ~{logit(10**hi):.0e}"


GARBAGE_ROUTE = {  # where garbage behind the mask enters, and what a finite leak means there
    "keys": ("the q·k matmul before the mask", "the mask does not hide a key whose logit is large"),
    "values": ("0·NaN in the weights·V matmul", "masked keys carry weight"),
}


def _garbage_verdict(ctx, dtype, where: str) -> CheckResult:
    """A finite value behind the mask reaching a visible row fails (a mask must hold for any finite
    input), with the magnitude it gives way at; NaN/inf that enters a matmul before the mask is IEEE
    propagation: a hazard."""
    name = f"masked_{where}"
    if (control := _garbage_control(ctx, dtype, name)) is not None:
        return control
    leaks, probe, logit = _garbage_case(ctx, dtype, where)
    route, finite_means = GARBAGE_ROUTE[where]
    finite = [g for g in leaks if math.isfinite(g)]
    if finite:
        at = f"; {leak_threshold(probe, logit, finite[0])}" if where == "keys" else ""
        return CheckResult.fail(
            name, f"a finite {finite[0]:g} in example 1's padded {where} reached its real rows: {finite_means}{at}"
        )
    if leaks:
        return CheckResult.hazard(
            name,
            f"{', '.join(map(str, leaks))} in masked-out {where} reaches the real rows "
            f"through {route}; harmless unless padded {where} can hold non-finite numbers",
        )
    return CheckResult.ok(name, f"NaN, inf and large finite {where} behind the mask never leak")


def check_masked_keys(ctx, dtype):
    """Garbage in masked-out *keys* (see _garbage_verdict)."""
    return _garbage_verdict(ctx, dtype, "keys")


def check_masked_values(ctx, dtype):
    """Garbage in masked-out *values*: NaN/inf leak through 0·NaN (torch SDPA does: pytorch #101967)."""
    return _garbage_verdict(ctx, dtype, "values")


__all__ = [
    "check_batch_independence",
    "check_causal",
    "check_decode_alignment",
    "check_document",
    "check_empty_rows",
    "check_grouped_heads",
    "check_masked_keys",
    "check_masked_values",
    "check_padding",
    "check_q_longer_than_k",
    "check_sliding_window",
]
