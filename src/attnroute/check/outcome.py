"""How a check ends: pass, fail, hazard or not applicable — never an exception counted as a pass.

pass     the routing matches the reference
fail     the routing is wrong, or the target raised, hung, returned a wrong shape or a non-finite
         value where a finite one was due (a crash is a finding, not a skip)
hazard   the routing is right but fragile under conditions the user may or may not have: NaN/inf
         in masked-out *values* leaking through 0·NaN in the matmul, or rows that may attend to
         nothing returning a finite average of masked keys instead of zeros
n/a      the target declared it cannot express the case (it raised attnroute.check.Unsupported),
         the user skipped it, or the target's mask convention cannot say it
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from enum import StrEnum


class Outcome(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    HAZARD = "hazard"
    NA = "n/a"


class Unsupported(Exception):  # noqa: N818  (the name a target raises: "this case is unsupported")
    """Raise this from a target for a case it cannot express (a mask it takes no argument for, Tq ≠ Tk
    for a self-attention-only function): the check is *not applicable*, not failed."""


@dataclass
class CheckResult:
    """One check's verdict. Build it with ok / fail / hazard / na."""

    name: str
    _: KW_ONLY
    outcome: Outcome
    detail: str = ""
    notes: list[str] = field(default_factory=list)  # e.g. the mask shapes the target accepted
    cause: str | None = None  # the mechanism that explains a failure (diagnose.ALTERNATIVES' names, …)
    shapes: dict | None = None  # {"failed": [{B, H, Tq, Tk, Hkv}], "passed": […]}: where it shows

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASS

    @classmethod
    def ok(cls, name: str, detail: str) -> CheckResult:
        return cls(name, outcome=Outcome.PASS, detail=detail)

    @classmethod
    def fail(cls, name: str, detail: str) -> CheckResult:
        return cls(name, outcome=Outcome.FAIL, detail=detail)

    @classmethod
    def hazard(cls, name: str, detail: str) -> CheckResult:
        return cls(name, outcome=Outcome.HAZARD, detail=detail)

    @classmethod
    def na(cls, name: str, detail: str) -> CheckResult:
        return cls(name, outcome=Outcome.NA, detail=detail)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "outcome": self.outcome.value,
            "passed": self.passed,
            "detail": self.detail,
            "notes": self.notes,
            "cause": self.cause,
            "shapes": self.shapes,
        }

    @classmethod
    def from_dict(cls, d: dict) -> CheckResult:
        return cls(
            d["name"],
            outcome=Outcome(d["outcome"]),
            detail=d.get("detail", ""),
            notes=list(d.get("notes", [])),
            cause=d.get("cause"),
            shapes=d.get("shapes"),
        )


__all__ = ["CheckResult", "Outcome", "Unsupported"]
