"""`attnroute learn scale`: what the 1/√d_k in softmax(q·kᵀ/√d_k) is for.

Vaswani et al. 2017, footnote 4: if the components of q and k are independent with mean 0 and
variance 1, q·k = Σ_i q_i k_i has mean 0 and variance d_k - its standard deviation is √d_k
(8 at d_k = 64, 22.63 at 512). Without the scale, logits that wide push softmax into one-hot
corners where its gradient vanishes. This experiment measures every link of that argument:

1. at init, the logit standard deviation against the √d_k prediction, with the q and k
   projections initialised so q and k have unit-variance components (std 1/√width, see
   ``unit_qk_init``; torch's default Linear init gives variance 1/3, i.e. √d_k/3);
2. during training, softmax saturation (mean max weight and entropy, read/'s RowStats probe),
   the gradient norm reaching the q and k projections, and the loss, with and without the scale,
   at each head dimension, on the induction task of `learn induction`.
"""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import torch

from ..engine import CallbackProbe, TinyConfig
from ..engine.probes import row_stats_probe
from ..settings.learn import ScaleSettings
from .induction import PHASE_GAIN
from .tasks import RepeatTask
from .train import batch_loss, build_model, region_losses, train


def config_of(s: ScaleSettings, head_dim: int, scaled: bool) -> TinyConfig:
    return TinyConfig(
        vocab=64,
        d_model=s.width,
        n_layers=s.layers,
        n_heads=s.heads,
        max_len=48,
        positions=s.positions,
        scaled=scaled,
        head_dim=head_dim,
    )


TASK = RepeatTask(vocab=64, length=48, min_len=8, max_len=24)


def unit_qk_init(model, seed: int) -> None:
    """q and k projections ~ N(0, 1/width): after LayerNorm (unit variance per token) every
    component of q and k has variance ≈ 1, the footnote's assumption."""
    g = torch.Generator().manual_seed(seed + 99)
    with torch.no_grad():
        for block in model.blocks:
            for proj in (block.attn.q_proj, block.attn.k_proj):
                proj.weight.normal_(0.0, 1.0 / math.sqrt(proj.in_features), generator=g)


class ScoreMoments(CallbackProbe):
    """Running mean and variance of the pre-softmax logits (scale applied) over visible entries."""

    def __init__(self):
        super().__init__(self._take)
        self.n, self.sum, self.sumsq = 0, 0.0, 0.0

    def _take(self, block) -> None:
        s = block.masked_scores.float()  # (B, H, bq, kspan)
        keep = block.keep_full(s.shape[0], s.shape[1])
        vis = s[keep]
        self.n += vis.numel()
        self.sum += float(vis.sum())
        self.sumsq += float((vis.double() ** 2).sum())

    @property
    def std(self) -> float:
        mean = self.sum / self.n
        return math.sqrt(max(self.sumsq / self.n - mean**2, 0.0))


@torch.no_grad()
def routing_state(model, inputs) -> dict:
    """Logit std, mean max weight and mean entropy (nats) over every layer, head and row."""
    moments, rows = ScoreMoments(), row_stats_probe()
    model(inputs, impl="eager", probes=[moments, rows])
    L = model.cfg.n_layers
    valid = torch.cat([(rows[layer].n_visible >= 2).float() for layer in range(L)])  # (L·B, H, T)

    def mean(name: str) -> float:
        return float((torch.cat([getattr(rows[layer], name) for layer in range(L)]) * valid).sum() / valid.sum())

    return {"logit_std": moments.std, "max_weight": mean("max_weight"), "entropy": mean("entropy")}


def init_logits(s: ScaleSettings, inputs) -> list[dict]:
    """Logit std at init for every head dim: unscaled (prediction √d_k) and scaled (prediction 1)."""
    out = []
    for d in s.init_dims:
        row = {"head_dim": d, "predicted_unscaled": math.sqrt(d), "predicted_scaled": 1.0}
        for scaled in (False, True):
            model = build_model(config_of(s, d, scaled), s.seed)
            unit_qk_init(model, s.seed)
            state = routing_state(model, inputs)
            key = "scaled" if scaled else "unscaled"
            row[f"{key}_std"], row[f"{key}_max_weight"] = state["logit_std"], state["max_weight"]
        out.append(row)
    return out


