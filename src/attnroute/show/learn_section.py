"""A learn experiment as a section of the routing report, or as a page of its own.

The section is a report card: the figure (PNG as a data: URI, which the report's
Content-Security-Policy allows), the verdict in words, and a table of the numbers behind it.
Every piece of text is escaped; nothing in it runs script.
"""

from __future__ import annotations

import base64
from html import escape
from importlib import resources

from . import learn_figures

TITLES = {
    "induction": "Learn: an induction circuit forms",
    "scale": "Learn: the 1/√d_k scale",
    "pruning": "Learn: how many heads can go",
    "ff": "Learn: what a feed-forward layer adds to routing",
    "crossattn": "Learn: cross-attention, measured per attention mode",
}


def section(result: dict, png: bytes | None = None) -> str:
    """One `<div class="card">` for the report: figure (``png``, drawn here when not given), verdict
    lines, summary table."""
    png = base64.b64encode(png or learn_figures.png(result)).decode()
    title = TITLES.get(result["experiment"], result["experiment"])
    lines = "".join(f"<li>{escape(line)}</li>" for line in result["verdict"]["lines"])
    rows = "".join(
        f'<tr><td>{escape(str(k))}</td><td class="num">{escape(_fmt(v))}</td></tr>'
        for k, v in result.get("summary", {}).items()
    )
    settings = ", ".join(f"{k}={v}" for k, v in result.get("settings", {}).items())
    return (
        f'<div class="card learn" data-experiment="{escape(result["experiment"])}">'
        f"<h2>{escape(title)}</h2>"
        f'<img alt="{escape(title)}" style="max-width:100%" src="data:image/png;base64,{png}">'
        f'<ul>{lines}</ul><table class="kv">{rows}</table>'
        f'<div class="note">settings: {escape(settings)}</div></div>'
    )


def _rows(results: list[dict], pngs=None) -> str:
    from .sections import row

    pngs = pngs or [None] * len(results)
    return "".join(row(section(r, p)) for r, p in zip(results, pngs))


def page(results: list[dict], pngs: list[bytes] | None = None) -> str:
    """A self-contained page holding only learn sections, styled like the routing report."""
    template = resources.files("attnroute.show").joinpath("report.html").read_text(encoding="utf-8")
    head = template[: template.index("<body>")].replace("attnroute routing report", "attnroute learn")
    return f"{head}<body><h1>attnroute learn</h1>{_rows(results, pngs)}</body></html>"


def insert(report_html: str, results: list[dict]) -> str:
    """The routing report with learn sections added below its cards."""
    from .sections import insert as insert_sections

    return insert_sections(report_html, [_rows(results)])


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
