"""The audit battery: each check a small function, every query row compared with the reference.

Values are one-hot per key position (v[b, g, j] = e_j), so a target's output row *is* that row's
attention weights, and a failure can name the place: "example 0, head 1, query 1 took 0.31 from
key 3, a future position". The expected weights come from the list reference
(engine/backends/reference.py: plain Python floats, fp64), never from the backends under test.

The scale is checked first. When it is off, the failure is said once (in `scale`) and every mask
check compares at the target's own temperature, so mask verdicts are about masks; a scale the
user declares (`--scale 1` for T5, which has no 1/√d by design) is the reference's scale throughout.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..engine import attend, causal, document, padding, sliding_window
from .conventions import Caller, TargetFailed, Unsupported
from .diagnose import capped_after_masking, explain, tiled_heads, weights_under, window_hint
from .outcome import CheckResult, Outcome

RAISED = "the target raised "  # how a case the target raised on begins (report.unaccepted reads it)
TOL = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}  # on weights in [0, 1]
SCALE_TOL = {torch.float32: 0.02, torch.float16: 0.03, torch.bfloat16: 0.08}  # on the fitted temperature
BIG_FINITE = {torch.float32: 1e10, torch.float16: 1e3, torch.bfloat16: 1e10}  # finite garbage whose q·k stays finite


class Ctx:
    """One target under test: how to call it, and the scale rule the reference uses."""

    def __init__(
        self,
        fn,
        convention: str,
        *,
        scale: float | None = None,
        head_dim: int | None = None,
        timeout: float | None = None,
        mask_family: str = "any",
        softcap: float | None = None,
    ):
        self.call = Caller(fn, convention, **({} if timeout is None else {"timeout": timeout}))
        self.declared_softcap = softcap or None  # cap·tanh(s/cap) before the mask, as declared (Gemma 2: 50)
        self.fitted_softcap: float | None = None  # what the scale check found instead (0: no cap at all)
        self.convention = convention
        self.declared_scale = scale  # the user's --scale: the reference uses it for every D
        self.fitted: Callable[[int, int], float] | None = None  # the target's own rule, once measured
        self.head_dim = head_dim  # D the battery uses (hf targets: the model's own head dim)
        # "any" mask; "causal": the target is causal by nature (checks not about masks use causal);
        # "bidirectional": an encoder that cannot be causal (padding cases drop the causal part)
        self.mask_family = "causal" if convention == "causal" else mask_family
        self.causal_only = self.mask_family == "causal"

    @property
    def softcap(self) -> float | None:
        """The cap the reference applies: the declared one, else one the scale check measured (said there
        once, like an off temperature, so that the mask checks judge masks)."""
        if self.fitted_softcap is not None:
            return self.fitted_softcap or None
        return self.declared_softcap

    def scale_for(self, D: int, Dv: int) -> float:
        if self.declared_scale is not None:
            return self.declared_scale
        if self.fitted is not None:
            return self.fitted(D, Dv)
        return 1.0 / math.sqrt(D)

    def base_keep(self, B: int, Tq: int, Tk: int) -> torch.Tensor | None:
        """The mask of checks that are not about masks: none, or causal for a causal-only target."""
        return causal().materialize(B, 1, Tq, Tk) if self.causal_only else None

    def weights(self, q, k, v, keep) -> torch.Tensor:
        out = self.call(q, k, v, keep)
        return out[..., : k.shape[2]].double()  # (B, H, Tq, Tk): one-hot values make rows the weights

    def reference(self, q, k, v, keep) -> torch.Tensor:
        scale = self.scale_for(q.shape[-1], v.shape[-1])
        out = attend(q.double(), k.double(), v.double(), keep, scale=scale, softcap=self.softcap, impl="reference")
        return out[..., : k.shape[2]]


def inputs(B=2, H=2, Hkv=None, Tq=8, Tk=8, dtype=torch.float32, seed=0, spread=1.0, D=None, Dv=None):
    """Random q, k (distinctive, not uniform scores) and one-hot values; D = max(Tk, 8) unless given."""
    Hkv = Hkv or H
    D = D or max(Tk, 8)
    Dv = Dv or D
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Tq, D, generator=g) * spread * math.sqrt(D / max(Tk, 8))
    k = torch.randn(B, Hkv, Tk, D, generator=g) * spread
    v = torch.zeros(B, Hkv, Tk, Dv)
    v[:, :, torch.arange(Tk), torch.arange(Tk)] = 1.0
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _inputs(ctx: Ctx, **kw):
    if ctx.head_dim and "D" not in kw:
        kw["D"] = max(ctx.head_dim, kw.get("Tk", 8))
    return inputs(**kw)


def _short(dtype) -> str:
    return {torch.float32: "", torch.float16: "_fp16", torch.bfloat16: "_bf16"}[dtype]


def first_difference(obs, exp, keep, tol, why_masked) -> str | None:
    """The worst disagreeing entry, described; None when all agree within tol."""
    bad = ~torch.isfinite(obs)
    if bad.any():
        b, h, i, j = (int(x) for x in torch.nonzero(bad)[0])
        rows = int(bad.any(-1).sum())
        empty = keep is not None and not bool(keep.expand_as(obs)[b, h, i].any())
        why = " — the row has no visible key" if empty else ""
        return f"example {b}, head {h}, query {i} is {obs[b, h, i, j].item()} (non-finite; {rows} such rows){why}"
    diff = (obs - exp).abs()
    if float(diff.max()) <= tol:
        return None
    if keep is not None:  # a route that must not exist but carried weight is the most telling failure
        full = keep.expand_as(obs)
        leak = torch.where(full, torch.zeros_like(obs), obs)
        if float(leak.max()) > tol:
            b, h, i, j = (int(x) for x in torch.nonzero(leak == leak.max())[0])
            took = float(obs[b, h, i, j])
            if not bool(full[b, h, i].any()):
                return (
                    f"example {b}, head {h}, query {i} has no visible key ({why_masked(b, i, j)}) but took "
                    f"{float(obs[b, h, i].sum()):.2f} in total; expected a zero row"
                )
            return f"example {b}, head {h}, query {i} took {took:.2f} from key {j}, {why_masked(b, i, j)}"
    b, h, i, j = (int(x) for x in torch.nonzero(diff == diff.max())[0])
    return (
        f"example {b}, head {h}, query {i} gave key {j} weight {float(obs[b, h, i, j]):.3f}, "
        f"expected {float(exp[b, h, i, j]):.3f}"
    )


def judge(name, obs, exp, keep, tol, why_masked, explain_cause=None, rows=None) -> CheckResult:
    """Rows that may see a key must match the reference (else fail, with the cause when one is
    found); rows that may see nothing must be zeros — NaN/inf there fails (it reaches every
    gradient), a finite average of masked keys is a hazard. ``rows`` limits the judgement to
    the query rows that matter (padded queries in a padding check)."""
    judged = torch.ones_like(obs[..., :1], dtype=torch.bool) if rows is None else rows.expand(*obs.shape[:-1], 1)
    has_key = judged if keep is None else judged & keep.expand_as(obs).any(-1, keepdim=True)
    msg = first_difference(torch.where(has_key, obs, exp), exp, keep, tol, why_masked)
    if msg is not None:
        cause = explain_cause(has_key) if explain_cause else ""
        return CheckResult.fail(name, f"{msg}; {cause}" if cause else msg)
    empty = (judged & ~has_key).expand_as(obs)
    if not bool(empty.any()):
        return CheckResult.ok(name, "every row matches the reference")
    bad = ~torch.isfinite(obs) & empty
    if bad.any():
        b, h, i, _ = (int(x) for x in torch.nonzero(bad)[0])
        n = int(bad.any(-1).sum())
        return CheckResult.fail(
            name,
            f"example {b}, head {h}, query {i} may attend to nothing and returned NaN/inf "
            f"({n} such rows): NaN reaches every gradient",
        )
    took = torch.where(empty, obs.abs(), 0.0).sum(-1)
    if float(took.max()) > tol:
        b, h, i = (int(x) for x in torch.nonzero(took == took.max())[0])
        return CheckResult.hazard(
            name,
            f"example {b}, head {h}, query {i} may attend to nothing but took "
            f"{float(obs[b, h, i].sum()):.2f} in total from masked keys (finite, but it "
            "reads padding; harmless only if such rows never reach a loss)",
        )
    return CheckResult.ok(name, "every row matches the reference; rows that see nothing are zeros")


def compare(
    ctx: Ctx, name, q, k, v, keep, why_masked, extra=None, causal_case=False, rows=None, first=()
) -> CheckResult:
    """Run the target on one case and judge every row against the reference."""
    obs = ctx.weights(q, k, v, keep)
    exp = ctx.reference(q, k, v, keep)
    tol = TOL[q.dtype]
    scale = ctx.scale_for(q.shape[-1], v.shape[-1])

    def cause(judged):
        why = explain(obs, q, k, keep, scale, tol, causal_case=causal_case, rows=judged, exp=exp, first=first,
                      softcap=ctx.softcap)  # fmt: skip
        return why or (extra(obs) if extra else "")

    return judge(name, obs, exp, keep, tol, why_masked, cause, rows)


def _future(b, i, j):
    return "a future position"


def over_shapes(name: str, cases) -> CheckResult:
    """One check judged on several shapes — batch 1 and > 1, odd head counts and an odd B × H, Tq = 1 and
    1 < Tq < Tk: bugs hide in the shapes a battery never uses (a loop over batch × heads in chunks of 2,
    a batch-1 fast path). ``cases``: (label, thunk → CheckResult). Every shape is judged; the first failure
    is returned, prefixed with its shape, with the other shapes that fail — and, when the first one raised
    and a later one computed wrong numbers (or the other way round), that one's finding too: a crash at
    batch 2 must not hide what batch 1 gets wrong. A pass says every shape it was judged on."""
    passed, fails = [], []
    worst = None
    for label, run in cases:
        try:
            r = run()
        except TargetFailed as e:  # judged per shape: one that raises does not end the others
            r = CheckResult.fail(name, str(e) if str(e).startswith("not called") else f"the target {e}")
        if r.outcome is Outcome.FAIL:
            fails.append((label, r))
            continue
        if r.outcome is Outcome.HAZARD and worst is None:
            worst = r
            r.detail = f"{label}: {r.detail}"
        passed.append(label)
    if fails:
        return _first_failure(name, fails, passed)
    shapes = "; judged on B×H×Tq×Tk = " + ", ".join(passed)
    if worst is not None:
        worst.name, worst.detail = name, worst.detail + shapes
        return worst
    return CheckResult.ok(name, "every row matches the reference" + shapes)


def _first_failure(name: str, fails, passed) -> CheckResult:
    """The finding of a check that failed on some shapes. Wrong numbers lead (a crash at batch 2 must not
    hide what batch 1 computes wrong); a shape that raised is said after them. Only when every shape
    raised does the detail stay "the target raised …" — what report.unaccepted reads as a capability."""
    wrong = [(lb, r) for lb, r in fails if not r.detail.startswith(RAISED)]
    crashed = [(lb, r) for lb, r in fails if r.detail.startswith(RAISED)]
    if not wrong and not passed:
        r = crashed[0][1]
        r.name, r.detail = name, f"{r.detail} (at every shape: {', '.join(lb for lb, _ in crashed)})"
        return r
    (label, r), rest = (wrong or crashed)[0], (wrong or crashed)[1:]
    detail = f"{label}: {r.detail}"
    if wrong and crashed:
        detail += f"; at {crashed[0][0]} {crashed[0][1].detail}"
        rest += crashed[1:]
    if rest:
        detail += f" (also failing at {', '.join(lb for lb, _ in rest)})"
    if passed and not wrong:
        detail += f" (it ran at {', '.join(passed)})"
    r.name, r.detail = name, detail
    return r


def _shape(B, H, Tq, Tk, Hkv=None) -> str:
    return f"{B}×{H}×{Tq}×{Tk}" + (f" (Hkv={Hkv})" if Hkv and Hkv != H else "")


# ------------------------------------------------------------------------------------ the checks


CAUSAL_SHAPES = ((2, 2, 8), (1, 3, 7), (3, 3, 8))  # (B, H, T): batch 1, odd heads, an odd B × H (9)


def check_causal(ctx, dtype):
    def case(B, H, T, seed):
        q, k, v = _inputs(ctx, B=B, H=H, Tq=T, Tk=T, dtype=dtype, seed=seed)
        return lambda: compare(ctx, "causal", q, k, v, causal().materialize(B, 1, T, T), _future, causal_case=True)

    return over_shapes(
        "causal", [(_shape(B, H, T, T), case(B, H, T, 1 + n)) for n, (B, H, T) in enumerate(CAUSAL_SHAPES)]
    )


def _padding_reason(lengths, side, Tk):
    def why(b, i, j):
        pad = j >= lengths[b] if side == "right" else j < Tk - lengths[b]
        return "a padding position" if pad else "a future position"

    return why


def check_padding(ctx, dtype, side):
    def case(lengths, H, seed):
        B = len(lengths)
        q, k, v = _inputs(ctx, B=B, H=H, dtype=dtype, seed=seed)
        keep = padding(lengths, Tk=8, side=side)
        if (side == "left" and ctx.mask_family != "bidirectional") or ctx.causal_only:  # decoder-style: causal too
            keep = keep & causal()
        keep = keep.materialize(B, 1, 8, 8)
        real = padding(lengths, Tk=8, side=side).materialize(B, 1, 8, 8)[:, 0, 0]  # (B, Tq) rows that are tokens
        rows = real[:, None, :, None]  # padded query rows are judged by empty_rows
        why = _padding_reason(lengths, side, 8)
        return lambda: compare(ctx, f"padding_{side}", q, k, v, keep, why, rows=rows)

    cases = [([8, 5, 3], 2, 2), ([8, 5, 3], 3, 22), ([6], 3, 23)]  # and an odd B × H (9), batch 1 with padding
    return over_shapes(f"padding_{side}", [(_shape(len(n), H, 8, 8), case(n, H, s)) for n, H, s in cases])


def check_batch_independence(ctx, dtype):
    lengths = [8, 5, 3]
    q, k, v = _inputs(ctx, B=3, seed=3, dtype=dtype)
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
        q, k, v = _inputs(ctx, B=B, H=H, Tq=Tq, Tk=8, seed=seed, dtype=dtype)
        keep = causal().materialize(B, 1, Tq, 8)
        return lambda: compare(ctx, "decode_alignment", q, k, v, keep, _future, causal_case=True)

    cases = [(2, 2, 1), (2, 2, 3), (1, 3, 1), (1, 3, 3)]
    r = over_shapes("decode_alignment", [(f"Tq={Tq}, Tk=8, B={B}, H={H}", case(B, H, Tq, 4 + n))
                                         for n, (B, H, Tq) in enumerate(cases)])  # fmt: skip
    if r.passed:
        r.detail = "Tq < Tk is aligned bottom-right" + r.detail.removeprefix("every row matches the reference")
    return r


def check_q_longer_than_k(ctx, dtype):
    q, k, v = _inputs(ctx, B=1, Tq=6, Tk=3, seed=5, dtype=dtype)

    def why(b, i, j):
        return "q longer than k: bottom-right alignment leaves the top rows without keys"

    return compare(ctx, "q_longer_than_k", q, k, v, causal().materialize(1, 1, 6, 3), why, causal_case=True)


def check_sliding_window(ctx, dtype, W=3):
    """A window of W keys on a whole sequence, and while decoding with a cache (Tq = 1 and 3 after more
    than W cached keys): a decoder whose cached keys are never windowed sees them all."""

    def case(B, H, Tq, Tk, seed):
        q, k, v = _inputs(ctx, B=B, H=H, Tq=Tq, Tk=Tk, seed=seed, dtype=dtype)
        keep = sliding_window(W).materialize(B, 1, Tq, Tk)
        off = Tk - Tq

        def why(b, i, j):
            return "outside its window" if j <= i + off else "a future position"

        extra = (lambda o: window_hint(o, W, W, TOL[dtype])) if Tq == Tk else None
        unwindowed = [(f"the window is not applied while decoding with a cache (Tq = {Tq} < Tk = {Tk}): the queries "
                       "see every cached key", causal().materialize(B, 1, Tq, Tk))] if Tq < Tk else []  # fmt: skip
        return lambda: compare(ctx, "sliding_window", q, k, v, keep, why, extra=extra, first=unwindowed)

    cases = [(1, 2, 10, 10), (2, 3, 10, 10), (1, 2, 1, 9), (2, 3, 3, 9)]
    return over_shapes("sliding_window", [(_shape(B, H, Tq, Tk) + f", W={W}", case(B, H, Tq, Tk, 6 + n))
                                          for n, (B, H, Tq, Tk) in enumerate(cases)])  # fmt: skip


def check_document(ctx, dtype):
    ids = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2])
    q, k, v = _inputs(ctx, B=1, seed=7, dtype=dtype)
    keep = (document(ids) & causal()).materialize(1, 1, 8, 8)
    return compare(
        ctx, "document", q, k, v, keep, lambda b, i, j: "another document" if ids[j] != ids[i] else "a future position"
    )


def check_grouped_heads(ctx, dtype):
    """Grouped heads: 6 query heads on 2 kv heads, and 9 on 3 (an odd group count, an odd B × H)."""

    def case(B, H, Hkv, seed):
        q, k, v = _inputs(ctx, B=B, H=H, Hkv=Hkv, seed=seed, dtype=dtype)
        keep = None if ctx.mask_family == "bidirectional" else causal().materialize(B, 1, 8, 8)
        scale = ctx.scale_for(q.shape[-1], v.shape[-1])
        return lambda: compare(ctx, "grouped_heads", q, k, v, keep, _future,
                               extra=lambda o: tiled_heads(o, q, k, keep, scale, TOL[dtype], ctx.softcap))  # fmt: skip

    cases = [(1, 6, 2), (3, 9, 3)]
    return over_shapes("grouped_heads", [(_shape(B, H, 8, 8, Hkv), case(B, H, Hkv, 8 + n))
                                         for n, (B, H, Hkv) in enumerate(cases)])  # fmt: skip


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
    q, k, v = _inputs(
        ctx, B=1, H=2, seed=9, spread=0.5, dtype=dtype, **({"D": D} if D else {}), **({"Dv": Dv} if Dv else {})
    )
    keep = ctx.base_keep(1, 8, 8)
    w = ctx.weights(q, k, v, keep)
    bad = _rows_sum_to_one(name, w, keep, TOL[dtype])
    return q, k, v, keep, w, bad


def _log_spaced(lo: float, hi: float, n: int) -> list[float]:
    return [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]


def find_softcap(ctx, dtype) -> tuple[float, str] | None:
    """What the target's weights say of a soft cap, when that differs from what was declared: (the cap
    the mask checks should use — 0 for none — and the sentence that says it), or None when the
    declaration (or its absence) fits. Probed on logits of up to ±12, where a cap of 50 bends them by a
    tenth: plain softmax and the declared cap are fitted first; only when both miss the tolerance is a
    cap searched (a log grid from 0.5 to 10⁴, then golden section on log cap). A cap that fits no better
    than plain logits is no finding: the mask checks then say what is wrong."""
    q, k, v = _inputs(ctx, B=1, H=2, seed=16, spread=2.0, dtype=dtype)
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
    grid = _log_spaced(0.5, 1e4, 25)
    i = min(range(len(grid)), key=lambda j: miss(grid[j]))
    lo, hi = math.log(grid[max(i - 1, 0)]), math.log(grid[min(i + 1, len(grid) - 1)])
    g = (math.sqrt(5) - 1) / 2
    for _ in range(16):  # golden section on log cap
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        lo, hi = (lo, b) if miss(math.exp(a)) < miss(math.exp(b)) else (a, hi)
    cap = math.exp((lo + hi) / 2)
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


def check_normalization_axis(ctx, dtype):
    q, k, v = _inputs(ctx, B=1, H=2, Tq=6, Tk=8, seed=10, dtype=dtype)
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
        return CheckResult.fail("normalization_axis", "weights sum to 1 over queries: softmax on the wrong axis")
    return CheckResult.fail("normalization_axis", f"row sums range {float(rows.min()):.3f}…{float(rows.max()):.3f}")


def check_empty_rows(ctx, dtype):
    """Rows that may attend to nothing (an all-padding example): zeros. NaN/inf there is a failure
    (it poisons every gradient); a finite average of masked keys is a hazard (see judge)."""
    q, k, v = _inputs(ctx, B=2, dtype=dtype, seed=11)
    keep = padding([8, 0], Tk=8, side="left")
    if ctx.mask_family != "bidirectional":
        keep = keep & causal()
    keep = keep.materialize(2, 1, 8, 8)
    return compare(ctx, "empty_rows", q, k, v, keep, _padding_reason([8, 0], "left", 8))


def _garbage_case(ctx, dtype, where: str):
    """Garbage in example 1's padded keys or values; the real rows must not change. A causal target
    gets *left* padding (batched decoding), where the padded keys lie in the past of the real rows —
    with right padding they would sit in the future, hidden by the causal mask alone. Returns the
    garbage values that leaked, and ``leaks(value)`` to probe others (the magnitude a finite mask holds to)."""
    lengths, left = [8, 5], ctx.causal_only
    q, k, v = _inputs(ctx, B=2, seed=12, dtype=dtype)
    keep = padding(lengths, Tk=8, side="left" if left else "right")
    if ctx.causal_only:
        keep = keep & causal()
    keep = keep.materialize(2, 1, 8, 8)
    pad = slice(0, 3) if left else slice(5, 8)
    real = slice(3, 8) if left else slice(0, 5)
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
    q2, k2, v2 = _inputs(ctx, B=B, H=H, Tq=T, Tk=T, dtype=dtype, seed=15)
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
            f"exp({logit:g}) underflows to 0 in {_name(dtype)} and the row is 0/0 — the softmax does not subtract "
            "the row maximum (underflow, not a mask sentinel)",
        )
    leak = float(torch.where(keep.expand_as(obs), 0.0, obs).sum(-1).max())
    if leak > TOL[dtype]:
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
    return CheckResult.ok("sentinel_overrun", f"visible logits at {logit:g} still outrank masked keys")


OVERFLOW_LOGIT = {torch.float32: 100.0, torch.float16: 50.0, torch.bfloat16: 100.0}  # exp overflows each dtype
LONG_ROW = {torch.float32: 87.0, torch.float16: 10.0, torch.bfloat16: 87.0}  # each exp fits, 64 of them do not
DTYPE_MAX = {torch.float32: "3.4e38", torch.float16: "65504", torch.bfloat16: "3.4e38"}


def _overflowed(w, keep) -> tuple[int, int]:
    """Rows (that see a key) which came back NaN/inf or do not sum to 1: the signature of an overflow."""
    seen = torch.ones_like(w[..., 0], dtype=torch.bool) if keep is None else keep.expand_as(w).any(-1)
    bad = (~torch.isfinite(w).all(-1) | ((w.sum(-1) - 1).abs() > 0.05)) & seen
    return int(bad.sum()), int(seen.sum())


def _overflow_case(ctx, dtype, B, H, Tq, Tk, logit, seed, spread, Dv=None):
    """(rows that overflowed, rows, the same at ordinary logits): the control says whether the shape itself
    already breaks the target (then the large logits are not to blame)."""
    q, k, v = _inputs(ctx, B=B, H=H, Tq=Tq, Tk=Tk, dtype=torch.float32, seed=seed, spread=spread, D=Dv or 8, Dv=Dv)
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
        bad, rows, control = _overflow_case(ctx, dtype, B, H, Tq, Tk_, logit, seed, spread, Dv)
        if control:
            return CheckResult.fail(
                "overflow",
                f"at {_shape(B, H, Tq, Tk_)} {control} of {rows} rows do not normalize even at ordinary logits "
                "(see the mask checks): overflow cannot be judged there",
            )
        if bad and Tk_ == Tk:
            found.append(f"{what} sums past {_name(dtype)}'s {DTYPE_MAX[dtype]} although each exp fits "
                         f"({bad} of {rows} rows NaN, inf or zero)")  # fmt: skip
        elif bad:
            found.append(f"{what}, {bad} of {rows} rows came back NaN, inf or not summing to 1 (exp({logit + 3:g}) "
                         f"is beyond {_name(dtype)}'s {DTYPE_MAX[dtype]})")  # fmt: skip
    if found:
        return CheckResult.fail(
            "overflow", f"overflow in {_name(dtype)}: {'; '.join(found)}: the softmax does not subtract the row maximum"
        )
    return CheckResult.ok(
        "overflow", f"visible logits near {L:g} and a {Tk}-key row at {R:g} normalize in {_name(dtype)}"
    )


def _name(dtype) -> str:
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]


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
CHECKS = {f"{name}{_short(dt)}": (fn, dt) for dt in DTYPES for name, fn in BASE.items()}


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
