"""`attnroute learn induction`: watch an induction circuit form in a TinyTransformer from random init.

Olsson et al. 2022 ("In-context learning and induction heads") saw a phase change early in
training: the loss on repeated text falls suddenly, at the same time as a previous-token head
(layer 0: "copy the previous token's identity into my position") and an induction head (layer 1:
"attend to the position after an earlier copy of my token") form together. Here the model is
trained on RepeatTask and read every K steps with read/'s repeat probe (the previous-token and
induction scores of docs/head-scores.md, on repeated random tokens), then proved causally by
zero-ablating each head.

The shortcut contrast (``fixed_offset``): when the repeat always sits at the same place, learned
absolute positions let one head look a fixed distance back; the repeat loss falls with no
previous-token head. The verdict then says "positional shortcut", not "induction circuit".

Why RoPE by default: measured with this model and seed, RoPE gives the circuit near step 600
(~10 s); learned absolute positions give it near step 1,500 and spread over several weak heads;
sinusoidal positions gave no phase change in 1,500 steps. ``positions="learned"`` is one option away.
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import torch

from ..engine import TinyConfig, ZeroHead
from ..engine.probes import Diagonals, PerLayer
from ..engine.repeats import diagonal_scores, repeat_probe, repeated_random_ids
from ..settings.learn import InductionSettings
from .curves import rise_step, steepest
from .tasks import RepeatTask
from .train import build_model, region_losses, train

SCORE_MIN = 0.30  # a formed head: ≥ 0.3 of a row's weight on the one right key (uniform: ~0.05; read/roles.py's
#                   induction threshold; an earlier reference run reached 0.35–0.42)
GAIN_MOST = 0.5  # "most of the repeat-loss gain": more than half
PHASE_GAIN = 1.0  # nats the repeat loss must end below the first-occurrence loss to call it a phase change


def task_of(s: InductionSettings) -> RepeatTask:
    return RepeatTask(s.vocab, s.length, s.min_len, s.max_len, fixed_offset=s.fixed_offset, fixed_start=0)


def config_of(s: InductionSettings) -> TinyConfig:
    return TinyConfig(
        vocab=s.vocab,
        d_model=s.width,
        n_layers=s.layers,
        n_heads=s.heads,
        d_ff=s.ff,
        max_len=s.length,
        positions=s.positions,
    )


def run(settings: InductionSettings | None = None, progress=None) -> dict:
    """Train, read, find the phase change, ablate every head; everything the plot and verdict need."""
    s = settings or InductionSettings()
    task = task_of(s)
    model = build_model(config_of(s), s.seed)
    eval_batch = task.sample(s.eval_batch, torch.Generator().manual_seed(10_000 + s.seed))
    probes = [repeated_random_ids(task.vocab, S, batch=32, seed=20_000 + S) for S in s.probe_periods]
    scrambled = _scrambled(task, s) if s.fixed_offset else None

    def evaluate(m, step):
        row = region_losses(m, eval_batch, impl="sdpa")
        row.update({k: v.tolist() for k, v in head_scores(m, probes).items()})
        if scrambled is not None:
            row["positional"] = positional_scores(m, scrambled, s.fixed_offset - 1).tolist()
        return row

    hist = train(model, task, s, evaluate=evaluate, progress=progress)
    curves = hist.to_dict()
    result = {
        "experiment": "induction",
        "settings": {**asdict(s), "probe_periods": list(s.probe_periods)},
        "curves": curves,
        "params": sum(p.numel() for p in model.parameters()),
    }
    result.update(find_circuit(curves, s))
    groups = {k: h["group"] for k, h in result["heads"].items()}
    if "positional_head" in result:
        groups["positional"] = result["positional_head"]["group"]
    result["ablation"] = ablate_all(model, task.sample(256, torch.Generator().manual_seed(30_000 + s.seed)), groups)
    result["verdict"] = verdict(result, s)
    result["summary"] = summary(result)
    if s.save is not None:
        result["saved"] = save(model, task, s)
    return result


PAIRS, SPAN, SHOWN = 24, 12, 6  # prompt pairs saved beside the model: SPAN random tokens, then the first SHOWN


def save(model, task: RepeatTask, s: InductionSettings) -> dict:
    """The model where `--model` reads it (export.py) and induction prompt pairs beside it, for `circuit`:
    clean 'x1 … x12 x1 … x6' (the next token is x7), corrupt 'y1 … y12 x1 … x6' (nothing earlier says what
    follows x6; wrong: y7) — the truth a circuit should recover is the previous-token head feeding the
    induction head's keys."""
    import json
    from pathlib import Path

    from .export import save_hf, token

    path = Path(s.save)
    model.eval()
    save_hf(model, path, task.sample(8, torch.Generator().manual_seed(50_000 + s.seed)).inputs)
    g = torch.Generator().manual_seed(60_000 + s.seed)
    rows = []
    for _ in range(PAIRS):
        drawn = torch.randperm(task.vocab, generator=g)[: 2 * SPAN].tolist()
        x, y = drawn[:SPAN], drawn[SPAN:]
        shown = x[:SHOWN]  # both prompts end on the clean span's start: only the first span differs
        clean, corrupt = (" ".join(token(i) for i in first + shown) for first in (x, y))
        rows.append({"clean": clean, "corrupt": corrupt, "answer": token(x[SHOWN]), "wrong": token(y[SHOWN])})
    pairs = path / "induction-pairs.jsonl"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"model": str(path), "prompts": str(pairs)}


