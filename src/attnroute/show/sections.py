"""The routing report's extra sections, from the JSON results other commands wrote: `learn` results
(`report --learn`) and experiment results — knockout, swap, needle, patch, routes (`report --add`).

A file is read, checked and rendered once, before any model runs: a missing file, a file that is not
such a result, or one with a missing or malformed field is refused in one line naming the field.
Each verb's module (show/knockout.py, …) holds its title and figure; the card is built by card.py.
"""

from __future__ import annotations

from ..errors import InputError
from ..read.experiments import KnockoutResult, NeedleResult, SwapResult
from ..read.patching import PatchResult, RoutesResult
from . import knockout, learn, needle, patch, routes, swap
from .card import card, row
from .jsonout import read_json
from .plotting import png

SECTIONS_MARK = "<!--__SECTIONS__-->"  # where report.html takes extra sections
# what each command writes: its result class (the JSON contract) and its figure
VERBS = {
    "knockout": (KnockoutResult, knockout.TITLE, knockout.knockout_png),
    "swap": (SwapResult, swap.TITLE, swap.swap_png),
    "needle": (NeedleResult, needle.TITLE, needle.needle_png),
    "patch": (PatchResult, patch.TITLE, patch.patch_png),
    "routes": (RoutesResult, routes.TITLE, routes.routes_png),
}
KINDS = {
    "learn": (tuple(learn.TITLES), "attnroute learn … --out DIR"),
    "add": (tuple(VERBS), "attnroute knockout|swap|needle|patch|routes --json"),
}


def figure(result: dict) -> bytes:
    """The figure of a knockout, swap, needle, patch or routes result as PNG bytes (the caller writes them)."""
    draw = VERBS[result["experiment"]][2]
    return png(lambda f: draw(result, f))


def section(result: dict) -> str:
    """A result of `report --add` as a card: its figure, verdict lines and summary."""
    kind = result["experiment"]
    title = f"{VERBS[kind][1]} ({result.get('model', '')})"
    return row(
        card(
            title,
            figure=figure(result),
            lines=result["verdict"]["lines"],
            summary=result.get("summary", {}),
            experiment=kind,
        )
    )


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
    if field == "add" and (problem := VERBS[kind][0].validate(data)):  # the contract of the command that wrote it
        raise InputError(f"{field} {path}: not a whole {kind} result: {problem}", field=field)
    try:
        return row(learn.section(data)) if field == "learn" else section(data)
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


__all__ = ["SECTIONS_MARK", "VERBS", "figure", "insert", "load", "load_all", "section"]
