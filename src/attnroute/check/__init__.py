"""check/: the audit battery that judges any attention function against attnroute's reference."""

from .audit import CheckRun, audit
from .battery import CHECKS
from .outcome import CheckResult, Outcome, Unsupported
from .report import CheckReport, check, select
from .targets import Target, TargetError, resolve

__all__ = [
    "CHECKS",
    "CheckRun",
    "CheckReport",
    "CheckResult",
    "Outcome",
    "Target",
    "TargetError",
    "Unsupported",
    "audit",
    "check",
    "resolve",
    "select",
]
