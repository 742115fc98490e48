"""Running the battery and reporting: CheckReport with summary(), JSON, exit status."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ..engine import InputError
from .battery import CHECKS, CheckResult, Ctx


@dataclass
class CheckReport:
    target: str
    checks: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return all(c.passed or c.skipped for c in self.checks)

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.passed and not c.skipped]

    def summary(self) -> str:
        lines = [
            f"{self.target}: {'PASS' if self.passed else 'FAIL'} "
            f"({sum(c.passed for c in self.checks)} passed, {len(self.failed)} failed, "
            f"{sum(c.skipped for c in self.checks)} skipped, {self.seconds:.2f} s)"
        ]
        for c in self.checks:
            mark = "skip" if c.skipped else ("ok  " if c.passed else "FAIL")
            lines.append(f"  {mark} {c.name}: {c.detail}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "passed": self.passed,
            "checks": [
                {"name": c.name, "passed": c.passed, "skipped": c.skipped, "detail": c.detail} for c in self.checks
            ],
        }


def select(only=None, skip=None) -> list[str]:
    names = list(CHECKS)
    unknown = [n for n in (only or []) + (skip or []) if n not in CHECKS]
    if unknown:
        raise InputError(f"unknown check(s) {unknown}; known: {', '.join(names)}", field="only")
    if only:
        names = [n for n in names if n in only]
    return [n for n in names if n not in (skip or [])]


def check(fn, convention: str = "sdpa", *, only=None, skip=None, name: str | None = None) -> CheckReport:
    """Run the battery on ``fn(q, k, v, attn_mask=mask)``; ``assert report.passed, report.summary()``."""
    from .conventions import CONVENTIONS

    if convention not in CONVENTIONS:
        raise InputError(f"unknown convention {convention!r}; expected one of {CONVENTIONS}", field="convention")
    ctx = Ctx(fn, convention)
    report = CheckReport(name or getattr(fn, "__name__", repr(fn)))
    t0 = time.perf_counter()
    with torch.no_grad():
        for check_name in select(only, skip):
            try:
                result = CHECKS[check_name](ctx)
            except Exception as e:  # a target that breaks in an unexpected way fails that check, loudly
                result = CheckResult.fail(check_name, f"raised {type(e).__name__}: {e}")
            result.name = check_name
            report.checks.append(result)
    report.seconds = time.perf_counter() - t0
    return report
