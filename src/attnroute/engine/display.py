"""Notebook displays without a script: small HTML cards built from a result's own JSON.

Jupyter calls ``_repr_html_``; what it returns here is plain HTML — no script, no style sheet, no
image from the network — and every piece of text from the data goes through ``html.escape``, so a
token such as ``<img onerror=…>`` stays text. The text repr beside it is one summary line: a result
never prints its arrays or a whole page.
"""

from __future__ import annotations

import math
from html import escape

CARD = (
    "font:13px/1.4 system-ui,sans-serif;border:1px solid #ddd;border-radius:6px;padding:8px 12px;max-width:980px;"
    "box-sizing:border-box;overflow:hidden"
)
SCROLL = "max-width:100%;overflow-x:auto"  # a wide table scrolls inside its card, never past the notebook's box
# the key a preview is ordered by, the first a table's rows carry: measured values before estimates
IMPORTANCE = ("exact", "delta", "term", "delta_p_route", "normalized", "estimate", "effect")
CELL = "padding:1px 8px 1px 0;text-align:left"
ROWS_SHOWN = 12


def text(value) -> str:
    """A value as escaped text: floats to 4 significant digits, NaN/None as n/a."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)) and len(value) > 8:
        return escape(f"[{', '.join(map(str, value[:8]))}, … {len(value)} items]")
    return escape(str(value))


def preview(rows: list[dict]) -> tuple[list[dict], str]:
    """The rows a preview shows first: by |exact| (measured rows first, then the rest by their estimate),
    else by the first other key of IMPORTANCE the rows carry, largest magnitude first; and a line saying so."""
    keys = [k for k in IMPORTANCE if any(isinstance(r.get(k), int | float) for r in rows)]
    if not keys:
        return rows, ""
    key = keys[0]

    def size(r: dict, k: str) -> float | None:
        v = r.get(k)
        return abs(v) if isinstance(v, int | float) and math.isfinite(v) else None

    def rank(r: dict) -> tuple:
        first = size(r, key)
        later = next((x for x in (size(r, k) for k in keys[1:]) if x is not None), 0.0)
        return (first is None, -(first if first is not None else later))

    said = f"largest |{key}| first" + (" (measured rows first)" if key == "exact" else "")
    return sorted(rows, key=rank), said


def table(rows: list[dict], columns: list[str] | None = None, limit: int = ROWS_SHOWN) -> str:
    if not rows:
        return ""
    columns = columns or [k for k, v in rows[0].items() if not isinstance(v, (dict, list)) or len(v) <= 4]
    head = "".join(f'<th style="{CELL}">{escape(c)}</th>' for c in columns)
    body = "".join(
        "<tr>" + "".join(f'<td style="{CELL}">{text(r.get(c))}</td>' for c in columns) + "</tr>" for r in rows[:limit]
    )
    more = (
        f"<div style='color:#666'>… {len(rows) - limit} more rows (to_dict() has them all)</div>"
        if len(rows) > limit
        else ""
    )
    return f"<div style='{SCROLL}'><table style='border-collapse:collapse'><tr>{head}</tr>{body}</table></div>{more}"


def pairs(d: dict) -> str:
    return table([{"": k, "value": v} for k, v in d.items()], ["", "value"], limit=len(d))


def card(title: str, body: str) -> str:
    return f'<div class="attnroute" style="{CARD}"><b>{escape(title)}</b>{body}</div>'


def result_html(data: dict, rows_key: str | None) -> str:
    """A result's card: its verdict lines, its summary, and the first rows of its main table."""
    lines = "".join(f"<li>{escape(str(x))}</li>" for x in data.get("verdict", {}).get("lines", []))
    summary = data.get("summary") or {}
    rows = data.get(rows_key) if rows_key else None
    parts = [f"<ul style='margin:4px 0'>{lines}</ul>" if lines else "", pairs(summary) if summary else ""]
    if isinstance(rows, list) and rows and isinstance(rows[0], dict):
        ordered, said = preview(rows)
        title = escape(rows_key) + (f" — {escape(said)}" if said else "")
        parts.append(f"<div style='margin-top:6px'><i>{title}</i></div>{table(ordered)}")
    return card(f"{data.get('experiment', 'result')} · {data.get('model', '')}", "".join(parts))


def summary_line(data: dict) -> str:
    lines = data.get("verdict", {}).get("lines", [])
    return f"<{data.get('experiment', 'result')} result of {data.get('model', '?')}: {lines[0] if lines else ''}>"


__all__ = ["card", "pairs", "preview", "result_html", "summary_line", "table", "text"]
