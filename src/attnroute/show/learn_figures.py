"""Figures of the learn experiments (matplotlib, headless), drawn from their JSON results.

Each function takes the result dict a `attnroute learn …` command writes and returns a Figure;
``png`` renders the one an experiment names. show/ reads plain dicts, so it never imports learn/.
"""

from __future__ import annotations

import io

import numpy as np

from ..read.roles import COLORS
from .plotting import pyplot

# the two roles a trained circuit shares with real models take their colours from read/roles.py
ROLE = {
    "previous_token": COLORS["previous-token"],
    "induction": COLORS["induction"],
    "positional": "#2ca02c",
    "other": "#bbbbbb",
}


def png(result: dict) -> bytes:
    """The experiment's figure as PNG bytes (drawn once; the CLI writes them and embeds them)."""
    fig = globals()[result["experiment"]](result)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    pyplot().close(fig)
    return buf.getvalue()


def induction(result: dict):
    """Losses and head scores against steps with the phase change marked, and the ablation bars."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.9), gridspec_kw={"width_ratios": [1, 1, 1.1]})
    _induction_losses(axes[0], result)
    _induction_scores(axes[1], result)
    _induction_ablation(axes[2], result)
    fig.suptitle(result["verdict"]["lines"][0], fontsize=9)
    return fig


def _induction_losses(ax, result: dict) -> None:
    c = result["curves"]
    steps = np.array(c["steps"])
    ax.plot(steps, c["loss_first"], color="#777", label="first occurrence")
    ax.plot(steps, c["loss_repeat"], color=ROLE["induction"], label="repeat")
    _mark_phase(ax, result["phase_change"])
    ax.set_xlabel("training step")
    ax.set_ylabel("next-token loss (nats)")
    ax.set_title("loss on the two copies")
    ax.legend(fontsize=8)


def _induction_scores(ax, result: dict) -> None:
    c, heads = result["curves"], result["heads"]
    steps = np.array(c["steps"])
    prev, ind = np.array(c["prev_token"]), np.array(c["induction"])  # (E, L, H)
    L, H = prev.shape[1:]
    for layer in range(L):
        for head in range(H):
            if layer < L - 1:
                ax.plot(steps, prev[:, layer, head], color=ROLE["previous_token"], alpha=0.18, lw=0.8)
            if layer > 0:
                ax.plot(steps, ind[:, layer, head], color=ROLE["induction"], alpha=0.18, lw=0.8)
    p, i = heads["previous_token"], heads["induction"]
    ax.plot(
        steps, p["curve"], color=ROLE["previous_token"], lw=2, label=f"previous-token score, L{p['layer']}H{p['head']}"
    )
    ax.plot(steps, i["curve"], color=ROLE["induction"], lw=2, label=f"induction score, L{i['layer']}H{i['head']}")
    if "positional" in c and "positional_head" in result:
        ph = result["positional_head"]
        pos = np.array(c["positional"])[:, ph["layer"], ph["head"]]
        label = f"weight {ph['offset']} back (no repeat), L{ph['layer']}H{ph['head']}"
        ax.plot(steps, pos, color=ROLE["positional"], lw=2, label=label)
    _mark_phase(ax, result["phase_change"])
    ax.set_ylim(0, 1)
    ax.set_xlabel("training step")
    ax.set_ylabel("score (weight on the right key)")
    ax.set_title("head scores (thin: every other head)")
    ax.legend(fontsize=7, loc="upper left")


def _induction_ablation(ax, result: dict) -> None:
    heads, abl = result["heads"], result["ablation"]
    removed = np.array(abl["gain_removed"])  # (L, H)
    role_of = {}
    for name, h in [*heads.items(), ("positional", result.get("positional_head", {"group": []}))]:
        for layer, head in h["group"]:
            role_of.setdefault((layer, head), name)
    labels = [f"L{lh[0]}H{lh[1]}" for lh in np.ndindex(removed.shape)]
    colors = [ROLE[role_of.get(lh, "other")] for lh in np.ndindex(removed.shape)]
    ax.bar(labels, removed.ravel() * 100, color=colors, label="one head zeroed")
    for name, share in abl.get("group_removed", {}).items():
        if heads.get(name, result.get("positional_head", {})).get("group"):
            short = {"previous_token": "all prev.", "induction": "all ind.", "positional": "all pos."}[name]
            ax.bar(short, share * 100, color=ROLE.get(name, "#555"), hatch="//", edgecolor="white")
    ax.axhline(50, color="#444", ls=":", lw=1, label="half the gain")
    ax.set_ylabel("repeat-loss gain removed (%)")
    ax.set_title(f"zero-ablation (gain {abl['gain']:.2f} nats)")
    ax.tick_params(axis="x", labelrotation=90, labelsize=7)
    ax.legend(fontsize=7)


def _mark_phase(ax, phase: dict) -> None:
    if phase.get("exists"):
        ax.axvline(phase["step"], color="#444", ls="--", lw=1, label=f"phase change (step {phase['step']})")


def _init_panel(ax, init: list[dict]) -> None:
    """Logit std at init against the √d_k prediction, with and without the scale (log-log)."""
    d = np.array([r["head_dim"] for r in init])
    ax.plot(d, np.sqrt(d), color="#444", ls="--", lw=1, label="prediction √d_k")
    ax.plot(d, [r["unscaled_std"] for r in init], "o", color="#d62728", label="measured, no scale")
    ax.plot(d, [r["scaled_std"] for r in init], "s", color="#1f77b4", label="measured, 1/√d_k")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(d, [str(x) for x in d])
    ax.set_xlabel("head dim d_k")
    ax.set_ylabel("pre-softmax logit std")
    ax.set_title("logits at init (unit-variance q, k)")
    ax.legend(fontsize=7)


def scale(result: dict):
    """Logit std at init against √d_k, and the repeat loss, saturation and logit gradient during
    training, with (solid) and without (dashed) the 1/√d_k scale, one colour per head dim."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.9))
    _init_panel(axes[0], result["init"])
    dims = result["settings"]["head_dims"]
    cmap = plt.get_cmap("viridis")
    colors = {dd: cmap(i / max(1, len(dims) - 1)) for i, dd in enumerate(dims)}
    panels = [
        ("loss_repeat", "repeat loss (nats)", "loss on the repeat", False),
        ("max_weight", "mean max weight", "softmax saturation", False),
        ("grad_logits", "‖∂loss/∂logits‖", "gradient reaching the logits", True),
    ]
    for ax, (key, ylabel, title, logy) in zip(axes[1:], panels):
        for run in result["runs"]:
            c = run["curves"]
            ax.plot(
                c["steps"],
                c[key],
                color=colors[run["head_dim"]],
                ls="-" if run["scaled"] else "--",
                lw=1.4,
                label=f"d_k={run['head_dim']}" if run["scaled"] else None,
            )
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel)
        ax.set_title(title + " (solid: 1/√d_k, dashed: none)", fontsize=9)
    axes[1].legend(fontsize=7)
    return fig


