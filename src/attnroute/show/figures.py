"""PNG versions of the report's main charts (matplotlib, headless Agg backend)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from ..read.roles import COLORS as ROLE_COLORS
from .jsonout import write_bytes
from .plotting import pyplot


def write_pngs(data: dict, out_dir) -> list[Path]:
    """The report's main charts as PNGs in ``out_dir``: head roles, entropy, weight versus effect (when the
    read measured effects) and the induction probe (a causal LM's)."""
    plt = pyplot()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [_roles_png(plt, data, out / "head_roles.png"), _entropy_png(plt, data, out / "entropy_hist.png")]
    if data["has_effects"]:
        paths.append(_weight_vs_effect_png(plt, data, out / "weight_vs_effect.png"))
    il = data["meta"].get("induction_loss")
    if il:
        paths.append(_induction_png(plt, il, out / "induction_loss.png"))
    return paths


def _roles_png(plt, data: dict, path: Path) -> Path:
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    L, H, names = data["layers"], data["heads"], list(ROLE_COLORS)
    fig, ax = plt.subplots(figsize=(1.2 + 0.35 * H, 1 + 0.22 * L))
    grid = np.array([[names.index(r) for r in row] for row in data["roles"]])
    ax.imshow(grid, cmap=ListedColormap([ROLE_COLORS[n] for n in names]), vmin=0, vmax=len(names) - 1, aspect="auto")
    ax.set_xlabel("query head")
    ax.set_ylabel("layer")
    ax.set_title(f"{data['model']}: head roles")
    ax.legend(
        handles=[Patch(color=ROLE_COLORS[n], label=n) for n in names],
        bbox_to_anchor=(1.02, 1),
        loc="upper left",
        fontsize=8,
    )
    return _save(fig, path)


def _entropy_png(plt, data: dict, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.hist(np.array(data["columns"]["entropy"]).ravel(), bins=20, color="#4c78a8", label="heads")
    ax.set_xlabel("mean row entropy (nats)")
    ax.set_ylabel("heads (count)")
    ax.set_title("entropy of all heads")
    ax.legend()
    return _save(fig, path)


def _weight_vs_effect_png(plt, data: dict, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    x, y = np.array(data["columns"]["sink_mass"]), np.array(data["columns"]["ablation_delta"])
    for role in ROLE_COLORS:
        m = np.array([[r == role for r in row] for row in data["roles"]])
        if m.any():
            ax.scatter(x[m], y[m], s=14, color=ROLE_COLORS[role], label=role)
    ax.set_xlabel("attention mass on sink positions")
    ax.set_ylabel("ablation Δ loss (nats)")
    ax.set_title("weight versus effect")
    ax.legend(fontsize=7)
    return _save(fig, path)


def _induction_png(plt, il: dict, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(3.6, 3.4))
    ax.bar(
        ["first repeat", "second repeat"],
        [il["first_repeat"], il["second_repeat"]],
        color=["#999", "#d62728"],
        label="mean next-token loss",
    )
    ax.set_ylabel("next-token loss (nats)")
    ax.set_title(f"induction probe (S = {il['S']})")
    ax.legend(fontsize=8)
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    """Rendered in memory, then written atomically (a failed write leaves an earlier chart whole)."""
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, dpi=110, format="png")
    pyplot().close(fig)
    return write_bytes(path, buf.getvalue())
