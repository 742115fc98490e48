"""The training loop every learn experiment shares: AdamW on a synthetic task, evaluations every K steps.

Determinism: the model's init and every batch come from generators seeded by ``seed``, so the same
seed on the same machine gives the same curve (torch's CPU kernels are deterministic for a fixed
thread count; the learn commands keep torch's default).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..engine import TinyConfig, TinyTransformer
from ..settings.learn import TrainSettings
from .tasks import Batch


@dataclass
class History:
    steps: list[int] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)  # one dict of scalars per evaluation
    seconds: float = 0.0

    def curve(self, key: str) -> list[float]:
        return [r[key] for r in self.rows]

    def add(self, step: int, row: dict) -> None:
        self.steps.append(step)
        self.rows.append(row)

    def to_dict(self) -> dict:
        keys = list(self.rows[0]) if self.rows else []
        return {"steps": self.steps, **{k: self.curve(k) for k in keys}, "seconds": round(self.seconds, 2)}


def build_model(cfg: TinyConfig, seed: int) -> TinyTransformer:
    torch.manual_seed(seed)  # nn.Module init reads the global generator
    return TinyTransformer(cfg)


def row_losses(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Next-token cross-entropy of every row, [B, T]."""
    return F.cross_entropy(logits.transpose(1, 2), batch.targets, reduction="none")


def batch_loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """The training loss: row losses weighted by ``batch.row_weights()`` (a scalar tensor)."""
    w = batch.row_weights()  # (B, T)
    return (row_losses(logits, batch) * w).sum() / w.sum().clamp_min(1e-12)


def region_losses(model, batch: Batch, impl: str = "auto", interventions=(), probes=()) -> dict[str, float]:
    """The training loss ('loss') and the mean loss over each region's rows for one batch, no grad."""
    with torch.no_grad():
        logits = model(batch.inputs, impl=impl, interventions=interventions, probes=probes)  # (B, T, V)
        ce = row_losses(logits, batch)  # (B, T)
        out = {"loss": float(batch_loss(logits, batch))}
    for name, rows in batch.regions.items():
        out[f"loss_{name}"] = float((ce * rows).sum() / rows.sum().clamp_min(1))
    return out


def train(model, task, settings: TrainSettings, evaluate=None, progress=None) -> History:
    """Train ``model`` on ``task`` with AdamW (linear warm-up, then constant lr).

    ``evaluate(model, step) -> dict`` runs at step 0 and every ``settings.every`` steps and at the
    end; its scalars form the history. ``progress(step, total)`` is called after every step.
    """
    g = torch.Generator().manual_seed(settings.seed + 1)  # batches: independent of the init stream
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, settings.warmup)))
    hist = History()
    t0 = time.perf_counter()
    if evaluate:
        hist.add(0, evaluate(model, 0))
    for step in range(1, settings.steps + 1):
        batch = task.sample(settings.batch, g)
        logits = model(batch.inputs, impl="sdpa")  # (B, T, V): the fused kernel; probes run only in evaluate
        loss = batch_loss(logits, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if settings.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), settings.clip)
        opt.step()
        sched.step()
        if evaluate and (step % settings.every == 0 or step == settings.steps):
            model.eval()
            hist.add(step, evaluate(model, step))
            model.train()
        if progress:
            progress(step, settings.steps)
    hist.seconds = time.perf_counter() - t0
    return hist