class LogitGrad(CallbackProbe):
    """Registers a hook on each layer's masked scores: the squared norm of ∂loss/∂logits arrives
    in ``sumsq`` during backward (the gradient that reaches the logits through the softmax)."""

    def __init__(self):
        super().__init__(self._take)
        self.sumsq = 0.0

    def _take(self, block) -> None:
        if block.masked_scores.requires_grad:
            block.masked_scores.register_hook(self._add)

    def _add(self, grad):
        self.sumsq += float((grad.float() ** 2).sum())


def gradients(model, batch) -> dict:
    """Gradient norms on a fixed batch, without a step: at the logits, at W_q and at W_k."""
    probe = LogitGrad()
    model.zero_grad(set_to_none=True)
    with torch.enable_grad():
        logits = model(batch.inputs, impl="eager", probes=[probe])  # (B, T, V)
        batch_loss(logits, batch).backward()
    norm = lambda ps: float(torch.sqrt(sum((p.grad.float() ** 2).sum() for p in ps)))  # noqa: E731
    out = {
        "grad_logits": math.sqrt(probe.sumsq),
        "grad_q": norm([b.attn.q_proj.weight for b in model.blocks]),
        "grad_k": norm([b.attn.k_proj.weight for b in model.blocks]),
    }
    model.zero_grad(set_to_none=True)
    return out


def run_one(s: ScaleSettings, head_dim: int, scaled: bool, eval_batch, progress=None) -> dict:
    model = build_model(config_of(s, head_dim, scaled), s.seed)
    unit_qk_init(model, s.seed)
    grad_batch = eval_batch.take(slice(0, 32))

    def evaluate(m, step):
        row = region_losses(m, eval_batch, impl="sdpa")
        row.update(routing_state(m, eval_batch.inputs[:32]))
        row.update(gradients(m, grad_batch))
        return row

    hist = train(model, TASK, s, evaluate=evaluate, progress=progress)
    curves = hist.to_dict()
    gain = curves["loss_first"][-1] - curves["loss_repeat"][-1]
    return {"head_dim": head_dim, "scaled": scaled, "curves": curves, "learned": bool(gain >= PHASE_GAIN), "gain": gain}


def run(settings: ScaleSettings | None = None, progress=None) -> dict:
    s = settings or ScaleSettings()
    eval_batch = TASK.sample(128, torch.Generator().manual_seed(10_000 + s.seed))
    init = init_logits(s, eval_batch.inputs[:32])
    runs = []
    total = len(s.head_dims) * 2 * s.steps
    for d in s.head_dims:
        for scaled in (True, False):
            done = len(runs) * s.steps
            tick = (lambda step, _n, done=done: progress(done + step, total)) if progress else None
            runs.append(run_one(s, d, scaled, eval_batch, tick))
    result = {
        "experiment": "scale",
        "settings": {**asdict(s), "head_dims": list(s.head_dims), "init_dims": list(s.init_dims)},
        "init": init,
        "runs": runs,
    }
    result["verdict"] = verdict(result)
    result["summary"] = summary(result)
    return result


def _by(result, d, scaled):
    return next(r for r in result["runs"] if r["head_dim"] == d and r["scaled"] == scaled)


