"""`attnroute why` shown: the top (query side, key side) pairs and each side's totals, the sum checked; and
`attnroute composition`: the strongest head pairs by Q-, K- and V-composition."""

from __future__ import annotations

from rich.table import Table

from .text import signed

SIDE_ROWS = 8  # components listed per side


def _name(c: dict) -> str:
    at = f" @{c['position']}" if c.get("position") is not None else ""
    return f"{c['label']}{at}"


def why_tables(result: dict) -> list[Table]:
    m = result["meta"]
    t = Table(title=f"why {m['head']} attends where it does: {m['said']}")
    for col in ("query side", "key side", "term"):
        t.add_column(col, justify="right" if col == "term" else "left")
    for p in result["pairs"]:
        t.add_row(_name(p["query_side"]), _name(p["key_side"]), signed(p["term"]))
    cap = f" (soft-cap {m['softcap']:g}: terms scaled by the capped score over the raw)" if m["softcap"] else ""
    t.caption = (
        f"score {result['score']:+.4f} (scale {m['scale']:.4g}{cap}) = Σ of every pair {result['sum']:+.4f}; "
        f"difference {result['difference']:+.2e}"
    )
    sides = Table(title="totals per component (a side's component summed over the other side)")
    for col in ("query side", "total", "key side", "total "):
        sides.add_column(col, justify="right" if col.startswith("total") else "left")
    q, k = result["totals"]["query_side"], result["totals"]["key_side"]
    for a, b in zip(q[:SIDE_ROWS], k[:SIDE_ROWS], strict=False):
        sides.add_row(a["component"]["label"], signed(a["total"]), b["component"]["label"], signed(b["total"]))
    return [t, sides]


def composition_table(result: dict, rows: int = 12) -> Table:
    """The strongest Q-, K- and V-composition pairs side by side."""
    t = Table(title=f"composition from the weights ({result['meta']['definition']})")
    for kind in ("Q", "K", "V"):
        t.add_column(f"{kind}: sender → receiver")
        t.add_column("score", justify="right")
    top = [result["top"][k] for k in ("q", "k", "v")]
    for i in range(min(rows, max(len(x) for x in top))):
        cells = []
        for x in top:
            cells += [f"{x[i]['sender']} → {x[i]['receiver']}", f"{x[i]['score']:.3f}"] if i < len(x) else ["", ""]
        t.add_row(*cells)
    return t


__all__ = ["composition_table", "why_tables"]
