"""The routing report's extra sections, from the JSON results other commands wrote: `learn` results
(`report --learn`) and experiment results — every kind in settings.ADD_KINDS (`report --add`).

A file is read, checked and rendered once, before any model runs: a missing file, a file that is not
such a result, or one with a missing or malformed field is refused in one line naming the field.
Each verb's module (show/knockout.py, …) holds its title and figure; the card is built by card.py.
"""

from __future__ import annotations

import re

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


def figure(result: dict) -> bytes:
    """The figure of a result `report --add` draws (VERBS) as PNG bytes (the caller writes them)."""
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


LIMIT = 100_000  # layers, heads, tokens, positions, windows: past this no model attnroute reads has them


def _within(name: str, value, hi: int = LIMIT, lo: int = 0) -> str | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and lo <= value < hi
    return None if ok else f"{name} is {value!r}, expected an integer in [{lo}, {hi})"


HEAD_CELLS = 1 << 17  # layers × heads of a grid drawn: 131,072 (the largest models have ~16,000)
MAX_LABEL = 2_000  # characters of a label a result may carry (an edge, a component, a token): longer is no label


def _grid(m: dict, *names: str) -> list:
    """The layer and head counts a grid is drawn from, each and their product bounded (4,095 × 4,095 heads
    passed each bound and then asked for a 16-million-cell figure: a MemoryError)."""
    values = [m.get(n) for n in names]
    out = [(f"meta.{n}", v, 4096, 1) for n, v in zip(names, values)]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values[:2]):
        out.append(("meta.layers × meta.heads", values[0] * values[1], HEAD_CELLS + 1, 1))
    return out


def _patch_sizes(data: dict) -> list:
    m = data["meta"]
    L, H, Hkv = m.get("layers"), m.get("heads"), m.get("kv_heads")
    out = _grid(m, "layers", "heads", "kv_heads")
    if not all(isinstance(x, int) for x in (L, H, Hkv)):
        return out
    T = max((len(p.get("clean", [])) for p in m.get("prompts", []) if isinstance(p, dict)), default=1)
    out.append(("the number of rows", len(data["rows"]), 10 * LIMIT))
    for r in data["rows"][:LIMIT]:
        out.append(("rows[].layer", r["layer"], L))
        if r.get("head") is not None:
            out.append(("rows[].head", r["head"], Hkv if r["site"] in ("k", "v") else H))
        if r.get("position") is not None:
            out.append(("rows[].position", r["position"], max(T, 1)))
    return out


def _circuit_sizes(data: dict) -> list:
    m = data["meta"]
    L, H = m.get("layers"), m.get("heads")
    out = _grid(m, "layers", "heads") + [("the number of edges", len(data["edges"]), 10**7)]
    if not all(isinstance(x, int) for x in (L, H)):
        return out
    for r in data["edges"][:LIMIT]:
        for side in ("sender", "receiver"):
            node = r[side]
            if node.get("layer") is not None:
                out.append((f"edges[].{side}.layer", node["layer"], L))
            if node.get("head") is not None:
                out.append((f"edges[].{side}.head", node["head"], H))
    chosen = data["circuit"].get("chosen", {}).get("edges") or []
    out += [("circuit.chosen.edges[]", i, len(data["edges"])) for i in chosen[:LIMIT]]
    return out


def _route_sizes(kind: str, data: dict) -> list:
    tokens = data["meta"]["tokens"] if kind == "routes" else data["tokens"]
    T = len(tokens)
    if kind == "routes":
        positions = [p for r in data["routes"][:LIMIT] for p in (r["query"], r["key"])]
    else:
        positions = data["route"]["queries"] + data["route"]["keys"]
    return [("the number of tokens", T, LIMIT, 1)] + [("a route's position", p, T) for p in positions[:LIMIT]]


SENDERS, RECEIVERS, CHANNELS = ("embed", "head", "mlp"), ("head", "mlp", "logits"), ("q", "k", "v", None)


def _node_problem(data: dict) -> str | None:
    """An edge whose nodes are no nodes of a residual stream: a sender that reads (logits), a receiver kind
    attnroute never writes (banana), a channel other than q, k or v."""
    for r in data["edges"][:LIMIT]:
        s, d = r.get("sender") or {}, r.get("receiver") or {}
        if s.get("kind") not in SENDERS:
            return f"an edge's sender is a {s.get('kind')!r}; senders are {', '.join(SENDERS)}"
        if d.get("kind") not in RECEIVERS:
            return f"an edge's receiver is a {d.get('kind')!r}; receivers are {', '.join(RECEIVERS)}"
        if d.get("channel") not in CHANNELS or (d.get("kind") == "head") != (d.get("channel") is not None):
            return f"an edge into a {d.get('kind')} reads channel {d.get('channel')!r}; a head reads q, k or v"
        if not isinstance(r.get("label"), str) or len(r["label"]) > MAX_LABEL:
            return f"an edge's label is not text of at most {MAX_LABEL:,} characters"
    return None


