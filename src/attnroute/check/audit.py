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

    KIND = "check"
    TABLE = "checks"  # its table's key before format 1 (an alias of rows until 0.3)

    target: str
    strict: bool
    reports: list[CheckReport] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.reports)

    def payload(self) -> dict:
        if len(self.reports) == 1:
            return self.reports[0].to_dict()
        causes = [{"target": r.target, **rc} for r in self.reports if (rc := r.root_cause()) is not None]
        return {
            "target": self.target,
            "passed": self.passed,
            "strict": self.strict,
            "root_cause": causes[0] if causes else None,
            "targets": [r.to_dict() for r in self.reports],
            "checks": [c for r in self.reports for c in r.to_dict()["checks"]],
        }

    @classmethod
    def from_dict(cls, data: dict) -> CheckRun:
        targets = data.get("targets") or [data]  # one target's run is its report's JSON
        return cls(data["target"], data["strict"], [CheckReport.from_dict(t) for t in targets])

    def summaries(self) -> list[str]:
        return [r.summary() for r in self.reports]


@verb(CheckSettings)
def audit(settings: CheckSettings | None = None, **fields) -> CheckRun:
    """`attnroute check`: the battery on ``settings.target`` (module:function, file.py:function, torch.sdpa,
    hf:NAME, …), run in a check process that can be stopped (isolate.py): a target that hangs, holds the
    interpreter, prints, forks or exits is reported, never followed."""
    from .isolate import run_isolated

    s = CheckSettings.of(settings, None, fields)
    if not s.target:
        raise InputError("target is empty: give module:function, torch.sdpa or hf:NAME", field="target")
    return CheckRun(s.target, s.strict, run_isolated(s, s.timeout))


def run_checks(settings: CheckSettings, on_plan=None, on_check=None) -> CheckRun:
    """The battery on ``settings.target`` in this process (what the check process runs): the targets
    resolved, their plan said to ``on_plan``, each result to ``on_check(report index, result)``."""
    s = settings
    if not s.target:
        raise InputError("target is empty: give module:function, torch.sdpa or hf:NAME", field="target")
    targets = resolve(s.target, s.convention)
    select(s.only, s.skip, {n for t in targets for n in t.extras})
    plan = [{"name": t.name, "checks": select(s.only, None, t.extras)} for t in targets]
    if on_plan:
        on_plan(plan)
    reports = [
        check(t, settings=s, on_check=(lambda r, i=i: on_check(i, r)) if on_check else None)
        for i, t in enumerate(targets)
    ]
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


__all__ = ["CheckRun", "audit", "run_checks"]
