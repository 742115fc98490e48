"""The numeric checks: the softmax's axis, valid logits near −2·10⁴ (a finite mask sentinel, or a softmax
that underflows), and large valid logits (a softmax that does not subtract the row maximum overflows)."""

from __future__ import annotations

import torch

from ..engine import causal, padding
from .diagnose import capped_after_masking
from .harness import TOL, case_inputs, dtype_name, shape_label
from .outcome import CheckResult, Unsupported


def check_normalization_axis(ctx, dtype):
    q, k, v = case_inputs(ctx, B=1, H=2, Tq=6, Tk=8, seed=10, dtype=dtype)
    keep = ctx.base_keep(1, 6, 8)
    w = ctx.weights(q, k, v, keep)
    rows, cols = w.sum(-1), w.sum(-2)
    tol = max(1e-3, 4 * TOL[dtype])
    if bool(torch.isfinite(w).all()) and float((rows - 1).abs().max()) < tol:
        if keep is None and ctx.convention != "causal":
            future = causal().materialize(1, 1, 6, 8)
            if float(w.masked_fill(future, 0).abs().max()) <= TOL[dtype]:
                return CheckResult.fail(
                    "normalization_axis",
                    "None means causal to this target: with no mask given it still hides the future keys",
                )
        return CheckResult.ok("normalization_axis", "weights sum to 1 over keys")
    if float((cols - 1).abs().max()) < tol:
        r = CheckResult.fail("normalization_axis", "weights sum to 1 over queries: softmax on the wrong axis")
        r.cause = "softmax_axis"
        return r
    r = CheckResult.fail(
        "normalization_axis", f"row sums range {float(rows.min()):.3f}…{float(rows.max()):.3f}: not a softmax over keys"
    )
    r.cause = "not_a_softmax"
    return r


def check_sentinel_overrun(ctx, dtype):
    """Visible logits near −2·10⁴ (valid, if unusual): a mask written as a finite sentinel such as −10⁴
    (older GPT-2 code) then outranks every visible key and the padding takes the weight."""
    B, H, T = 1, 2, 8
    D = ctx.head_dim or 8
    q = torch.zeros(B, H, T, D)
    k = torch.zeros(B, H, T, D)
    logit = -2e4
    q[..., 0] = 1.0
    k[..., 0] = logit / ctx.scale_for(D, T)  # every scaled logit is exactly −2·10⁴: uniform over visible keys
    v = torch.zeros(B, H, T, T)
    v[:, :, torch.arange(T), torch.arange(T)] = 1.0
    if dtype == torch.float16 and float(k.abs().max()) > 6e4:
        raise Unsupported("fp16 cannot hold a logit of −2·10⁴ at this head dim")
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    keep = padding([5], Tk=T)
    if ctx.causal_only:
        keep = keep & causal()
    keep = keep.materialize(B, 1, T, T)
    obs = ctx.weights(q, k, v, keep)
    bad, rows = _overflowed(obs, keep)
    q2, k2, v2 = case_inputs(ctx, B=B, H=H, Tq=T, Tk=T, dtype=dtype, seed=15)
    ordinary = ctx.weights(q2, k2, v2, keep)  # the control: the same mask at ordinary logits
    if bad and _overflowed(ordinary, keep)[0]:
        return CheckResult.fail(
            "sentinel_overrun",
            f"with every visible logit at {logit:g}, {bad} of {rows} rows came back NaN, inf or not summing to 1 — "
            "and at ordinary logits too (see the mask checks)",
        )
    if bad:
        # every exp(−2·10⁴) is 0 in every dtype: a softmax that does not subtract the row maximum divides
        # 0 by 0 — an underflow, whatever the mask is written as
        return CheckResult.fail(
            "sentinel_overrun",
            f"with every visible logit at {logit:g}, {bad} of {rows} rows came back NaN, inf or not summing to 1: "
            f"exp({logit:g}) underflows to 0 in {dtype_name(dtype)} and the row is 0/0 — the softmax does not subtract "
            "the row maximum (underflow, not a mask sentinel)",
        )
    leak = float(torch.where(keep.expand_as(obs), 0.0, obs).sum(-1).max())
    if leak > TOL[dtype]:
        return _sentinel_leak(ctx, dtype, (q, k, keep, obs, ordinary), logit, leak)
    return CheckResult.ok("sentinel_overrun", f"visible logits at {logit:g} still outrank masked keys")


def _sentinel_leak(ctx, dtype, case, logit: float, leak: float) -> CheckResult:
    """Masked keys took weight at logits of −2·10⁴: a finite sentinel, unless the mask fails at ordinary
    logits too (then it does not hide keys at all) or a soft cap applied after the mask explains it."""
    q, k, keep, obs, ordinary = case
    D, T = q.shape[-1], q.shape[-2]
    # a sentinel only if the same mask holds at ordinary logits: a mask that is added, inverted or
    # ignored lets masked keys take weight whatever the logits, and that is its own finding
    plain = float(torch.where(keep.expand_as(ordinary), 0.0, ordinary).sum(-1).max())
    if plain > TOL[dtype]:
        return CheckResult.fail(
            "sentinel_overrun",
            f"with every visible logit at {logit:g}, masked keys took {leak:.2f} of a row — and {plain:.2f} "
            "at ordinary logits too: the mask does not hide them at all (not a sentinel; see padding_right)",
        )
    if ctx.softcap:
        after = capped_after_masking(q, k, keep, ctx.scale_for(D, T), ctx.softcap)
        if float((obs - after).abs().max()) <= TOL[dtype]:
            return CheckResult.fail(
                "sentinel_overrun",
                f"with every visible logit at {logit:g}, masked keys took {leak:.2f} of a row (at ordinary "
                f"logits none): the soft cap is applied after the mask — a masked key's −inf becomes "
                f"−{ctx.softcap:.3g}, and visible logits capped toward −{ctx.softcap:.3g} tie with it "
                "(cap, then mask)",
            )
    return CheckResult.fail(
        "sentinel_overrun",
        f"with every visible logit at {logit:g}, masked keys took {leak:.2f} of a row (at ordinary logits "
        "none): the mask is a finite sentinel (e.g. −1e4) that a valid logit can fall below",
    )