def _why_sizes(data: dict) -> list:
    """A why result: its pairs and every label in them bounded (a 3,000,000-character label hung the page)."""
    pairs = data.get("pairs") or []
    labels = [side.get("label", "") for p in pairs[:LIMIT] for side in (p.get("query_side", {}), p.get("key_side", {}))]
    out = [
        ("the number of pairs", len(pairs), LIMIT),
        ("the number of tokens", len(data["meta"].get("tokens") or []), LIMIT),
    ]
    return out + [("a label's length", len(x) if isinstance(x, str) else -1, MAX_LABEL + 1) for x in labels]


def size_problem(kind: str, data: dict) -> str | None:
    """The first size in a result that would size an allocation or a figure and cannot be one attnroute
    wrote (a position of 10⁹, 10⁵ layers), checked before anything is built from it."""
    if kind == "circuit" and (problem := _node_problem(data)):
        return problem
    by_kind = {"patch": _patch_sizes, "circuit": _circuit_sizes, "why": _why_sizes}
    sizes = (
        by_kind[kind](data) if kind in by_kind else _route_sizes(kind, data) if kind in ("routes", "knockout") else []
    )
    rows = {"knockout": "windows", "swap": "layers", "needle": "lengths"}.get(kind)
    if rows:
        sizes.append((f"the number of {rows}", len(data[rows]), LIMIT))
    return next((p for name, v, *bounds in sizes if (p := _within(name, v, *bounds))), None)


def load(path, field: str) -> str:
    """The section (HTML) of one result file; ``field`` is "learn" or "add"."""
    return _section(path, field, _checked(path, field))


def _checked(path, field: str) -> dict:
    """One result file read and checked against its kind's contract and sizes."""
    kinds, written_by = KINDS[field]
    data = read_json(path, field, written_by)
    kind = data.get("experiment")
    if kind not in kinds:
        raise InputError(
            f"{field} {path}: not a result of `{written_by}` (experiment {kind!r}, expected one of {', '.join(kinds)})",
            field=field,
        )
    if field == "add" and (problem := VERBS[kind][0].validate(data) or size_problem(kind, data)):
        raise InputError(f"{field} {path}: not a whole {kind} result: {problem}", field=field)  # its contract, sizes
    return data


def _section(path, field: str, data: dict) -> str:
    try:
        return row(learn.section(data)) if field == "learn" else section(data)
    except (KeyError, TypeError, IndexError, ValueError, AttributeError) as e:
        raise InputError(
            f"{field} {path}: a {data['experiment']} result with a missing or malformed field "
            f"({type(e).__name__}: {e})",
            field=field,
        ) from None


def named_head(result: dict) -> list[int] | None:
    """The decoder self-attention head an added result is about — [layer, head] where the page can open on it:
    patch's strongest exactly measured head (or its queries), the top route's head, the strongest circuit
    edge's head, why's head; None for results about no head (knockout, swap, needle)."""
    kind = result.get("experiment")
    if kind == "patch":
        rows = [r for r in result["rows"] if r["exact"] and r["head"] is not None and r["site"] in ("head", "q")]
        rows = [r for r in rows if r.get("normalized") is not None]
        return (
            [rows[0]["layer"], rows[0]["head"]] if (rows := sorted(rows, key=lambda r: -abs(r["normalized"]))) else None
        )
    if kind == "routes":
        top = next((r for r in result["routes"] if r.get("stream") is None), None)
        return [top["layer"], top["head"]] if top else None
    if kind == "circuit":
        edges = sorted((e for e in result["edges"] if e["exact"] is not None), key=lambda e: -abs(e["exact"]))
        for e in edges:
            for node in (e["receiver"], e["sender"]):
                if (
                    node.get("kind") == "head"
                    and node.get("stream") in (None, "decoder")
                    and not node.get("attention") == "cross"
                ):
                    return [node["layer"], node["head"]]
        return None
    if kind == "why":
        found = re.fullmatch(r"L(\d+)\.H(\d+)", str(result["meta"].get("head", "")))
        return [int(found[1]), int(found[2])] if found else None
    return None


def opening(results) -> list[list[int]]:
    """The heads the added ``results`` name, in the order given (the page opens on the last two, side by side)."""
    heads = []
    for data in results:
        head = named_head(data)
        if head is not None and head not in heads:
            heads.append(head)
    return heads


def load_all(learn=(), add=()) -> tuple[list[str], list[list[int]]]:
    """Every section the user named, learn results first, in the order given, and the heads the added results
    name (``opening``): each file read once."""
    added = [(p, _checked(p, "add")) for p in add or ()]
    html = [load(p, "learn") for p in learn or ()] + [_section(p, "add", data) for p, data in added]
    return html, opening(data for _, data in added)


def insert(page: str, sections: list[str]) -> str:
    """The page with ``sections`` added below its cards (the place stays for more)."""
    if SECTIONS_MARK not in page:
        raise ValueError("the report template has no place for extra sections")
    return page.replace(SECTIONS_MARK, "".join(sections) + SECTIONS_MARK, 1)


__all__ = ["SECTIONS_MARK", "VERBS", "figure", "insert", "load", "load_all", "named_head", "opening", "section"]