def summary(result: dict) -> dict:
    c, h, abl = result["curves"], result["heads"], result["ablation"]
    p, i = h["previous_token"], h["induction"]
    out = {
        "verdict": result["verdict"]["kind"],
        "phase change (step of fastest repeat-loss fall)": result["phase_change"]["step"]
        if result["phase_change"]["exists"]
        else "none",
        "repeat loss, start → end": f"{c['loss_repeat'][0]:.2f} → {c['loss_repeat'][-1]:.2f}",
        "first-occurrence loss, end": f"{c['loss_first'][-1]:.2f}",
        f"previous-token score L{p['layer']}H{p['head']}, start → end": f"{p['curve'][0]:.2f} → {p['final']:.2f}",
        f"induction score L{i['layer']}H{i['head']}, start → end": f"{i['curve'][0]:.2f} → {i['final']:.2f}",
        "half-rise steps (previous-token, induction)": f"{p['rise_step']}, {i['rise_step']}",
    }
    for name, share in abl["group_removed"].items():
        out[f"gain removed by zeroing the {name.replace('_', '-')} heads"] = f"{share:.0%}"
    out["largest gain removed by any other head"] = f"{result['verdict']['other_max']:.0%}"
    out["training time"] = f"{c['seconds']:.0f} s"
    return out


# ---------------------------------------------------------------------------------------------- reading


