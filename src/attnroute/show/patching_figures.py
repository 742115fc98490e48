"""Figures of `attnroute patch` and `attnroute routes` results, from their JSON (plain dicts only).

patch   one heatmap per site, layers × heads (kv heads for k and v): the normalized score of the
        components measured exactly (blank: estimate only); per-position patching shows layers ×
        positions, the largest |normalized| over the units at each
routes  the top routes drawn on the tokens: an arc from the key up to the query, its width the
        estimate's size, red where removing the route lowers the metric, blue where it raises it
"""

from __future__ import annotations

import numpy as np

from .plotting import pyplot


def patch_grids(result: dict) -> dict[str, np.ndarray]:
    """site -> [L, units] or [L, T] of normalized scores (NaN where not measured exactly)."""
    meta, out = result["meta"], {}
    for site in meta["sites"]:
        rows = [r for r in result["rows"] if r["site"] == site]
        per_position = any(r["position"] is not None for r in rows)
        units = {"layer": 1, "k": meta["kv_heads"], "v": meta["kv_heads"]}.get(site, meta["heads"])
        cols = max(r["position"] for r in rows) + 1 if per_position else units
        g = np.full((meta["layers"], cols), np.nan)
        for r in rows:
            if r["normalized"] is None:
                continue
            c = r["position"] if per_position else (r["head"] or 0)
            if np.isnan(g[r["layer"], c]) or abs(r["normalized"]) > abs(g[r["layer"], c]):
                g[r["layer"], c] = r["normalized"]
        out[site] = g
    return out


def patch_png(result: dict, path):
    plt = pyplot()
    grids = patch_grids(result)
    fig, axes = plt.subplots(1, len(grids), figsize=(2.6 * len(grids) + 1.2, 4.2), squeeze=False)
    lim = max([np.nanmax(np.abs(g)) for g in grids.values() if np.isfinite(g).any()] + [1e-6])
    for ax, (site, g) in zip(axes[0], grids.items()):
        im = ax.imshow(g, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
        per_position = any(r["position"] is not None for r in result["rows"] if r["site"] == site)
        ax.set_title(site, fontsize=9)
        step = max(1, g.shape[1] // 10)
        ax.set_xticks(range(0, g.shape[1], step))
        ax.set_xlabel("position" if per_position else ("kv head" if site in ("k", "v") else "head"), fontsize=8)
        ax.set_ylabel("layer", fontsize=8)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="normalized (1 = clean restored)")
    m = result["meta"]
    fig.suptitle(f"{m['direction']} patching, {m['metric']} over {m['n_prompts']} prompts", fontsize=9)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path


def routes_png(result: dict, path):
    plt = pyplot()
    tokens = result["meta"]["tokens"]
    routes = [r for r in result["routes"] if r.get("stream") is None][:20]
    T = len(tokens)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.42 * T), 3.6))
    big = max([abs(r["estimate"]) for r in routes] + [1e-9])
    for r in routes:
        i, j = r["query"], r["key"]
        xs = np.linspace(j, i, 40)
        h = 0.15 + 0.5 * abs(i - j) / max(1, T)
        ys = h * np.sin(np.linspace(0, np.pi, 40))
        ax.plot(
            xs,
            ys,
            color="#c0392b" if r["estimate"] < 0 else "#2e6fb7",
            lw=0.5 + 4 * abs(r["estimate"]) / big,
            alpha=0.75,
        )
    ax.set_xticks(range(T))
    ax.set_xticklabels([repr(t)[1:-1] for t in tokens], rotation=70, fontsize=7)
    ax.set_yticks([])
    ax.set_xlim(-0.5, T - 0.5)
    ax.set_ylim(-0.02, 0.8)
    ax.set_title(
        f"top routes by |estimate| of {result['meta']['metric']} (red: removing it lowers the metric)", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path


__all__ = ["patch_grids", "patch_png", "routes_png"]
