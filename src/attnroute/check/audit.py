"""`attnroute check` as one call: resolve the target (one function, or every attention of an `hf:`
model), run the battery on each, and refuse a target that could not be called at all."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.jsonable import Result
from ..errors import InputError
from ..settings import CheckSettings, verb
from .report import CheckReport, check, select
from .targets import resolve


@dataclass(repr=False)
class CheckRun(Result):
    """The reports of one `check` call: one per target function (an `hf:` model can give several)."""

    target: str
    strict: bool
    reports: list[CheckReport] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.reports)

    def to_dict(self) -> dict:
        if len(self.reports) == 1:
            return self.reports[0].to_dict()
        return {
            "target": self.target,
            "passed": self.passed,
            "strict": self.strict,
            "targets": [r.to_dict() for r in self.reports],
            "checks": [c for r in self.reports for c in r.to_dict()["checks"]],
        }

    def summaries(self) -> list[str]:
        return [r.summary() for r in self.reports]


@verb(CheckSettings)
def audit(settings: CheckSettings | None = None, **fields) -> CheckRun:
    """Run the battery on ``settings.target`` (module:function, file.py:function, torch.sdpa, hf:NAME, …)."""
    s = CheckSettings.of(settings, None, fields)
    if not s.target:
        raise InputError("target is empty: give module:function, torch.sdpa or hf:NAME", field="target")
    targets = resolve(s.target, s.convention)
    select(s.only, s.skip, {n for t in targets for n in t.extras})
    reports = [check(t, settings=s) for t in targets]
    if not any(r.called_at_all for r in reports):
        first = next((c.detail for r in reports for c in r.checks), "no checks ran")
        hint = (
            "; a decoder that takes a mask, but only a causal one, is checked in its own convention with "
            "`mask_family` causal"
            if s.convention == "causal"
            else ""
        )
        raise InputError(f"cannot call {s.target} with [B, H, Tq, D] tensors: {first}{hint}", field="target")
    return CheckRun(s.target, s.strict, reports)


__all__ = ["CheckRun", "audit"]
