"""`attnroute learn` shown: curves as sparklines and the numbers behind the verdict in the terminal; a
learn result as a card of the routing report, or as a page of its own (figures: learn_figures.py)."""

from __future__ import annotations

from importlib import resources

from rich.table import Table

from . import learn_figures
from .card import card, row

TITLES = {
    "induction": "Learn: an induction circuit forms",
    "scale": "Learn: the 1/√d_k scale",
    "pruning": "Learn: how many heads can go",
    "ff": "Learn: what a feed-forward layer adds to routing",
    "crossattn": "Learn: cross-attention, measured per attention mode",
}


def section(result: dict, png: bytes | None = None) -> str:
    """One card for the report: figure (``png``, drawn here when not given), verdict lines, summary table."""
    settings = ", ".join(f"{k}={v}" for k, v in result.get("settings", {}).items())
    return card(
        TITLES.get(result["experiment"], result["experiment"]),
        figure=png or learn_figures.png(result),
        lines=result["verdict"]["lines"],
        summary=result.get("summary", {}),
        note=f"settings: {settings}",
        kind="learn",
        experiment=result["experiment"],
    )


def _rows(results: list[dict], pngs=None) -> str:
    pngs = pngs or [None] * len(results)
    return "".join(row(section(r, p)) for r, p in zip(results, pngs))


def page(results: list[dict], pngs: list[bytes] | None = None) -> str:
    """A self-contained page holding only learn sections, styled like the routing report."""
    template = resources.files("attnroute.show").joinpath("report.html").read_text(encoding="utf-8")
    head = template[: template.index("<body>")].replace("attnroute routing report", "attnroute learn")
    return f"{head}<body><h1>attnroute learn</h1>{_rows(results, pngs)}</body></html>"


def sections(results: list[dict]) -> str:
    """Learn sections to add below the routing report's cards (report.insert takes them)."""
    return _rows(results)


SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values, lo: float | None = None, hi: float | None = None, width: int = 48) -> str:
    """A curve as one line of block characters (resampled to ``width``), for the terminal."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    if len(v) > width:
        v = v[np.linspace(0, len(v) - 1, width).round().astype(int)]
    lo = float(np.nanmin(v)) if lo is None else lo
    hi = float(np.nanmax(v)) if hi is None else hi
    span = hi - lo or 1.0
    return "".join(SPARK[int(np.clip((x - lo) / span, 0, 1) * (len(SPARK) - 1))] for x in v)


def learn_tables(result: dict) -> list[Table]:
    """A learn experiment in the terminal: its curves as sparklines, then the numbers behind the verdict."""
    curves = Table(title=f"learn {result['experiment']}: curves (left = step 0)", show_header=True)
    for col, j in (("curve", "left"), ("start", "right"), ("shape", "left"), ("end", "right")):
        curves.add_column(col, justify=j)
    for name, values in _curves(result):
        curves.add_row(name, f"{values[0]:.2f}", sparkline(values), f"{values[-1]:.2f}")
    numbers = Table(title="numbers", show_header=False)
    numbers.add_column("what")
    numbers.add_column("value", justify="right")
    for k, v in result.get("summary", {}).items():
        numbers.add_row(str(k), v if isinstance(v, str) else f"{v:.4g}" if isinstance(v, float) else str(v))
    return [curves, numbers]


def _curves(result: dict):
    kind = result["experiment"]
    if kind == "crossattn":
        yield "held-out loss", [r["loss"] for r in result["train"]]
        yield "held-out token accuracy", [r["accuracy"] for r in result["train"]]
        for mode, rows in result["prune"].items():
            yield f"{mode}: loss as heads are removed", [r["loss"] for r in rows]
        return
    if kind == "induction":
        c, h = result["curves"], result["heads"]
        yield "first-occurrence loss", c["loss_first"]
        yield "repeat loss", c["loss_repeat"]
        yield (
            f"previous-token score L{h['previous_token']['layer']}H{h['previous_token']['head']}",
            h["previous_token"]["curve"],
        )
        yield f"induction score L{h['induction']['layer']}H{h['induction']['head']}", h["induction"]["curve"]
    elif kind == "scale":
        for r in result["runs"]:
            yield (
                f"repeat loss d_k={r['head_dim']} {'1/√d_k' if r['scaled'] else 'no scale'}",
                r["curves"]["loss_repeat"],
            )
    elif kind == "pruning":
        for r in result["runs"]:
            yield f"loss vs heads pruned, {r['heads']} head(s)/layer", [p["loss"] for p in r["prune"]]
    elif kind == "ff":
        for r in result["runs"]:
            yield f"{r['task']}: {r['model']}", r["curves"]["loss"]


__all__ = ["TITLES", "learn_tables", "page", "section", "sections", "sparkline"]