def pruning(result: dict):
    """Loss against the fraction of heads pruned (Michel et al.'s loop), one line per head count,
    with Voita et al.'s 38/48 marked; and the loss per task of each trained model."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.9), gridspec_kw={"width_ratios": [1.4, 1]})
    ax = axes[0]
    cmap = plt.get_cmap("viridis")
    runs = result["runs"]
    for i, r in enumerate(runs):
        xs = [p["fraction"] * 100 for p in r["prune"]]
        ax.plot(
            xs,
            [p["loss"] for p in r["prune"]],
            "o-",
            ms=3,
            color=cmap(i / max(1, len(runs) - 1)),
            label=f"{r['heads']} head(s)/layer ({r['total_heads']} heads)",
        )
    ax.axvline(result["voita"]["fraction"] * 100, color="#444", ls="--", lw=1, label="Voita et al.: 38/48 pruned")
    ax.set_yscale("log")
    ax.set_xlabel("heads pruned (% of all heads)")
    ax.set_ylabel("mixture loss (nats)")
    ax.set_title("pruning by importance, 10% of heads at a time")
    ax.legend(fontsize=7)
    ax = axes[1]
    tasks = result["tasks"]
    width = 0.8 / len(runs)
    for i, r in enumerate(runs):
        ax.bar(
            np.arange(len(tasks)) + i * width,
            [max(r["prune"][0][f"loss_{t}"], 1e-4) for t in tasks],
            width,
            color=cmap(i / max(1, len(runs) - 1)),
            label=f"{r['heads']} head(s)/layer",
        )
    ax.set_xticks(np.arange(len(tasks)) + 0.4 - width / 2, tasks)
    ax.set_yscale("log")
    ax.set_ylabel("loss after training (nats)")
    ax.set_title("each route, before pruning")
    ax.legend(fontsize=7)
    return fig


def ff(result: dict):
    """Loss curves of the attention-only and the feed-forward stack on each task."""
    plt = pyplot()
    tasks = list(dict.fromkeys(r["task"] for r in result["runs"]))
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 3.9))
    colors = {"attention-only": "#d62728", "with FF": "#1f77b4"}
    for ax, task in zip(np.atleast_1d(axes), tasks):
        for r in result["runs"]:
            if r["task"] == task:
                c = r["curves"]
                ax.plot(
                    c["steps"],
                    c["loss"],
                    color=colors.get(r["model"], "#555"),
                    label=f"{r['model']} ({r['layers']} layers, {r['params']:,} params)",
                )
        ax.axhline(result["chance"], color="#999", ls=":", lw=1, label="chance")
        ax.set_xlabel("training step")
        ax.set_ylabel("loss (nats)")
        ax.set_title(f"{task}: same parameter budget")
        ax.legend(fontsize=7)
    return fig


def crossattn(result: dict):
    """Training curve, loss against heads removed per attention mode, and the map-swap bars."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.9))
    ax = axes[0]
    steps = [r["step"] for r in result["train"]]
    ax.plot(steps, [r["loss"] for r in result["train"]], color="#444")
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("held-out loss (nats)")
    ax.set_title("copy or reverse, chosen by one source token")
    ax = axes[1]
    colors = {"encoder self": "#1f77b4", "decoder self": "#2ca02c", "cross": "#d62728"}
    for mode, rows in result["prune"].items():
        ax.plot(
            [r["removed"] for r in rows], [r["loss"] for r in rows], marker="o", ms=3, color=colors[mode], label=mode
        )
    ax.set_xlabel("heads removed (cheapest first)")
    ax.set_ylabel("loss (nats)")
    ax.set_title("pruning per attention mode")
    ax.legend(fontsize=8)
    ax = axes[2]
    sw = result["swap"]
    names = ["B's own run\nfollows B", "B with A's cross maps\nfollows A", "… follows B"]
    vals = [sw["own_follows_b"], sw["swapped_follows_a"], sw["swapped_follows_b"]]
    ax.bar(names, vals, color=["#999", "#d62728", "#bbb"])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of differing positions")
    ax.set_title("map swap: A = [COPY, x], B = [REV, x]")
    return fig
