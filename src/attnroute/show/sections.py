"""The routing report's extra sections, from the JSON results other commands wrote: `learn` results
(`report --learn`) and experiment results — knockout, swap, needle (`report --add`).

A file is read, checked and rendered once, before any model runs: a missing file, a file that is not
such a result, or one with a missing or malformed field is refused in one line naming the field.
"""

from __future__ import annotations

from ..errors import InputError
from ..read.experiments import KnockoutResult, NeedleResult, SwapResult
from ..read.patching import PatchResult, RoutesResult
from . import findings, learn_section
from .jsonout import read_json

SECTIONS_MARK = "<!--__SECTIONS__-->"  # where report.html takes extra sections
RESULTS = {"knockout": KnockoutResult, "swap": SwapResult, "needle": NeedleResult, "patch": PatchResult,
           "routes": RoutesResult}  # fmt: skip  # what each command writes
KINDS = {
    "learn": (tuple(learn_section.TITLES), "attnroute learn … --out DIR"),
    "add": (tuple(findings.FIGURES), "attnroute knockout|swap|needle|patch|routes --json"),
}


def row(html: str) -> str:
    return f'<div class="row" style="margin-top:18px">{html}</div>'


def load(path, field: str) -> str:
    """The section (HTML) of one result file; ``field`` is "learn" or "add"."""
    kinds, written_by = KINDS[field]
    data = read_json(path, field, written_by)
    kind = data.get("experiment")
    if kind not in kinds:
        raise InputError(
            f"{field} {path}: not a result of `{written_by}` (experiment {kind!r}, expected one of {', '.join(kinds)})",
            field=field,
        )
    if field == "add" and (problem := RESULTS[kind].validate(data)):  # the contract of the command that wrote it
        raise InputError(f"{field} {path}: not a whole {kind} result: {problem}", field=field)
    try:
        return row(learn_section.section(data)) if field == "learn" else findings.section(data)
    except (KeyError, TypeError, IndexError, ValueError, AttributeError) as e:
        raise InputError(
            f"{field} {path}: a {kind} result with a missing or malformed field ({type(e).__name__}: {e})", field=field
        ) from None


def load_all(learn=(), add=()) -> list[str]:
    """Every section the user named, learn results first, in the order given."""
    return [load(p, "learn") for p in learn or ()] + [load(p, "add") for p in add or ()]


def insert(page: str, sections: list[str]) -> str:
    """The page with ``sections`` added below its cards (the place stays for more)."""
    if SECTIONS_MARK not in page:
        raise ValueError("the report template has no place for extra sections")
    return page.replace(SECTIONS_MARK, "".join(sections) + SECTIONS_MARK, 1)


__all__ = ["SECTIONS_MARK", "insert", "load", "load_all", "row"]
