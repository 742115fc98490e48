"""`attnroute patch` shown: its terminal tables, its figure (one heatmap per site, layers × heads —
kv heads for k and v — of the normalized score of the components measured exactly; per-position
patching shows layers × positions, the largest |normalized| over the units at each), its CSV columns."""

from __future__ import annotations

import numpy as np
from rich.table import Table

from ..read.ground.settle import settle_said
from ..read.patching import PatchResult
from .plotting import pyplot
from .text import plus_minus, signed

TITLE = "Activation patching: which components carry the clean/corrupt difference"
PATCH_COLUMNS = (
    "layer",
    "head",
    "site",
    "position",
    "exact",
    "normalized",
    "normalized_ci",
    "delta",
    "delta_ci",
    "estimate",
    "estimate_normalized",
)


def baselines_table(result: PatchResult) -> Table:
    """The metric on the clean and the corrupt runs: what 1 and 0 of the normalized score stand for."""
    m = result.meta
    t = Table(title=f"{m['metric']} over {m['n_prompts']} prompts ({m['direction']}): the two ends of 'normalized'")
    for col in ("run", m["metric"], "normalized"):
        t.add_column(col)
    t.add_row("clean", plus_minus(m["m_clean"], m["m_clean_ci"]), "1")
    t.add_row("corrupt", plus_minus(m["m_corrupt"], m["m_corrupt_ci"]), "0")
    return t


def patch_tables(result: PatchResult, rows_per_site: int = 10) -> list[Table]:
    """The baselines, each site's top components by |normalized| (with the estimate's agreement), and the
    direct effects when the metric is a logit difference."""
    out = [baselines_table(result)]
    out += [_site_table(result, site, rows_per_site) for site in result.meta.sites]
    if "rows" in result.direct:
        out.append(_direct_table(result.direct, rows_per_site))
    return out


def finished_sites():
    """``shown(result, event)`` for the CLI's partial results: the table of each site once it is settled
    (a site whose rounds are still running is in ``pending``), each site once."""
    printed: set[str] = set()

    def shown(result: PatchResult, event) -> list[Table]:
        new = [site for site in result.partial["done"] if site not in printed]
        printed.update(new)
        return [_site_table(result, site, 10) for site in new]

    return shown


def _site_table(result: PatchResult, site: str, rows_per_site: int) -> Table:
    m, a = result.meta, result.agreement[site]
    agree = (
        (f"estimate vs exact over {a['n']}: Spearman {a['spearman']:.2f}, R² {a['r2']:.2f}, slope {a['slope']:.2f}")
        if a["spearman"] is not None
        else f"estimate vs exact: {a['n']} measured"
    )
    t = Table(title=f"{site}: top {rows_per_site} by |normalized| ({m['direction']}, {m['metric']}) — {agree}")
    if m.get("exact", {}).get(site, {}).get("band") is not None:
        t.caption = settle_said(m["exact"][site], m.get("top", 10), f"{site} components", "measure more: --exact N")
    for col in ("component", "normalized", "Δ metric", "estimate (normalized)", "kv shared by"):
        t.add_column(col)
    rows = [r for r in result.rows if r["site"] == site and r["exact"] is not None and r["normalized"] is not None]
    for r in sorted(rows, key=lambda r: -abs(r["normalized"]))[:rows_per_site]:
        shared = ",".join(map(str, r.get("query_heads", []))) or "—"
        t.add_row(
            component(r),
            plus_minus(r["normalized"], r["normalized_ci"]),
            plus_minus(r["delta"], r["delta_ci"]),
            signed(r["estimate_normalized"]),
            shared,
        )
    return t


def _direct_table(d: dict, rows_per_site: int) -> Table:
    t = Table(title=f"direct effect on the logit difference (adds up to {d['adds_up_max_abs_diff']:.1e})")
    for col in ("head", "clean", "corrupt", "clean − corrupt"):
        t.add_column(col)
    for r in sorted(d["rows"], key=lambda r: -abs(r["difference"] or 0))[:rows_per_site]:
        t.add_row(
            f"L{r['layer']} h{r['head']}",
            plus_minus(r["clean"], r["clean_ci"]),
            plus_minus(r["corrupt"], r["corrupt_ci"]),
            plus_minus(r["difference"], r["difference_ci"]),
        )
    rest = d["rest"]
    t.add_row("rest", plus_minus(rest["clean"], rest["clean_ci"]), plus_minus(rest["corrupt"], rest["corrupt_ci"]), "")
    return t


def component(r: dict) -> str:
    unit = "" if r["head"] is None else (f" kv{r['head']}" if r["site"] in ("k", "v") else f" h{r['head']}")
    where = "" if r["position"] is None else f" @{r['position']}"
    return f"L{r['layer']}{unit} {r['site']}{where}"


def patch_grids(result: PatchResult) -> dict[str, np.ndarray]:
    """site -> [L, units] or [L, T] of normalized scores (NaN where not measured exactly): per-position grids
    show the largest |normalized| over the units at each position."""
    out = {}
    for site, g in result.grid.items():
        if g.ndim == 3:
            pick = np.where(np.isnan(g), -1.0, np.abs(g)).argmax(1)  # [L, T]: the first largest unit
            g = np.take_along_axis(g, pick[:, None, :], 1)[:, 0, :]
        out[site] = g
    return out


def patch_png(result: PatchResult, path):
    plt = pyplot()
    grids = patch_grids(result)
    fig, axes = plt.subplots(1, len(grids), figsize=(2.6 * len(grids) + 1.2, 4.2), squeeze=False)
    lim = max([np.nanmax(np.abs(g)) for g in grids.values() if np.isfinite(g).any()] + [1e-6])
    for ax, (site, g) in zip(axes[0], grids.items()):
        im = ax.imshow(g, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
        per_position = result.grid[site].ndim == 3
        ax.set_title(site, fontsize=9)
        step = max(1, g.shape[1] // 10)
        ax.set_xticks(range(0, g.shape[1], step))
        ax.set_xlabel("position" if per_position else ("kv head" if site in ("k", "v") else "head"), fontsize=8)
        ax.set_ylabel("layer", fontsize=8)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="normalized (1 = clean restored)")
    m = result.meta
    fig.suptitle(f"{m['direction']} patching, {m['metric']} over {m['n_prompts']} prompts", fontsize=9)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path


__all__ = [
    "PATCH_COLUMNS",
    "TITLE",
    "baselines_table",
    "component",
    "finished_sites",
    "patch_grids",
    "patch_png",
    "patch_tables",
]