@torch.no_grad()
def head_scores(model, probes) -> dict[str, np.ndarray]:
    """prev_token and induction [L, H], read/'s definitions, averaged over the probe periods."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    per = []
    for stim in probes:
        diag = repeat_probe(stim.S)
        model(stim.input_ids, impl="eager", probes=[diag])
        per.append(diagonal_scores(diag, stim, L, H))
    return {k: np.mean([p[k] for p in per], axis=0) for k in ("prev_token", "induction", "duplicate")}


def _scrambled(task: RepeatTask, s: InductionSettings):
    """A fixed-offset batch whose second copy is replaced by fresh tokens: nothing repeats, but the
    rows where the repeat would be are still there. A head that still attends fixed_offset − 1
    back on them routes by position, not by content."""
    g = torch.Generator().manual_seed(40_000 + s.seed)
    b = task.sample(64, g)
    fresh = torch.randint(0, task.vocab, b.inputs.shape, generator=g)
    rep = b.regions["repeat"]
    inputs = torch.where(rep | rep.roll(1, dims=1), fresh, b.inputs)  # (B, T): rows b … b+S−1 re-drawn
    return inputs, rep


@torch.no_grad()
def positional_scores(model, scrambled, offset: int) -> np.ndarray:
    """Mean weight at exactly ``offset`` positions back on the scrambled repeat rows: [L, H]."""
    inputs, rows = scrambled
    diag = PerLayer(lambda: Diagonals([offset]))
    model(inputs, impl="eager", probes=[diag])
    w = rows.float()[:, None, :]  # (B, 1, T)
    return np.stack(
        [((diag[layer].rows(offset) * w).sum((0, 2)) / w.sum((0, 2))).numpy() for layer in range(model.cfg.n_layers)]
    )


def find_circuit(curves: dict, s: InductionSettings) -> dict:
    """The phase change on the repeat loss, the heads of each role, and when the best ones rose.

    Roles are read from the final model: previous-token heads are heads below the top layer with a
    previous-token score ≥ SCORE_MIN; induction heads are heads above layer 0 with an induction
    score ≥ SCORE_MIN (small models often grow several redundant ones). The best head of each role
    gives the curve that is compared with the phase change.
    """
    steps = curves["steps"]
    prev = np.array(curves["prev_token"])  # (E, L, H)
    ind = np.array(curves["induction"])  # (E, L, H)
    L = prev.shape[1]
    phase = steepest(steps, curves["loss_repeat"], falling=True)
    gain = curves["loss_first"][-1] - curves["loss_repeat"][-1]
    phase["exists"] = bool(gain >= PHASE_GAIN)
    best_ind = _best(ind[-1], layers=range(1, L))
    best_prev = _best(prev[-1], layers=range(0, best_ind[0]))
    roles = {"previous_token": (prev, best_prev, range(0, L - 1)), "induction": (ind, best_ind, range(1, L))}
    heads, window = {}, max(2 * s.every, s.steps // 10)
    for name, (score, (layer, head), layers) in roles.items():
        curve = score[:, layer, head]
        heads[name] = {
            "layer": layer,
            "head": head,
            "curve": curve.tolist(),
            "final": float(curve[-1]),
            "rise_step": rise_step(steps, curve),
            "formed": bool(curve[-1] >= SCORE_MIN),
            "group": _formed(score[-1], layers),
        }
    together = phase["exists"] and all(
        h["formed"] and h["rise_step"] is not None and abs(h["rise_step"] - phase["step"]) <= window
        for h in heads.values()
    )
    out = {
        "phase_change": phase,
        "heads": heads,
        "together_window": window,
        "rose_together": bool(together),
        "duplicate_best": _describe_best(np.array(curves["duplicate"])[-1]),
    }
    if "positional" in curves:
        pos = np.array(curves["positional"])[-1]  # (L, H)
        out["positional_head"] = {**_describe_best(pos), "offset": s.fixed_offset - 1, "group": _formed(pos, range(L))}
    return out


def _best(score: np.ndarray, layers) -> tuple[int, int]:
    """(layer, head) of the highest score among the given layers."""
    layers = list(layers)
    sub = score[layers]  # (len(layers), H)
    i, h = np.unravel_index(np.argmax(sub), sub.shape)
    return int(layers[i]), int(h)


def _describe_best(score: np.ndarray) -> dict:
    layer, head = _best(score, range(score.shape[0]))
    return {"layer": layer, "head": head, "score": float(score[layer, head])}


def _formed(score: np.ndarray, layers) -> list[list[int]]:
    """[layer, head] of every head in ``layers`` whose final score [L, H] reaches SCORE_MIN."""
    return [
        [int(layer), int(head)] for layer in layers for head in range(score.shape[1]) if score[layer, head] >= SCORE_MIN
    ]


# -------------------------------------------------------------------------------------------- ablation


def ablate(model, batch, heads) -> dict[str, float]:
    """Region losses with the given (layer, head) pairs zeroed together."""
    zeroed = [ZeroHead([h], layer=layer) for layer, h in heads]
    return region_losses(model, batch, impl="eager", interventions=zeroed)


def ablate_all(model, batch, groups: dict[str, list]) -> dict:
    """Zero each head alone, then each role's group together; the share of the repeat-loss gain
    (first-occurrence loss − repeat loss) each removes."""
    clean = region_losses(model, batch, impl="eager")
    gain = clean["loss_first"] - clean["loss_repeat"]
    share = lambda lost: (lost["loss_repeat"] - clean["loss_repeat"]) / gain if gain > 0 else float("nan")  # noqa: E731
    L, H = model.cfg.n_layers, model.cfg.n_heads
    repeat, removed = np.zeros((L, H)), np.zeros((L, H))
    for layer in range(L):
        for head in range(H):
            lost = ablate(model, batch, [(layer, head)])
            repeat[layer, head], removed[layer, head] = lost["loss_repeat"], share(lost)
    group_removed = {
        name: float(share(ablate(model, batch, heads))) if heads else 0.0 for name, heads in groups.items()
    }
    return {
        "clean_first": clean["loss_first"],
        "clean_repeat": clean["loss_repeat"],
        "gain": gain,
        "ablated_repeat": repeat.tolist(),
        "gain_removed": removed.tolist(),
        "group_removed": group_removed,
    }


def _names(group) -> str:
    return ", ".join(f"L{l_}H{h_}" for l_, h_ in group) or "none"


def verdict(result: dict, s: InductionSettings) -> dict:
    """Name what the run shows, in words, from the numbers (never the other way round)."""
    heads, abl, phase = result["heads"], result["ablation"], result["phase_change"]
    removed = np.array(abl["gain_removed"])
    in_circuit = {tuple(x) for h in [*heads.values(), result.get("positional_head", {"group": []})] for x in h["group"]}
    others = {
        f"L{l_}H{h_}": float(removed[l_, h_]) for l_, h_ in np.ndindex(removed.shape) if (l_, h_) not in in_circuit
    }
    other_max = max(others.values()) if others else 0.0
    groups = abl["group_removed"]
    causal = phase["exists"] and all(groups[k] >= GAIN_MOST for k in heads) and other_max < GAIN_MOST
    formed = heads["previous_token"]["formed"] and heads["induction"]["formed"]
    kind, line = _kind(result, s, formed and causal)
    lines = [line, _phase_line(result)]
    if kind == "induction circuit":
        lines.append(_rise_line(result))
    lines.append(_ablation_line(kind, result, other_max))
    return {
        "kind": kind,
        "causal": bool(causal),
        "formed": bool(formed),
        "lines": lines,
        "others_removed": others,
        "other_max": other_max,
    }


def _kind(result: dict, s: InductionSettings, circuit: bool) -> tuple[str, str]:
    """(what the run shows: induction circuit, positional shortcut or none; its sentence)."""
    p, i = result["heads"]["previous_token"], result["heads"]["induction"]
    if circuit:
        return "induction circuit", (
            f"Induction circuit: previous-token head{'s' * (len(p['group']) > 1)} {_names(p['group'])} "
            f"(best {p['final']:.2f}) and induction head{'s' * (len(i['group']) > 1)} {_names(i['group'])} "
            f"(best {i['final']:.2f})."
        )
    if s.fixed_offset and not i["formed"] and result.get("positional_head", {}).get("score", 0) >= SCORE_MIN:
        ph = result["positional_head"]
        prev_said = (
            f"no previous-token head (best {p['final']:.2f} < {SCORE_MIN})"
            if not p["formed"]
            else f"previous-token-like heads {_names(p['group'])} (best {p['final']:.2f}) that no induction head reads"
        )
        return "positional shortcut", (
            f"Positional shortcut, not an induction circuit: head L{ph['layer']}H{ph['head']} puts "
            f"{ph['score']:.2f} of its weight exactly {ph['offset']} positions back even where nothing "
            f"repeats; no induction head (best {i['final']:.2f}); {prev_said}."
        )
    d = result["duplicate_best"]
    return "none", (
        f"No induction circuit: best previous-token score {p['final']:.3f} (L{p['layer']}H{p['head']}), "
        f"best induction score {i['final']:.3f} (L{i['layer']}H{i['head']}); a formed head needs "
        f"≥ {SCORE_MIN}. Best duplicate-token score {d['score']:.2f} (L{d['layer']}H{d['head']})."
    )


def _phase_line(result: dict) -> str:
    phase, curves = result["phase_change"], result["curves"]
    if phase["exists"]:
        return (
            f"Repeat loss {curves['loss_repeat'][0]:.2f} → {curves['loss_repeat'][-1]:.2f} (first occurrence "
            f"{curves['loss_first'][-1]:.2f}); it fell fastest at step {phase['step']} "
            f"({-phase['rate']:.1f} nats per 1,000 steps): the phase change."
        )
    return (
        f"No phase change: the repeat loss ends {curves['loss_first'][-1] - curves['loss_repeat'][-1]:.2f} "
        f"nats below the first-occurrence loss (a phase change means ≥ {PHASE_GAIN})."
    )


def _rise_line(result: dict) -> str:
    p, i = result["heads"]["previous_token"], result["heads"]["induction"]
    together = "Both heads rose" if result["rose_together"] else "The two heads did not both rise"
    return (
        f"{together} with the phase change (half their rise by steps {p['rise_step']} and {i['rise_step']}; "
        f"window ±{result['together_window']})."
    )


def _ablation_line(kind: str, result: dict, other_max: float) -> str:
    abl = result["ablation"]
    groups = abl["group_removed"]
    if kind == "positional shortcut":
        g = result["positional_head"]["group"]
        return (
            f"Zero-ablation of the positional head{'s' * (len(g) > 1)} {_names(g)} together removes "
            f"{groups['positional']:.0%} of the repeat-loss gain; any other single head at most {other_max:.0%}."
        )
    if abl["gain"] < PHASE_GAIN / 2:
        return (
            f"No ablation verdict: the repeat loss is only {abl['gain']:.2f} nats below the first-occurrence "
            "loss, so there is no gain for a head to remove."
        )
    return (
        f"Zero-ablation removes {groups['previous_token']:.0%} (previous-token heads together) and "
        f"{groups['induction']:.0%} (induction heads together) of the repeat-loss gain; any other single "
        f"head at most {other_max:.0%}."
    )
