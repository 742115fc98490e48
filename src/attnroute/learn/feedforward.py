"""`attnroute learn ff`: what routing does alone, and what a feed-forward layer adds.

A head's output is Σ_j α_j W_O W_V x_j: once the route is chosen, what it carries reaches the
logits through a linear map. A task whose answer is a function of one routed token (a fixed
permutation of the previous token) is therefore within reach of attention alone - the
unembedding can absorb the permutation. A task whose answer depends jointly on two tokens (a
random table of the previous and the current token, LookupTask(kind="table")) needs a
nonlinearity after the route. A feed-forward layer supplies d_ff position-wise nonlinear units;
an attention-only stack has only its softmax gates (each head mixes the two positions with a
weight that depends on both tokens) and LayerNorm.

Sequences are two tokens long, so the route to the previous token is the only one there is
(with longer random contexts, attention can also use the other tokens as features). Two stacks
at the same parameter budget, trained on both tasks:
    attention-only   4 layers of attention, width 64          (Elhage et al. 2021's models)
    with FF          2 layers of attention + FF (d_ff = 128)   (each FF has the parameters of one attention layer)
"""

from __future__ import annotations

from dataclasses import asdict

import torch

from ..engine import TinyConfig
from ..settings.learn import FFSettings
from .tasks import LookupTask
from .train import build_model, region_losses, train

SOLVED = 0.1  # nats: a task counts as solved below this loss


def configs_of(s: FFSettings) -> dict[str, TinyConfig]:
    base = dict(vocab=s.vocab, d_model=s.width, n_heads=s.heads, max_len=s.length, positions=s.positions)
    return {
        "attention-only": TinyConfig(n_layers=s.attention_layers, d_ff=0, **base),
        "with FF": TinyConfig(n_layers=s.ff_layers, d_ff=s.d_ff, **base),
    }


def run(settings: FFSettings | None = None, progress=None) -> dict:
    s = settings or FFSettings()
    kinds = ("permutation", "table")
    runs, total = [], len(kinds) * 2 * s.steps
    for kind in kinds:
        task = LookupTask(vocab=s.vocab, length=s.length, kind=kind)
        eval_batch = task.sample(2048, torch.Generator().manual_seed(10_000 + s.seed))
        for name, cfg in configs_of(s).items():
            done = len(runs) * s.steps
            tick = (lambda step, _n, done=done: progress(done + step, total)) if progress else None
            model = build_model(cfg, s.seed)
            hist = train(
                model, task, s, evaluate=lambda m, step, b=eval_batch: region_losses(m, b, impl="sdpa"), progress=tick
            )
            curves = hist.to_dict()
            runs.append(
                {
                    "task": kind,
                    "model": name,
                    "params": sum(p.numel() for p in model.parameters()),
                    "layers": cfg.n_layers,
                    "d_ff": cfg.d_ff,
                    "curves": curves,
                    "final": curves["loss"][-1],
                    "best": min(curves["loss"]),
                }
            )
    result = {
        "experiment": "ff",
        "settings": asdict(s),
        "runs": runs,
        "solved_below": SOLVED,
        "chance": float(torch.log(torch.tensor(float(s.vocab)))),
    }
    result["verdict"] = verdict(result)
    result["summary"] = {
        f"{r['task']}: {r['model']} ({r['params']:,} params)": f"final loss {r['final']:.3f}" for r in runs
    }
    return result


def steps_to(run: dict, loss: float) -> int | None:
    """First evaluated step at which the loss is at most ``loss``."""
    c = run["curves"]
    return next((st for st, v in zip(c["steps"], c["loss"]) if v <= loss), None)


def verdict(result: dict) -> dict:
    by = {(r["task"], r["model"]): r for r in result["runs"]}
    params = {r["model"]: r["params"] for r in result["runs"]}
    a, f = params["attention-only"], params["with FF"]
    steps = result["settings"]["steps"]
    lines = [
        f"Same budget: attention-only {a:,} parameters, with FF {f:,} ({(f - a) / a:+.1%}); chance is "
        f"{result['chance']:.2f} nats."
    ]
    for task, what in (
        ("permutation", "a fixed permutation of the previous token"),
        ("table", "a random table of (previous, current) token"),
    ):
        ao, ff = by[(task, "attention-only")], by[(task, "with FF")]
        said = lambda r: "solves it" if r["final"] < SOLVED else f"ends at {r['final']:.2f} nats"  # noqa: E731
        line = (
            f"{task.capitalize()}, {what}: attention-only {said(ao)} ({ao['final']:.3f}), with FF {said(ff)} "
            f"({ff['final']:.3f}) after {steps} steps."
        )
        if ao["final"] - ff["final"] > 0.2:
            mid = (result["chance"] + ff["final"]) / 2
            s_ff, s_ao = steps_to(ff, mid), steps_to(ao, mid)
            line += (
                f" Halfway from chance to the FF stack's final loss ({mid:.2f} nats): FF at step {s_ff}, "
                f"attention-only {'at step ' + str(s_ao) if s_ao is not None else 'never'}."
            )
        lines.append(line)
    return {"lines": lines}
