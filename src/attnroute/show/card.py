"""The one card builder of the report pages: a result as a `<div class="card">` — title, figure, verdict
lines, a summary table, more HTML, a note. The report's sections (`report --add`, `report --learn`) and
the explorer's saved page build every card here.

    html = card("Route knockout (smollm2)", figure=png, lines=["…"], summary={"windows": 26})

Every piece of text is escaped here; ``body`` is HTML the caller built (and escaped) itself. A figure is
a PNG as a data: URI, which the pages' Content-Security-Policy allows; nothing in a card runs script.
"""

from __future__ import annotations

import base64
from html import escape


def fmt(value) -> str:
    """A number as a card shows it: floats to 4 significant digits, the rest as text."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


LINE = 400  # characters of a verdict line shown; the whole line in its tooltip


def _line(text: str) -> str:
    if len(text) <= LINE:
        return f"<li>{escape(text)}</li>"
    return f'<li title="{escape(text)}">{escape(text[: LINE - 1])}…</li>'


def card(
    title: str,
    *,
    figure: bytes | None = None,
    lines=(),
    summary: dict | None = None,
    body: str = "",
    note: str = "",
    kind: str = "finding",
    experiment: str | None = None,
    element_id: str | None = None,
) -> str:
    attrs = f'class="card {escape(kind)}"' if kind else 'class="card"'
    if experiment is not None:
        attrs += f' data-experiment="{escape(experiment)}"'
    if element_id is not None:
        attrs += f' id="{escape(element_id)}"'
    parts = [f"<h2>{escape(title)}</h2>"]
    if figure is not None:
        src = base64.b64encode(figure).decode()
        parts.append(f'<img alt="{escape(title)}" style="max-width:100%" src="data:image/png;base64,{src}">')
    if lines:
        parts.append("<ul>" + "".join(_line(str(x)) for x in lines) + "</ul>")
    if summary:
        rows = "".join(
            f'<tr><td>{escape(str(k))}</td><td class="num">{escape(fmt(v))}</td></tr>' for k, v in summary.items()
        )
        parts.append(f'<table class="kv">{rows}</table>')
    parts.append(body)
    if note:
        parts.append(f'<div class="note">{escape(note)}</div>')
    return f"<div {attrs}>{''.join(parts)}</div>"


def row(html: str) -> str:
    """Cards side by side, below the page's own."""
    return f'<div class="row" style="margin-top:18px">{html}</div>'


__all__ = ["card", "fmt", "row"]
