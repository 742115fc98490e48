"""The routing report's extra sections, from the JSON results other commands wrote: `learn` results
(`report --learn`) and experiment results — every kind in settings.ADD_KINDS (`report --add`), loaded
as typed results (show/results.py) and drawn from them.

A file is read, checked and rendered once, before any model runs: a missing file, a file that is not
such a result, or one with a missing or malformed field is refused in one line naming the field.
Each verb's module (show/knockout.py, …) holds its title and figure; the card is built by card.py.
"""

from __future__ import annotations

import re

from ..engine.jsonable import Result
from ..errors import InputError
from ..read.circuits import CircuitResult, WhyResult
from ..read.experiments import KnockoutResult, NeedleResult, SwapResult
from ..read.patching import PatchResult, RoutesResult
from ..settings import ADD_KINDS
from . import circuit, knockout, learn, needle, patch, routes, swap, why
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
    "circuit": (CircuitResult, circuit.TITLE, circuit.circuit_png),
    "why": (WhyResult, why.TITLE, why.why_png),
}
KINDS = {
    "learn": (tuple(learn.TITLES), "attnroute learn … --out DIR"),
    "add": (tuple(VERBS), f"attnroute {'|'.join(ADD_KINDS)} --json"),
}


def figure(result: Result) -> bytes:
    """The figure of a result `report --add` draws (VERBS) as PNG bytes (the caller writes them)."""
    draw = VERBS[result.KIND][2]
    return png(lambda f: draw(result, f))


def section(result: Result) -> str:
    """A result of `report --add` as a card: its figure, verdict lines and summary."""
    said = result.payload()  # the verdict and summary its JSON gives
    title = f"{VERBS[result.KIND][1]} ({result.model})"
    lines, summary = said["verdict"]["lines"], said.get("summary", {})
    return row(card(title, figure=figure(result), lines=lines, summary=summary, experiment=result.KIND))


def load(path, field: str) -> str:
    """The section (HTML) of one result file; ``field`` is "learn" or "add"."""
    if field == "add":
        return _section(path, field, added(path))
    return _section(path, field, _learn(path))


def added(path) -> Result:
    """One `report --add` file as its typed result (stamp, contract and sizes checked: show/results.py)."""
    from .results import load as load_result

    return load_result(path, field="add", kinds=tuple(VERBS))


def _learn(path) -> dict:
    """One `report --learn` file, read and checked to be a learn result."""
    kinds, written_by = KINDS["learn"]
    data = read_json(path, "learn", written_by)
    kind = data.get("experiment")
    if kind not in kinds:
        raise InputError(
            f"learn {path}: not a result of `{written_by}` (experiment {kind!r}, expected one of {', '.join(kinds)})",
            field="learn",
        )
    return data


def _section(path, field: str, result) -> str:
    try:
        return row(learn.section(result)) if field == "learn" else section(result)
    except (KeyError, TypeError, IndexError, ValueError, AttributeError) as e:
        kind = result["experiment"] if field == "learn" else result.KIND
        raise InputError(
            f"{field} {path}: a {kind} result with a missing or malformed field ({type(e).__name__}: {e})",
            field=field,
        ) from None


def _decoder_head(node: dict) -> bool:
    return node.get("kind") == "head" and node.get("stream") in (None, "decoder") and node.get("attention") != "cross"


def named_head(result: Result) -> list[int] | None:
    """The decoder self-attention head an added result is about — [layer, head] where the page can open on it:
    patch's strongest exactly measured head (or its queries), the top route's head, the strongest circuit
    edge's head, why's head; None for results about no head (knockout, swap, needle)."""
    if result.KIND == "patch":
        rows = [
            r for r in result.rows if r["exact"] is not None and r["head"] is not None and r["site"] in ("head", "q")
        ]
        rows = sorted((r for r in rows if r.get("normalized") is not None), key=lambda r: -abs(r["normalized"]))
        return [rows[0]["layer"], rows[0]["head"]] if rows else None
    if result.KIND == "routes":
        top = next((r for r in result.routes if r.get("stream") is None), None)
        return [top["layer"], top["head"]] if top else None
    if result.KIND == "circuit":
        edges = sorted((e for e in result.edges if e["exact"] is not None), key=lambda e: -abs(e["exact"]))
        node = next((n for e in edges for n in (e["receiver"], e["sender"]) if _decoder_head(n)), None)
        return None if node is None else [node["layer"], node["head"]]
    if result.KIND == "why":
        found = re.fullmatch(r"L(\d+)\.H(\d+)", str(result.meta.head))
        return [int(found[1]), int(found[2])] if found else None
    return None


def opening(results) -> list[list[int]]:
    """The heads the added ``results`` name, in the order given (the page opens on the last two, side by side)."""
    heads = []
    for result in results:
        head = named_head(result)
        if head is not None and head not in heads:
            heads.append(head)
    return heads


def load_all(learn=(), add=()) -> tuple[list[str], list[list[int]]]:
    """Every section the user named, learn results first, in the order given, and the heads the added results
    name (``opening``): each file read once."""
    results = [(p, added(p)) for p in add or ()]
    html = [load(p, "learn") for p in learn or ()] + [_section(p, "add", r) for p, r in results]
    return html, opening(r for _, r in results)


def insert(page: str, sections: list[str]) -> str:
    """The page with ``sections`` added below its cards (the place stays for more)."""
    if SECTIONS_MARK not in page:
        raise ValueError("the report template has no place for extra sections")
    return page.replace(SECTIONS_MARK, "".join(sections) + SECTIONS_MARK, 1)


__all__ = ["SECTIONS_MARK", "VERBS", "figure", "insert", "load", "load_all", "named_head", "opening", "section"]
