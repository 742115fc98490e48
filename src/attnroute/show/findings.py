"""Knockout, map-swap, needle, patch and routes results as sections of the routing report (`report --add PATH`).

Each result is the JSON its command writes (`attnroute knockout|swap|needle --json`); a section is its
figure, its verdict lines and its summary, like a learn section. show/ reads plain dicts only.
"""

from __future__ import annotations

import base64
from html import escape

from .knockout_figure import knockout_png, needle_png
from .patching_figures import patch_png, routes_png
from .plotting import png, pyplot

TITLES = {
    "knockout": "Route knockout: cut one route, layer window by layer window",
    "swap": "Map swap: prompt B run with prompt A's attention maps",
    "needle": "Dilution: a needle in growing context",
    "patch": "Activation patching: which components carry the clean/corrupt difference",
    "routes": "Route attribution: single query→key routes, estimated and verified",
}


def png_bytes(result: dict) -> bytes:
    """The figure of a knockout, swap or needle result as PNG bytes (the caller writes them)."""
    return png(lambda f: FIGURES[result["experiment"]](result, f))


def swap_png(result: dict, path):
    """KL of the swapped output from B's own and from A's, per window of layers."""
    plt = pyplot()
    rows = result["layers"]
    x = [r["layers"][0] for r in rows]
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    ax.plot(x, [r["kl_from_b"] for r in rows], marker="o", ms=3, label="KL(swapped ‖ B)")
    ax.plot(x, [r["kl_from_a"] for r in rows], marker="o", ms=3, color="#999", label="KL(swapped ‖ A)")
    ax.set_xlabel(f"first layer of the {result['window']}-layer window")
    ax.set_ylabel("nats")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path


FIGURES = {"knockout": knockout_png, "swap": swap_png, "needle": needle_png, "patch": patch_png, "routes": routes_png}


def section(result: dict) -> str:
    kind = result["experiment"]
    png = base64.b64encode(png_bytes(result)).decode()
    lines = "".join(f"<li>{escape(str(line))}</li>" for line in result["verdict"]["lines"])
    rows = "".join(
        f'<tr><td>{escape(str(k))}</td><td class="num">{escape(_fmt(v))}</td></tr>'
        for k, v in result.get("summary", {}).items()
    )
    return (
        f'<div class="row" style="margin-top:18px"><div class="card finding" data-experiment="{escape(kind)}">'
        f"<h2>{escape(TITLES[kind])} ({escape(str(result.get('model', '')))})</h2>"
        f'<img alt="{escape(TITLES[kind])}" style="max-width:100%" src="data:image/png;base64,{png}">'
        f'<ul>{lines}</ul><table class="kv">{rows}</table></div></div>'
    )


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


__all__ = ["FIGURES", "TITLES", "png_bytes", "section", "swap_png"]
