"""The audit battery: each check a small function, every query row compared with the reference.

Values are one-hot per key position (v[b, g, j] = e_j), so a target's output row *is* that row's
attention weights, and a failure can name the place: "example 0, head 1, query 1 took 0.31 from
key 3, a future position". The reference is attnroute's fp64 eager with the same logical mask.
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass

import torch

from ..engine import attend, causal, document, padding, predicate, sliding_window
from .conventions import TargetRejected, call

TOL = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}  # on weights in [0, 1]
SCALE_TOL = {torch.float32: 0.02, torch.float16: 0.03, torch.bfloat16: 0.08}  # on the fitted temperature


@dataclass
class CheckResult:
    """One check's verdict. Build it with ok / fail / skip / verdict, never with bare booleans."""

    name: str
    _: KW_ONLY
    passed: bool
    skipped: bool = False
    detail: str = ""

    @classmethod
    def ok(cls, name: str, detail: str) -> CheckResult:
        return cls(name, passed=True, detail=detail)

    @classmethod
    def fail(cls, name: str, detail: str) -> CheckResult:
        return cls(name, passed=False, detail=detail)

    @classmethod
    def skip(cls, name: str, detail: str) -> CheckResult:
        return cls(name, passed=False, skipped=True, detail=detail)

    @classmethod
    def verdict(cls, name: str, passed: bool, detail: str) -> CheckResult:
        return cls(name, passed=passed, detail=detail)


class Ctx:
    """One target under test: its function and mask convention."""

    def __init__(self, fn, convention: str):
        self.fn, self.convention = fn, convention

    def weights(self, q, k, v, keep):
        out = call(self.fn, q, k, v, keep, self.convention)
        return out[..., : k.shape[2]].double()  # (B, H, Tq, Tk): one-hot values make rows the weights


def inputs(B=2, H=2, Hkv=None, Tq=8, Tk=8, dtype=torch.float32, seed=0, spread=1.0):
    """Random q, k (distinctive, not uniform scores) and one-hot values; D = max(Tk, 8)."""
    Hkv = Hkv or H
    D = max(Tk, 8)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Tq, D, generator=g) * spread
    k = torch.randn(B, Hkv, Tk, D, generator=g) * spread
    v = torch.zeros(B, Hkv, Tk, D)
    v[:, :, torch.arange(Tk), torch.arange(Tk)] = 1.0
    return q.to(dtype), k.to(dtype), v.to(dtype)


def reference(q, k, v, keep):
    return attend(q.double(), k.double(), v.double(), keep, impl="eager")[..., : k.shape[2]]


def first_difference(obs, exp, keep, tol, why_masked) -> str | None:
    """The worst disagreeing entry, described; None when all agree within tol."""
    bad = ~torch.isfinite(obs)
    if bad.any():
        b, h, i, j = (int(x) for x in torch.nonzero(bad)[0])
        rows = int(bad.any(-1).sum())
        return f"example {b}, head {h}, query {i} is {obs[b, h, i, j].item()} (non-finite; {rows} such rows)"
    diff = (obs - exp).abs()
    if float(diff.max()) <= tol:
        return None
    if keep is not None:  # a route that must not exist but carried weight is the most telling failure
        leak = torch.where(keep.expand_as(obs), torch.zeros_like(obs), obs)
        if float(leak.max()) > tol:
            b, h, i, j = (int(x) for x in torch.nonzero(leak == leak.max())[0])
            took = float(obs[b, h, i, j])
            return f"example {b}, head {h}, query {i} took {took:.2f} from key {j}, {why_masked(b, i, j)}"
    b, h, i, j = (int(x) for x in torch.nonzero(diff == diff.max())[0])
    return (
        f"example {b}, head {h}, query {i} gave key {j} weight {float(obs[b, h, i, j]):.3f}, "
        f"expected {float(exp[b, h, i, j]):.3f}"
    )


def compare(ctx, name, q, k, v, keep, why_masked, extra=None) -> CheckResult:
    try:
        obs = ctx.weights(q, k, v, keep)
    except TargetRejected as e:
        return CheckResult.skip(name, f"target rejected the input: {e}")
    exp = reference(q, k, v, keep)
    msg = first_difference(obs, exp, keep, TOL[q.dtype], why_masked)
    cause = extra(obs, exp) if msg and extra else ""  # the diagnosis may run the target's reference again: once
    if cause:
        msg = f"{msg}; {cause}"
    return CheckResult.verdict(name, msg is None, msg or "every row matches the reference")


def _future(b, i, j):
    return "a future position"


