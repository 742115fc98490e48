"""Running the battery and reporting: CheckReport with counts per outcome, summary(), JSON.

Exit status the CLI derives from it: 0 no check failed, 1 a check failed (or, with strict, a hazard),
2 the target could not be called at all.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..engine import InputError
from ..settings import CheckSettings, verb
from .battery import CHECKS, RAISED, Ctx, run_check
from .diagnose import EVERY_WEIGHT, cause_said
from .outcome import CheckResult, Outcome, Unsupported
from .targets import Target

NOT_ABOUT_MASKS = ("scale", "normalization_axis", "cached_decode")


@dataclass(repr=False)
class CheckReport:
    """The battery's verdicts on one target: one CheckResult per check (pass, fail, hazard, n/a, with the
    row that saw what it must not), the mask shapes it accepted, the soft cap it declared, seconds taken."""

    target: str
    checks: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0
    strict: bool = False
    mask_shapes: list[str] = field(default_factory=list)  # "minimal", "full": the shapes the target accepted
    calls_reached: int = 0  # battery calls the target took without raising (returned something or hung)
    softcap: float | None = None  # the soft cap the target declared, applied by the reference too

    def __repr__(self) -> str:  # one line: the checks are .checks
        return f"<CheckReport {self.headline()}>"

    def _repr_html_(self) -> str:
        """The headline and one row per check (name, dtype, outcome, what it found): no script, escaped."""
        from ..engine.display import card, table

        rows = [{"check": c.name, "outcome": c.outcome.value, "detail": (c.detail or "")[:300]} for c in self.checks]
        bad = [r for r in rows if r["outcome"] != "pass"]
        return card(self.headline(), table(bad + [r for r in rows if r["outcome"] == "pass"], limit=60))

    def count(self, outcome: Outcome) -> int:
        return sum(c.outcome is outcome for c in self.checks)

    @property
    def failed(self) -> list[CheckResult]:
        bad = {Outcome.FAIL, Outcome.HAZARD} if self.strict else {Outcome.FAIL}
        return [c for c in self.checks if c.outcome in bad]

    @property
    def passed(self) -> bool:
        """No check failed (with strict: no hazard either). n/a never counts as passed *or* failed."""
        return not self.failed

    @property
    def called_at_all(self) -> bool:
        """False when no call reached the target (each raised or was refused) and no check passed."""
        return self.calls_reached > 0 or any(c.outcome in (Outcome.PASS, Outcome.HAZARD) for c in self.checks)

    def headline(self) -> str:
        """The first line: the verdict, the counts — and the root cause when one mechanism explains the failures."""
        n = len(self.checks)
        counts = ", ".join(f"{self.count(o)} {o.value}" for o in Outcome)
        verdict = "PASS" if self.passed else "FAIL"
        line = f"{self.target}: {verdict} ({counts}; {self.seconds:.2f} s)"
        if (rc := self.root_cause()) is not None:
            line += f" — root cause: {rc['says']} ({rc['explains']}{'; ' + rc['only'] if rc['only'] else ''})"
        elif n and self.count(Outcome.NA) * 2 >= n:
            line += f" — {self.count(Outcome.NA)} of {n} checks are not applicable to this target"
        return line

    def root_cause(self) -> dict | None:
        """The one mechanism that explains the most failing checks (all of them when it breaks every weight),
        the checks it explains and the shapes where it shows; None without a named failure."""
        return root_cause([c for c in self.checks if c.outcome is Outcome.FAIL])

    def summary(self) -> str:
        marks = {Outcome.PASS: "ok    ", Outcome.FAIL: "FAIL  ", Outcome.HAZARD: "hazard", Outcome.NA: "n/a   "}
        lines = [self.headline()]
        if self.mask_shapes:
            lines.append(f"  mask shapes accepted: {', '.join(self.mask_shapes)}")
        if self.softcap:
            lines.append(f"  soft cap {self.softcap:g}·tanh(s/{self.softcap:g}) before the mask, in the reference too")
        lines += [f"  {marks[c.outcome]} {c.name}: {c.detail}" for c in self.checks]
        return "\n".join(lines)

    @classmethod
    def from_dict(cls, d: dict) -> CheckReport:
        """The report back from its JSON (what the check process sends its parent)."""
        return cls(
            d["target"],
            [CheckResult.from_dict(c) for c in d["checks"]],
            d.get("seconds", 0.0),
            d.get("strict", False),
            list(d.get("mask_shapes", [])),
            softcap=d.get("softcap"),
        )

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "passed": self.passed,
            "strict": self.strict,
            "counts": {o.value: self.count(o) for o in Outcome},
            "root_cause": self.root_cause(),
            "mask_shapes": self.mask_shapes,
            "softcap": self.softcap,
            "seconds": round(self.seconds, 3),
            "checks": [c.to_dict() for c in self.checks],
        }


# where a mechanism shows, when its failing shapes and the shapes it passes at part on one size
SHAPE_SPLITS = (
    ("only at batch > 1 (batch 1 is right)", lambda z: z["B"] > 1),
    ("only at batch 1 (batch > 1 is right)", lambda z: z["B"] == 1),
    ("only with grouped heads (H > Hkv)", lambda z: z["Hkv"] < z["H"]),
    ("only while decoding (Tq < Tk)", lambda z: z["Tq"] < z["Tk"]),
    ("only at an odd B × H", lambda z: (z["B"] * z["H"]) % 2 == 1),
    ("only at odd head counts", lambda z: z["H"] % 2 == 1),
)


def root_cause(failing: list[CheckResult]) -> dict | None:
    """The mechanism named by most failing checks (a cause that breaks every weight explains them all)."""
    named = [c for c in failing if c.cause]
    if not named:
        return None
    every = next((c for c in named if c.cause in EVERY_WEIGHT), None)
    if every is not None:
        cause, group = every.cause, failing
    else:
        counts: dict[str, list[CheckResult]] = {}
        for c in named:
            counts.setdefault(c.cause, []).append(c)
        cause, group = max(counts.items(), key=lambda kv: len(kv[1]))  # ties: the first named, in check order
    failed = [z for c in group for z in (c.shapes or {}).get("failed", []) if "B" in z]
    passed = [z for c in group for z in (c.shapes or {}).get("passed", []) if "B" in z]
    only = next(
        (
            said
            for said, split in SHAPE_SPLITS
            if failed and passed and all(split(z) for z in failed) and not any(split(z) for z in passed)
        ),
        None,
    )
    return {
        "mechanism": cause,
        "says": cause_said(cause),
        "checks": [c.name for c in group],
        "explains": f"explains {len(group)} of {len(failing)} failing checks",
        "only": only,
    }


def select(only=None, skip=None, extra=()) -> list[str]:
    names = list(CHECKS) + list(extra)
    unknown = [n for n in (*(only or ()), *(skip or ())) if n not in names]
    if unknown:
        raise InputError(f"unknown check(s) {unknown}; known: {', '.join(names)}", field="only")
    if only:
        names = [n for n in names if n in only]
    return names


@verb(CheckSettings)
def check(
    target, convention: str | None = None, *, settings: CheckSettings | None = None, on_check=None, **fields
) -> CheckReport:
    """Run the battery on ``target``: a function ``fn(q, k, v, attn_mask=mask)``, or a check.targets.Target
    (what an `hf:` model or a built-in name resolves to: its head dim, mask family, scale and extra checks).
    ``assert report.passed, report.summary()``. The settings override what the target says of itself."""
    if convention is not None:
        fields = {**fields, "convention": convention}
    s = CheckSettings.of(settings, None, fields)
    t = (
        target
        if isinstance(target, Target)
        else Target(getattr(target, "__name__", repr(target)), target, s.convention)
    )
    scale = s.scale if s.scale is not None else t.scale
    softcap = s.softcap if s.softcap is not None else t.softcap
    ctx = Ctx(
        t.fn,
        t.convention,
        scale=scale,
        head_dim=t.head_dim,
        timeout=s.timeout,
        mask_family=s.mask_family or t.mask_family,
        softcap=softcap,
        window=s.window if s.window is not None else t.window,
        sinks=s.sinks or t.sinks,
    )
    report = CheckReport(t.name, strict=s.strict, softcap=ctx.declared_softcap)
    t0 = time.perf_counter()
    for name in select(s.only, None, t.extras):
        report.checks.append(_one(ctx, name, s, t))
        if on_check is not None:  # the check process says each result as it ends
            on_check(report.checks[-1])
    if ctx.call.mutated:
        report.checks.append(
            CheckResult.fail(
                "inputs_untouched",
                f"the target changed its input {ctx.call.mutated!r} "
                "in place; every verdict above used pristine copies for the reference",
            )
        )
    report.mask_shapes = sorted(ctx.call.shapes)
    report.calls_reached = ctx.call.reached
    unaccepted(report.checks, s.strict)
    report.seconds = time.perf_counter() - t0
    return report


check.Unsupported = Unsupported  # `attnroute.check` is this function: attnroute.check.Unsupported still resolves


def _one(ctx: Ctx, name: str, s: CheckSettings, t: Target) -> CheckResult:
    if name in (s.skip or ()):
        return CheckResult.na(name, "skipped by request")
    result = t.extras[name]() if name in t.extras else run_check(ctx, name)
    if t.mask_source and result.outcome is Outcome.FAIL and not name.startswith(NOT_ABOUT_MASKS):
        result.detail += f" (mask built by transformers' {t.mask_source})"
    return result


# cases whose only difference from the cases a target passes is their shape: a target built without that
# capability (plain SDPA without enable_gqa, a self-attention-only module) raises on them in every dtype
SHAPE_CASES = {
    "grouped_heads": "grouped heads (H = 6, Hkv = 2)",
    "q_longer_than_k": "more queries than keys (Tq = 6, Tk = 3)",
}


def _dtype_of(name: str) -> str:
    return "fp16" if name.endswith("_fp16") else "bf16" if name.endswith("_bf16") else "fp32"


def unaccepted(checks: list[CheckResult], strict: bool) -> None:
    """A shape case that raised the same exception type in every dtype, while the target passed other
    cases in each of those dtypes, is a capability the target lacks: n/a, saying which shape and what it
    raised. An exception in one dtype only, or a target that passes nothing, stays a fail; ``strict``
    keeps them fails (and says why)."""
    for base, shape in SHAPE_CASES.items():
        cases = [c for c in checks if c.name.removesuffix("_fp16").removesuffix("_bf16") == base]
        if len(cases) < 2 or not all(c.outcome is Outcome.FAIL and c.detail.startswith(RAISED) for c in cases):
            continue
        if len({c.detail[len(RAISED) :].split(":")[0] for c in cases}) != 1:
            continue  # different exceptions in different dtypes: not one missing capability
        others = [c for c in checks if c not in cases and c.outcome in (Outcome.PASS, Outcome.HAZARD)]
        if not all(any(_dtype_of(o.name) == _dtype_of(c.name) for o in others) for c in cases):
            continue  # the target accepts nothing else in that dtype either
        for c in cases:
            raised = c.detail[len(RAISED) :]
            if strict:
                c.detail = f"the target does not accept {shape}: {raised} (--strict: an unaccepted case fails)"
            else:
                c.outcome, c.detail = Outcome.NA, f"the target does not accept {shape}: {raised}"


__all__ = ["CheckReport", "check", "select"]
