"""The sizes in a result file that would size an allocation or a figure, bounded before anything is built
from them (`report --add`, ar.load): a position of 10⁹, 10⁵ layers, a 3,000,000-character label, an edge
between nodes no residual stream has."""

from __future__ import annotations

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
    out.append(("the number of rows", len(data["rows"]), 10 * LIMIT))  # every table is "rows" (format 1)
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
    out = _grid(m, "layers", "heads") + [("the number of edges", len(data["rows"]), 10**7)]
    if not all(isinstance(x, int) for x in (L, H)):
        return out
    for r in data["rows"][:LIMIT]:
        for side in ("sender", "receiver"):
            node = r[side]
            if node.get("layer") is not None:
                out.append((f"rows[].{side}.layer", node["layer"], L))
            if node.get("head") is not None:
                out.append((f"rows[].{side}.head", node["head"], H))
    chosen = data["circuit"].get("chosen", {}).get("edges") or []
    out += [("circuit.chosen.edges[]", i, len(data["rows"])) for i in chosen[:LIMIT]]
    return out


def _route_sizes(kind: str, data: dict) -> list:
    tokens = data["meta"]["tokens"] if kind == "routes" else data["tokens"]
    T = len(tokens)
    if kind == "routes":
        positions = [p for r in data["rows"][:LIMIT] for p in (r["query"], r["key"])]
    else:
        positions = data["route"]["queries"] + data["route"]["keys"]
    return [("the number of tokens", T, LIMIT, 1)] + [("a route's position", p, T) for p in positions[:LIMIT]]


SENDERS, RECEIVERS, CHANNELS = ("embed", "head", "mlp"), ("head", "mlp", "logits"), ("q", "k", "v", None)


def _node_problem(data: dict) -> str | None:
    """An edge whose nodes are no nodes of a residual stream: a sender that reads (logits), a receiver kind
    attnroute never writes (banana), a channel other than q, k or v."""
    for r in data["rows"][:LIMIT]:
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
    pairs = data.get("rows") or []
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
    rows = {"knockout": "windows", "swap": "windows", "needle": "lengths"}.get(kind)
    if rows:
        sizes.append((f"the number of {rows}", len(data["rows"]), LIMIT))
    return next((p for name, v, *bounds in sizes if (p := _within(name, v, *bounds))), None)


__all__ = ["HEAD_CELLS", "LIMIT", "MAX_LABEL", "size_problem"]
