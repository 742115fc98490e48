"""The battery's harness: one target under test (Ctx), the cases' inputs, and the judgement of every query
row against the reference.

Values are one-hot per key position (v[b, g, j] = e_j), so a target's output row *is* that row's
attention weights, and a failure can name the place: "example 0, head 1, query 1 took 0.31 from
key 3, a future position". The expected weights come from the list reference
(engine/backends/reference.py: plain Python floats, fp64), never from the backends under test.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..engine import attend, causal, predicate, sliding_window
from .conventions import Caller, TargetFailed
from .diagnose import Explanation, explain
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
        window: int | None = None,
        sinks: int = 0,
    ):
        self.window, self.sinks = window, sinks  # a windowed decoder's W keys and leading sink keys
        own = self.decoder_keep if window is not None else None
        self.call = Caller(fn, convention, own=own, **({} if timeout is None else {"timeout": timeout}))
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
        """The mask of checks that are not about masks: none, or the decoder's own for a causal-only target."""
        return self.decoder_keep(B, Tq, Tk) if self.causal_only else None

    def decoder_keep(self, B: int, Tq: int, Tk: int, window: int | None = None) -> torch.Tensor:
        """What a decoder's queries may see [B, 1, Tq, Tk] (bottom-right): causal, within its window of W
        keys (``window`` or the declared one) when it has one, plus its leading sink keys."""
        W = window or self.window
        if W is None:
            return causal().materialize(B, 1, Tq, Tk)
        keep = sliding_window(W)
        if self.sinks:
            keep = keep | (predicate(lambda b, h, q, kv: kv < self.sinks, name="sinks") & causal())
        return keep.materialize(B, 1, Tq, Tk)

    def weights(self, q, k, v, keep) -> torch.Tensor:
        out = self.call(q, k, v, keep)
        return out[..., : k.shape[2]].double()  # (B, H, Tq, Tk): one-hot values make rows the weights

    def reference(self, q, k, v, keep) -> torch.Tensor:
        scale = self.scale_for(q.shape[-1], v.shape[-1])
        out = attend(q.double(), k.double(), v.double(), keep, scale=scale, softcap=self.softcap, impl="reference")
        return out[..., : k.shape[2]]


def inputs(*, B=2, H=2, Hkv=None, Tq=8, Tk=8, dtype=torch.float32, seed=0, spread=1.0, D=None, Dv=None):
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


def case_inputs(ctx: Ctx, **kw):
    if ctx.head_dim and "D" not in kw:
        kw["D"] = max(ctx.head_dim, kw.get("Tk", 8))
    return inputs(**kw)


def dtype_suffix(dtype) -> str:
    return {torch.float32: "", torch.float16: "_fp16", torch.bfloat16: "_bf16"}[dtype]


def dtype_name(dtype) -> str:
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]


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


def judge(name, obs, exp, keep, tol, why_masked, *, explain_cause=None, rows=None) -> CheckResult:
    """Rows that may see a key must match the reference (else fail, with the cause when one is
    found); rows that may see nothing must be zeros — NaN/inf there fails (it reaches every
    gradient), a finite average of masked keys is a hazard. ``rows`` limits the judgement to
    the query rows that matter (padded queries in a padding check)."""
    judged = torch.ones_like(obs[..., :1], dtype=torch.bool) if rows is None else rows.expand(*obs.shape[:-1], 1)
    has_key = judged if keep is None else judged & keep.expand_as(obs).any(-1, keepdim=True)
    msg = first_difference(torch.where(has_key, obs, exp), exp, keep, tol, why_masked)
    if msg is not None:
        cause = explain_cause(has_key) if explain_cause else None
        result = CheckResult.fail(name, f"{msg}; {cause.says}" if cause else msg)
        result.cause = cause.name if cause else None
        return result
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
    ctx: Ctx, name, q, k, v, keep, why_masked, *, extra=None, causal_case=False, rows=None, first=()
) -> CheckResult:
    """Run the target on one case and judge every row against the reference."""
    obs = ctx.weights(q, k, v, keep)
    exp = ctx.reference(q, k, v, keep)
    tol = TOL[q.dtype]
    scale = ctx.scale_for(q.shape[-1], v.shape[-1])

    def cause(judged) -> Explanation | None:
        why = explain(
            obs, q, k, keep, scale, tol, causal_case=causal_case, rows=judged, exp=exp, first=first, softcap=ctx.softcap
        )
        return why or (extra(obs) if extra else None)

    return judge(name, obs, exp, keep, tol, why_masked, explain_cause=cause, rows=rows)


def future(b, i, j):
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
        r = _first_failure(name, fails, passed)
        r.shapes = {"failed": _sizes(lb for lb, _ in fails), "passed": _sizes(passed)}
        return r
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


class Shape(str):
    """A case's shape as the verdicts say it ("2×3×8×8 (Hkv=1)"), its sizes kept for the root cause (which
    shapes a mechanism shows at: "only at batch > 1")."""

    def __new__(cls, B: int, H: int, Tq: int, Tk: int, Hkv: int | None = None, extra: str = "", text: str = ""):
        text = text or f"{B}×{H}×{Tq}×{Tk}" + (f" (Hkv={Hkv})" if Hkv and Hkv != H else "") + extra
        shape = super().__new__(cls, text)
        shape.sizes = {"B": B, "H": H, "Tq": Tq, "Tk": Tk, "Hkv": Hkv or H}
        return shape


def shape_label(B, H, Tq, Tk, Hkv=None, extra: str = "", text: str = "") -> Shape:
    return Shape(B, H, Tq, Tk, Hkv, extra, text)


def _sizes(labels) -> list[dict]:
    return [getattr(x, "sizes", {"label": str(x)}) for x in labels]


__all__ = [
    "BIG_FINITE",
    "RAISED",
    "SCALE_TOL",
    "Shape",
    "TOL",
    "Ctx",
    "case_inputs",
    "compare",
    "dtype_name",
    "dtype_suffix",
    "first_difference",
    "future",
    "inputs",
    "judge",
    "over_shapes",
    "shape_label",
]