def diagnose_causal(obs, exp, Tq, Tk):
    """Name the usual culprits: inverted polarity, a shifted diagonal, top-left alignment."""
    B, H = obs.shape[:2]
    ahead = predicate(lambda b, h, q, kv: kv <= q + 1).materialize(B, H, Tq, Tk)
    strict = predicate(lambda b, h, q, kv: kv < q).materialize(B, H, Tq, Tk)
    cands = {
        "the mask is inverted (rows attend exactly where they must not)": ~causal().materialize(B, H, Tq, Tk),
        "the causal diagonal is shifted: each query also sees the next key": ahead,
        "the causal diagonal is shifted: queries do not see themselves": strict,
        "causal is aligned top-left (query 0 sees only key 0), wrong for KV-cache decoding": causal(
            "top_left"
        ).materialize(B, H, Tq, Tk),
        "no mask was applied": None,
    }
    support = obs > 1e-3
    for text, keep in cands.items():
        k = torch.ones_like(support) if keep is None else keep.expand_as(support)
        if bool((support == k).all()):
            return text
    return ""


# ------------------------------------------------------------------------------------ the checks


def check_causal(ctx, dtype=torch.float32):
    q, k, v = inputs(dtype=dtype, seed=1)
    return compare(
        ctx, "causal", q, k, v, causal().materialize(2, 1, 8, 8), _future, lambda o, e: diagnose_causal(o, e, 8, 8)
    )


def _padding_reason(lengths, side, Tk):
    def why(b, i, j):
        return (
            "a padding position"
            if (j >= lengths[b] if side == "right" else j < Tk - lengths[b])
            else "a future position"
        )

    return why


def check_padding(ctx, side, dtype=torch.float32):
    lengths = [8, 5, 3]
    q, k, v = inputs(B=3, dtype=dtype, seed=2)
    keep = padding(lengths, Tk=8, side=side)
    if side == "left":  # decoder-style: left padding with causal
        keep = keep & causal()
    keep = keep.materialize(3, 1, 8, 8)
    real = padding(lengths, Tk=8, side=side).materialize(3, 1, 8, 8)[:, 0, 0]  # (B, Tq) rows that are tokens
    rows = real[:, None, :, None]
    name = f"padding_{side}" + ("" if dtype == torch.float32 else f"_{_short(dtype)}")
    try:
        obs = ctx.weights(q, k, v, keep)
    except TargetRejected as e:
        return CheckResult.skip(name, f"target rejected the input: {e}")
    exp = reference(q, k, v, keep)
    obs_real = torch.where(rows, obs, exp)  # padded query rows are checked by empty_rows
    msg = first_difference(obs_real, exp, keep, TOL[dtype], _padding_reason(lengths, side, 8))
    return CheckResult.verdict(name, msg is None, msg or "real rows match; padding never receives weight")


def check_batch_independence(ctx, dtype=torch.float32):
    lengths = [8, 5, 3]
    q, k, v = inputs(B=3, seed=3, dtype=dtype)
    keep = padding(lengths, Tk=8).materialize(3, 1, 8, 8)
    try:
        batched = ctx.weights(q, k, v, keep)
        problems = []
        for b, n in enumerate(lengths):
            alone = ctx.weights(q[b : b + 1, :, :n], k[b : b + 1, :, :n], v[b : b + 1, :, :n, :], None)
            diff = (batched[b : b + 1, :, :n, :n] - alone).abs().max()
            if float(diff) > TOL[dtype]:
                problems.append(f"example {b} alone differs from itself in the batch by {float(diff):.3g}")
        k2, v2 = k.clone(), v.clone()
        k2[1, :, 5:] = (torch.randn(k2[1, :, 5:].shape) * 30).to(dtype)
        q2 = q.clone()
        q2[1, :, 5:] = (torch.randn(q2[1, :, 5:].shape) * 30).to(dtype)
        moved = ctx.weights(q2, k2, v2, keep)
        others = (moved[[0, 2]] - batched[[0, 2]]).abs().max()
        if float(others) > TOL[dtype]:
            problems.append(f"changing example 1's padded positions changed other examples by {float(others):.3g}")
        own = (moved[1, :, :5] - batched[1, :, :5]).abs().max()
        if float(own) > TOL[dtype]:
            problems.append(f"changing example 1's padded positions changed its real rows by {float(own):.3g}")
    except TargetRejected as e:
        return CheckResult.skip("batch_independence", f"target rejected the input: {e}")
    return CheckResult.verdict(
        "batch_independence",
        not problems,
        "; ".join(problems) or "each example alone equals itself in a mixed-length batch",
    )