OVERFLOW_LOGIT = {torch.float32: 100.0, torch.float16: 50.0, torch.bfloat16: 100.0}  # exp overflows each dtype
LONG_ROW = {torch.float32: 87.0, torch.float16: 10.0, torch.bfloat16: 87.0}  # each exp fits, 64 of them do not
DTYPE_MAX = {torch.float32: "3.4e38", torch.float16: "65504", torch.bfloat16: "3.4e38"}


def _overflowed(w, keep) -> tuple[int, int]:
    """Rows (that see a key) which came back NaN/inf or do not sum to 1: the signature of an overflow."""
    seen = torch.ones_like(w[..., 0], dtype=torch.bool) if keep is None else keep.expand_as(w).any(-1)
    bad = (~torch.isfinite(w).all(-1) | ((w.sum(-1) - 1).abs() > 0.05)) & seen
    return int(bad.sum()), int(seen.sum())


def _overflow_case(ctx, dtype, *, B, H, Tq, Tk, logit, seed, spread, Dv=None):
    """(rows that overflowed, rows, the same at ordinary logits): the control says whether the shape itself
    already breaks the target (then the large logits are not to blame)."""
    q, k, v = case_inputs(ctx, B=B, H=H, Tq=Tq, Tk=Tk, dtype=torch.float32, seed=seed, spread=spread, D=Dv or 8, Dv=Dv)
    keep = ctx.base_keep(B, Tq, Tk)
    control = _overflowed(ctx.weights(q.to(dtype), k.to(dtype), v.to(dtype), keep), keep)[0]
    q[..., 0], k[..., 0] = 1.0, logit / ctx.scale_for(q.shape[-1], v.shape[-1])  # every visible logit near ``logit``
    bad, rows = _overflowed(ctx.weights(q.to(dtype), k.to(dtype), v.to(dtype), keep), keep)
    return bad, rows, control


def check_overflow(ctx, dtype):
    """Large visible logits (valid ones): a softmax that does not subtract the row maximum overflows —
    exp(50) is past fp16's 65504, exp(100) past fp32's and bf16's 3.4e38 — and a long row whose every
    exp fits can still overflow its sum (64 keys: e^87 fits fp32, 64·e^87 does not; 64·e^10 is past
    fp16). Judged by the rows' sums (an overflowed row is NaN, inf or all zero), not to the last digit:
    at logits of 50 the dtype's own rounding moves the weights. Each case has a control at ordinary
    logits: a shape the target already gets wrong is not called an overflow."""
    L, R, Tk = OVERFLOW_LOGIT[dtype], LONG_ROW[dtype], 64
    cases = [  # (what, B, H, Tq, Tk, logit, seed, spread, Dv)
        (f"with visible logits near {L:g}", 2, 4, 8, 8, L - 3, 13, 0.3, None),  # 64 rows of 8 keys
        (f"a row of {Tk} keys at logit {R:g}", 2, 2, 4, Tk, R, 14, 0.0, Tk),
    ]
    found = []
    for what, B, H, Tq, Tk_, logit, seed, spread, Dv in cases:
        bad, rows, control = _overflow_case(
            ctx, dtype, B=B, H=H, Tq=Tq, Tk=Tk_, logit=logit, seed=seed, spread=spread, Dv=Dv
        )
        if control:
            return CheckResult.fail(
                "overflow",
                f"at {shape_label(B, H, Tq, Tk_)} {control} of {rows} rows do not normalize even at ordinary logits "
                "(see the mask checks): overflow cannot be judged there",
            )
        if bad and Tk_ == Tk:
            found.append(
                f"{what} sums past {dtype_name(dtype)}'s {DTYPE_MAX[dtype]} although each exp fits "
                f"({bad} of {rows} rows NaN, inf or zero)"
            )
        elif bad:
            found.append(
                f"{what}, {bad} of {rows} rows came back NaN, inf or not summing to 1 (exp({logit + 3:g}) "
                f"is beyond {dtype_name(dtype)}'s {DTYPE_MAX[dtype]})"
            )
    if found:
        return CheckResult.fail(
            "overflow",
            f"overflow in {dtype_name(dtype)}: {'; '.join(found)}: the softmax does not subtract the row maximum",
        )
    return CheckResult.ok(
        "overflow", f"visible logits near {L:g} and a {Tk}-key row at {R:g} normalize in {dtype_name(dtype)}"
    )


__all__ = ["check_normalization_axis", "check_overflow", "check_sentinel_overrun"]
