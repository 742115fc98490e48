"""check/: the audit battery that judges any attention function against attnroute's reference."""

from .battery import CHECKS
from .outcome import CheckResult, Outcome, Unsupported
from .report import CheckReport, check, select
from .targets import Target, TargetError, resolve

__all__ = [
    "CHECKS",
    "CheckReport",
    "CheckResult",
    "Outcome",
    "Target",
    "TargetError",
    "Unsupported",
    "check",
    "resolve",
    "select",
]