def check_decode_alignment(ctx, dtype=torch.float32):
    for Tq in (1, 3):
        q, k, v = inputs(B=2, Tq=Tq, Tk=8, seed=4, dtype=dtype)
        r = compare(
            ctx,
            "decode_alignment",
            q,
            k,
            v,
            causal().materialize(2, 1, Tq, 8),
            _future,
            lambda o, e, Tq=Tq: diagnose_causal(o, e, Tq, 8),
        )
        if not r.passed:
            return r if r.skipped else CheckResult.fail(r.name, f"Tq={Tq}, Tk=8: {r.detail}")
    return CheckResult.ok("decode_alignment", "Tq < Tk is aligned bottom-right (Tq = 1 and 3, Tk = 8)")


def check_q_longer_than_k(ctx, dtype=torch.float32):
    q, k, v = inputs(B=1, Tq=6, Tk=3, seed=5, dtype=dtype)
    return compare(
        ctx,
        "q_longer_than_k",
        q,
        k,
        v,
        causal().materialize(1, 1, 6, 3),
        _future,
        lambda o, e: diagnose_causal(o, e, 6, 3),
    )


def check_sliding_window(ctx, dtype=torch.float32, W=3):
    q, k, v = inputs(B=1, Tq=10, Tk=10, seed=6, dtype=dtype)
    keep = sliding_window(W).materialize(1, 1, 10, 10)

    def counts(o, e):
        seen = (o > 1e-3).sum(-1)[..., W:]  # rows far from the start
        n = int(seen.float().median())
        return (
            f"rows far from the start see {n} keys, expected W={W} (a W+1 / W−1 window convention?)" if n != W else ""
        )

    return compare(
        ctx,
        "sliding_window",
        q,
        k,
        v,
        keep,
        lambda b, i, j: "outside its window" if j <= i else "a future position",
        counts,
    )


def check_document(ctx, dtype=torch.float32):
    ids = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2])
    q, k, v = inputs(B=1, seed=7, dtype=dtype)
    keep = (document(ids) & causal()).materialize(1, 1, 8, 8)
    return compare(
        ctx, "document", q, k, v, keep, lambda b, i, j: "another document" if ids[j] != ids[i] else "a future position"
    )


def check_grouped_heads(ctx, dtype=torch.float32):
    q, k, v = inputs(B=1, H=6, Hkv=2, seed=8, dtype=dtype)
    keep = causal().materialize(1, 1, 8, 8)

    def tiled(o, e):
        alt = attend(q.double(), k.double().repeat(1, 3, 1, 1), v.double().repeat(1, 3, 1, 1), keep, impl="eager")[
            ..., :8
        ]
        return (
            "query heads are grouped by tiling (repeat), not repeat_interleave"
            if float((o - alt).abs().max()) < 1e-3
            else ""
        )

    return compare(ctx, "grouped_heads", q, k, v, keep, _future, tiled)


def check_scale(ctx, dtype=torch.float32):
    """Fit the temperature: log w_ij = τ·(q·k_j) − c_i for visible keys; expect τ = 1/√D."""
    q, k, v = inputs(B=1, H=2, seed=9, spread=0.5, dtype=dtype)
    D = q.shape[-1]
    try:
        w = ctx.weights(q, k, v, None)
    except TargetRejected as e:
        return CheckResult.skip("scale", f"target rejected the input: {e}")
    s = q.double() @ k.double().transpose(-1, -2)  # (B, H, Tq, Tk) unscaled
    sums = w.sum(-1)
    if not bool(torch.isfinite(w).all()) or float((sums - 1).abs().max()) > max(1e-3, 4 * TOL[dtype]):
        return CheckResult.fail(
            "scale",
            f"rows do not sum to 1 (range {float(sums.min()):.3f}…"
            f"{float(sums.max()):.3f}): scale applied after the softmax, or not a softmax over keys",
        )
    lw = torch.log(w.clamp_min(1e-300))
    x = s - s.mean(-1, keepdim=True)
    y = lw - lw.mean(-1, keepdim=True)
    tau = float((x * y).sum() / (x * x).sum())
    ratio = tau * math.sqrt(D)
    if abs(ratio - 1) < SCALE_TOL[dtype]:
        return CheckResult.ok("scale", f"fitted temperature = {ratio:.4f} × 1/√d (d={D})")
    if abs(ratio / math.sqrt(D) - 1) < 0.05:
        hint = "no scale at all (the 1/√d is missing)"
    elif abs(ratio * math.sqrt(D) - 1) < 0.05:
        hint = "1/d instead of 1/√d"
    else:
        hint = "an unexpected scale"
    return CheckResult.fail("scale", f"fitted temperature = {ratio:.3f} × 1/√d (d={D}): {hint}")