def verdict(result: dict) -> dict:
    init = result["init"]
    ratios = [r["unscaled_std"] / r["predicted_unscaled"] for r in init]
    lines = [
        f"At init the unscaled logit std follows √d_k: measured/predicted {min(ratios):.2f}–{max(ratios):.2f} over "
        f"d_k = {init[0]['head_dim']}…{init[-1]['head_dim']} (e.g. "
        + ", ".join(
            f"{r['unscaled_std']:.2f} vs {r['predicted_unscaled']:.2f} at {r['head_dim']}"
            for r in init
            if r["head_dim"] in (64, 512)
        )
        + "); with the scale it stays near 1 "
        f"({min(r['scaled_std'] for r in init):.2f}–{max(r['scaled_std'] for r in init):.2f})."
    ]
    stalled = [d for d in result["settings"]["head_dims"] if not _by(result, d, False)["learned"]]
    learned_scaled = [d for d in result["settings"]["head_dims"] if _by(result, d, True)["learned"]]
    lines.append(
        f"With the scale the induction task is learned at d_k = {_list(learned_scaled)}; without it, "
        f"training stalls at d_k = {_list(stalled)} (repeat loss within {PHASE_GAIN} nat of the "
        "first-occurrence loss after "
        f"{result['settings']['steps']} steps)."
    )
    big = max(result["settings"]["head_dims"])
    u, sc = _by(result, big, False)["curves"], _by(result, big, True)["curves"]
    lines.append(
        f"At d_k = {big} the unscaled softmax is saturated from the start: mean max weight "
        f"{u['max_weight'][0]:.2f} at step 0 and {u['max_weight'][-1]:.2f} at the end (scaled: "
        f"{sc['max_weight'][0]:.2f} → {sc['max_weight'][-1]:.2f}); entropy {u['entropy'][0]:.2f} vs "
        f"{sc['entropy'][0]:.2f} nats at step 0."
    )
    lines.append(_gradient_line(u, sc))
    return {"lines": lines, "stalled_unscaled": stalled, "learned_scaled": learned_scaled}


def _gradient_line(u: dict, sc: dict) -> str:
    """The gradient at the logits and at W_q, W_k, unscaled against scaled (the largest head dim's curves)."""
    gl_u, gl_s = float(np.mean(u["grad_logits"])), float(np.mean(sc["grad_logits"]))
    line = (
        f"Gradient reaching the logits, mean over training: {gl_u:.2g} unscaled vs {gl_s:.2g} scaled "
        f"({_ratio(gl_u, gl_s)}). At W_q and W_k at step 0 the unscaled gradient is "
        f"{_ratio(u['grad_q'][0], sc['grad_q'][0])} and {_ratio(u['grad_k'][0], sc['grad_k'][0])}"
    )
    if u["grad_q"][0] > sc["grad_q"][0]:
        line += (
            ": without the scale the chain rule is not divided by √d_k, so saturation does not show as a "
            "small gradient norm at W_q and W_k; it shows at the logits."
        )
    return line if line.endswith(".") else line + "."


def summary(result: dict) -> dict:
    out = {}
    for r in result["init"]:
        out[f"init logit std d_k={r['head_dim']} (unscaled / √d_k / scaled)"] = (
            f"{r['unscaled_std']:.2f} / {r['predicted_unscaled']:.2f} / {r['scaled_std']:.2f}"
        )
    for d in result["settings"]["head_dims"]:
        u, sc = _by(result, d, False), _by(result, d, True)
        out[f"final repeat loss d_k={d} (scaled / unscaled)"] = (
            f"{sc['curves']['loss_repeat'][-1]:.2f} / {u['curves']['loss_repeat'][-1]:.2f}"
        )
        out[f"first step with a {PHASE_GAIN}-nat repeat gain d_k={d} (scaled / unscaled)"] = (
            f"{first_learned_step(sc) or 'never'} / {first_learned_step(u) or 'never'}"
        )
    return out


def _ratio(a: float, b: float) -> str:
    """'3.1× smaller' / '2.0× larger': a relative to b."""
    if a <= 0 or b <= 0:
        return f"{a:.2g} vs {b:.2g}"
    return f"{b / a:.1f}× smaller" if a < b else f"{a / b:.1f}× larger"


def _list(ds) -> str:
    return ", ".join(str(d) for d in ds) or "none"


def first_learned_step(run: dict) -> int | None:
    """First evaluation where the repeat loss is PHASE_GAIN below the first-occurrence loss."""
    c = run["curves"]
    gaps = np.array(c["loss_first"]) - np.array(c["loss_repeat"])
    hit = np.nonzero(gaps >= PHASE_GAIN)[0]
    return int(c["steps"][hit[0]]) if len(hit) else None
