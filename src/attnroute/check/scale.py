"""The scale checks: the temperature a target uses (fitted over the keys a row may see; 1/√D expected, or
the declared scale), whether it follows D or Dv, and a soft cap the target applies, declares, or both.

The scale is checked first. When it is off, the failure is said once (in `scale`) and every mask
check compares at the target's own temperature, so mask verdicts are about masks; a scale the user
declares (`--scale 1` for T5, which has no 1/√d by design) is the reference's scale throughout.
"""

from __future__ import annotations

import math

import torch

from .diagnose import weights_under
from .harness import SCALE_TOL, TOL, case_inputs
from .outcome import CheckResult


def fit_temperature(w, q, k, keep, tol, softcap: float | None = None) -> float:
    """τ in log w_ij = τ·(q_i·k_j) − c_i, fitted over the keys the row may see and the target gave
    weight (a causal row's structural zeros say nothing about the scale). With a soft cap the model is
    log w_ij = cap·tanh(τ·s_ij/cap) − c_i, solved by fixed point: fit τ against cap·tanh(τ_n·s/cap)/τ_n,
    which is linear in τ near τ_n (a few steps: the battery's logits sit where tanh is nearly linear)."""
    s = q.double() @ k.double().repeat_interleave(q.shape[1] // k.shape[1], 1).transpose(-1, -2)
    vis = w > tol * 1e-3
    if keep is not None:
        vis &= keep.expand_as(w)
    n = vis.sum(-1, keepdim=True).clamp_min(1)
    lw = torch.log(w.clamp_min(1e-300))
    y = torch.where(vis, lw - (lw * vis).sum(-1, keepdim=True) / n, 0.0)

    def fit(u):
        x = torch.where(vis, u - (u * vis).sum(-1, keepdim=True) / n, 0.0)
        return float((x * y).sum() / (x * x).sum().clamp_min(1e-300))

    tau = fit(s)
    for _ in range(30 if softcap else 0):
        if not tau > 0:
            break
        new = fit(softcap * torch.tanh(tau * s / softcap) / tau)
        if abs(new - tau) <= 1e-12 * tau:
            break
        tau = new
    return tau


def _rows_sum_to_one(name, w, keep, tol) -> CheckResult | None:
    seen = torch.ones_like(w[..., 0], dtype=torch.bool) if keep is None else keep.expand_as(w).any(-1)
    sums = w.sum(-1)[seen]
    if not bool(torch.isfinite(w).all()) or float((sums - 1).abs().max()) > max(1e-3, 4 * tol):
        return CheckResult.fail(
            name,
            f"rows do not sum to 1 (range {float(sums.min()):.3f}…{float(sums.max()):.3f}): "
            "scale applied after the softmax, or not a softmax over keys",
        )
    return None


def _scale_case(ctx, name, dtype, D=None, Dv=None):
    q, k, v = case_inputs(
        ctx, B=1, H=2, seed=9, spread=0.5, dtype=dtype, **({"D": D} if D else {}), **({"Dv": Dv} if Dv else {})
    )
    keep = ctx.base_keep(1, 8, 8)
    w = ctx.weights(q, k, v, keep)
    bad = _rows_sum_to_one(name, w, keep, TOL[dtype])
    return q, k, v, keep, w, bad


def _log_spaced(lo: float, hi: float, n: int) -> list[float]:
    return [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]


def _best_cap(miss) -> float:
    """The cap that minimises ``miss(cap)``: the best of a log grid from 0.5 to 10⁴, then 16 steps of golden
    section on log cap between its neighbours."""
    grid = _log_spaced(0.5, 1e4, 25)
    i = min(range(len(grid)), key=lambda j: miss(grid[j]))
    lo, hi = math.log(grid[max(i - 1, 0)]), math.log(grid[min(i + 1, len(grid) - 1)])
    g = (math.sqrt(5) - 1) / 2
    for _ in range(16):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        lo, hi = (lo, b) if miss(math.exp(a)) < miss(math.exp(b)) else (a, hi)
    return math.exp((lo + hi) / 2)


def find_softcap(ctx, dtype) -> tuple[float, str] | None:
    """What the target's weights say of a soft cap, when that differs from what was declared: (the cap
    the mask checks should use — 0 for none — and the sentence that says it), or None when the
    declaration (or its absence) fits. Probed on logits of up to ±12, where a cap of 50 bends them by a
    tenth: plain softmax and the declared cap are fitted first; only when both miss the tolerance is a
    cap searched (a log grid from 0.5 to 10⁴, then golden section on log cap). A cap that fits no better
    than plain logits is no finding: the mask checks then say what is wrong."""
    q, k, v = case_inputs(ctx, B=1, H=2, seed=16, spread=2.0, dtype=dtype)
    keep = ctx.base_keep(1, 8, 8)
    w = ctx.weights(q, k, v, keep)
    tol = TOL[dtype]
    if _rows_sum_to_one("scale", w, keep, tol) is not None:
        return None

    def miss(cap):
        tau = fit_temperature(w, q, k, keep, tol, cap)
        return float((w - weights_under(q, k, keep, tau, softcap=cap)).abs().max()) if tau > 0 else float("inf")

    declared = ctx.declared_softcap
    said = miss(declared)
    if said <= tol:
        return None
    plain = said if declared is None else miss(None)
    if declared is not None and plain <= tol:
        return 0.0, (
            f"; the declared soft cap {declared:g} does not fit (it misses by {said:.1e}) but plain logits fit every "
            "weight: the target does not cap; the mask checks compare without a cap"
        )
    cap = _best_cap(miss)
    err = miss(cap)
    if err > tol or err > 0.25 * min(plain, said):
        return None
    if declared is not None:
        return cap, (
            f"; the logits fit a soft cap ≈ {cap:.3g}, not the declared {declared:g} (it misses by {said:.1e}); "
            "the mask checks compare at the fitted cap"
        )
    return cap, (
        f"; the logits are soft-capped: cap·tanh(s/cap) with cap ≈ {cap:.3g} fits every weight (plain logits miss "
        f"by {plain:.1e}) — if the cap is by design, declare it (--softcap {cap:.3g}); the mask checks compare at "
        "the fitted cap"
    )


def check_scale(ctx, dtype):
    """Fit the temperature over visible keys; expect 1/√D (or the declared scale). A soft cap the target
    applies but does not declare — or declares but does not apply, or applies at another value — is found
    here too and said once: the mask checks then compare at the target's own cap, as at its temperature."""
    q, k, v, keep, w, bad = _scale_case(ctx, "scale", dtype)
    if bad:
        return bad
    D = q.shape[-1]
    found = find_softcap(ctx, dtype)
    ctx.fitted_softcap = None if found is None else found[0]
    cap_said = "" if found is None else found[1]
    tau = fit_temperature(w, q, k, keep, TOL[dtype], ctx.softcap)
    want = ctx.declared_scale if ctx.declared_scale is not None else 1 / math.sqrt(D)
    said = f"declared scale {want:g}" if ctx.declared_scale is not None else "1/√d"
    ratio = tau / want
    if abs(ratio - 1) < SCALE_TOL[dtype]:
        if found:
            return CheckResult.fail("scale", f"fitted temperature = {ratio:.4f} × {said} (d={D}){cap_said}")
        return CheckResult.ok("scale", f"fitted temperature = {ratio:.4f} × {said} (d={D})")
    if abs(tau * math.sqrt(D) - math.sqrt(D)) < 0.05 * math.sqrt(D):
        hint, rule = "no scale at all (the 1/√d is missing)", lambda d, dv: 1.0
    elif abs(tau * D - 1) < 0.05:
        hint, rule = "1/d instead of 1/√d", lambda d, dv: 1.0 / d
    else:
        c = tau * math.sqrt(D)  # the target's temperature as a multiple of 1/√d, kept for every d

        def rule(d, dv):
            return c / math.sqrt(d)

        hint = "an unexpected scale"
    if ctx.declared_scale is None:
        ctx.fitted = rule
    return CheckResult.fail(
        "scale",
        f"fitted temperature = {ratio:.3f} × {said} (d={D}): {hint}; the mask checks "
        f"compare at the target's own temperature{cap_said}",
    )


def check_scale_dv(ctx, dtype):
    """D ≠ Dv: the scale belongs to the query/key dim. D = 32, Dv = 8 tells √D from √Dv (×2)."""
    D = ctx.head_dim if ctx.head_dim and ctx.head_dim > 8 else 32
    q, k, v, keep, w, bad = _scale_case(ctx, "scale_dv", dtype, D=D, Dv=8)
    if bad:
        return bad
    tau = fit_temperature(w, q, k, keep, TOL[dtype], ctx.softcap)
    want = ctx.scale_for(D, 8)
    if abs(tau / want - 1) < SCALE_TOL[dtype]:
        return CheckResult.ok("scale_dv", f"with D={D} ≠ Dv=8 the temperature follows D ({tau / want:.4f}×)")
    if abs(tau * math.sqrt(8) - 1) < 0.05:
        return CheckResult.fail(
            "scale_dv",
            f"with D={D} ≠ Dv=8 the scores are divided by √Dv, not √D: the value head dim sets the temperature",
        )
    return CheckResult.fail("scale_dv", f"with D={D} ≠ Dv=8 the fitted temperature is {tau / want:.3f}× expected")


__all__ = ["check_scale", "check_scale_dv", "find_softcap", "fit_temperature"]