def check_normalization_axis(ctx, dtype=torch.float32):
    q, k, v = inputs(B=1, H=2, Tq=6, Tk=8, seed=10, dtype=dtype)
    try:
        w = ctx.weights(q, k, v, None)
    except TargetRejected as e:
        return CheckResult.skip("normalization_axis", f"target rejected the input: {e}")
    rows, cols = w.sum(-1), w.sum(-2)
    tol = max(1e-3, 4 * TOL[dtype])
    if float((rows - 1).abs().max()) < tol:
        return CheckResult.ok("normalization_axis", "weights sum to 1 over keys")
    if float((cols - 1).abs().max()) < tol:
        return CheckResult.fail("normalization_axis", "weights sum to 1 over queries: softmax on the wrong axis")
    return CheckResult.fail("normalization_axis", f"row sums range {float(rows.min()):.3f}…{float(rows.max()):.3f}")


def check_empty_rows(ctx, dtype=torch.float32):
    """Rows that may attend to nothing: finite, zero (left padding with an all-padding example)."""
    name = "empty_rows" + ("" if dtype == torch.float32 else f"_{_short(dtype)}")
    q, k, v = inputs(B=2, dtype=dtype, seed=11)
    keep = (padding([8, 0], Tk=8, side="left") & causal()).materialize(2, 1, 8, 8)
    try:
        w = ctx.weights(q, k, v, keep)
    except TargetRejected as e:
        return CheckResult.skip(name, f"target rejected the input: {e}")
    empty = ~keep.expand_as(w).any(-1)  # (B, H, Tq)
    bad = ~torch.isfinite(w)
    if bad.any():
        b, h, i = (int(x) for x in torch.nonzero(bad.any(-1))[0])
        return CheckResult.fail(
            name,
            f"example {b}, head {h}, query {i} may attend to nothing and "
            f"returned NaN/inf ({int(bad.any(-1).sum())} rows)",
        )
    nz = (w.abs().sum(-1) > TOL[dtype]) & empty
    if nz.any():
        b, h, i = (int(x) for x in torch.nonzero(nz)[0])
        return CheckResult.fail(
            name,
            f"example {b}, head {h}, query {i} may attend to nothing but took "
            f"{float(w[b, h, i].sum()):.2f} in total (from masked keys); expected zeros",
        )
    return compare(ctx, name, q, k, v, keep, _padding_reason([8, 0], "left", 8))


def check_masked_garbage(ctx, dtype=torch.float32):
    """NaN / inf / 1e10 in masked-out keys and values must not reach a visible output."""
    lengths = [8, 5]
    q, k, v = inputs(B=2, seed=12, dtype=dtype)
    keep = padding(lengths, Tk=8).materialize(2, 1, 8, 8)
    try:
        clean = ctx.weights(q, k, v, keep)
        for garbage in (float("nan"), float("inf"), 1e10):
            k2, v2 = k.clone(), v.clone()
            k2[1, :, 5:] = garbage
            v2[1, :, 5:] = garbage
            dirty = ctx.weights(q, k2, v2, keep)
            d = dirty[1, :, :5, :5]
            if not bool(torch.isfinite(d).all()) or float((d - clean[1, :, :5, :5]).abs().max()) > 1e-6:
                return CheckResult.fail(
                    "masked_garbage", f"{garbage} placed in example 1's padded keys/values reached its real rows"
                )
    except TargetRejected as e:
        return CheckResult.skip("masked_garbage", f"target rejected the input: {e}")
    return CheckResult.ok("masked_garbage", "NaN, inf and 1e10 in masked keys/values never leak")


def _short(dtype):
    return {torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]


BASE = {
    "causal": check_causal,
    "padding_right": lambda c, dtype: check_padding(c, "right", dtype),
    "padding_left": lambda c, dtype: check_padding(c, "left", dtype),
    "batch_independence": check_batch_independence,
    "decode_alignment": check_decode_alignment,
    "q_longer_than_k": check_q_longer_than_k,
    "sliding_window": check_sliding_window,
    "document": check_document,
    "grouped_heads": check_grouped_heads,
    "scale": check_scale,
    "normalization_axis": check_normalization_axis,
    "empty_rows": check_empty_rows,
    "masked_garbage": check_masked_garbage,
}


def _in(dtype, check):
    return lambda ctx: check(ctx, dtype=dtype)


# every check in fp32, then everything again in fp16 and bf16 (a sentinel that overflows to -inf
# in low precision shows up there)
CHECKS = {name: _in(torch.float32, fn) for name, fn in BASE.items()}
for _dtype in (torch.float16, torch.bfloat16):
    CHECKS.update({f"{name}_{_short(_dtype)}": _in(_dtype, fn) for name, fn in BASE.items()})
