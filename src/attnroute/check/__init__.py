"""check/: the audit battery that judges any attention function against attnroute's reference."""

from .battery import CHECKS, CheckResult
from .report import CheckReport, check, select
from .targets import Target, TargetError, resolve

__all__ = ["CHECKS", "CheckReport", "CheckResult", "Target", "TargetError", "check", "resolve", "select"]
