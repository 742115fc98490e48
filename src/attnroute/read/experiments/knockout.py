"""Route knockout on a real model (Geva et al. 2023, "Dissecting Recall of Factual Associations"):
cut the edges from some query positions to some key positions in a window of k layers, slide the
window over the depth, and measure what the model then predicts.

    result = knockout("smollm2", "Maya handed the report to Jordan because she", source="she", target="Maya")

Positions are given as token indices ("7" or "3,4") or as a word of the text: every occurrence of it
(whole words, case-sensitive) and every token that overlaps one. In each window the edges are cut in
all heads (or ``heads``) of each layer of the window (KnockoutEdges: −inf before the softmax, the row
renormalizes over what stays visible). Measured at the last position: the probability of the target
token (default: the model's own top prediction on the clean prompt), its loss −log p, and the
prompt's mean next-token loss (unchanged when only the last position's edges are cut: the last
position predicts nothing inside the prompt). Beside the route, a control route of the same length:
the same queries to as many other keys, drawn (seed 0) from the keys those queries see that are
neither the route's keys, the queries, nor position 0 (cutting the attention sink moves everything
and says nothing about the route).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ...engine import InputError, KnockoutEdges
from ...engine.jsonable import Result
from ...progress import reporter
from ...settings import KnockoutSettings, verb
from ..adapter import routed
from ..ground.batches import LOGIT_BYTES, no_cache
from ..ground.copies import repeat_batch
from ..ground.positions import resolve_positions, said
from ..ground.text_metric import TextMetric
from ..stimuli import encode_text, tokens_of
from ..study import causal_only
from .common import check_window_heads, load_checked


class KnockoutError(InputError):
    """A route that cannot be placed on the text; the message says which word or index."""


@dataclass(repr=False)
class KnockoutResult(Result):
    """A route cut in every window of ``window`` layers, and its control.

    windows    [(first layer, last layer)] per window, in order of depth
    p_route, p_control        [windows] p(target) at the last position with the route (control) cut
    loss_route, loss_control  [windows] the prompt's mean next-token loss (nats)
    p_clean, loss_clean       the same on the clean run
    queries, keys, control_keys  token positions of the route and of the control route
    metric     your metric: its name, clean value and its value per window (route, control), metric units
    """

    KIND = "knockout"
    TABLE = "windows"  # its table's key before format 1 (an alias of rows until 0.3)

    SCHEMA = {
        "experiment": str,
        "verdict": {"lines": [str]},
        "summary": dict,
        "model": str,
        "tokens": [str],
        "route": {"queries": [int], "keys": [int]},
        "target": {"token": str},
        "window": int,
        "p_target_clean": float,
        "rows": [
            {
                "layers": [int],
                **dict.fromkeys(("delta_p_route", "delta_p_control"), float),
                **dict.fromkeys(("delta_nll_route", "delta_nll_control"), float),
            }
        ],
    }

    model: str
    text: str
    tokens: list[str]
    queries: list[int]
    keys: list[int]
    control_keys: list[int]
    target_token: str
    target_id: int
    window: int
    heads: list[int] | None
    p_clean: float
    loss_clean: float
    windows: list[tuple[int, int]] = field(default_factory=list)  # (first layer, last layer)
    p_route: list[float] = field(default_factory=list)
    p_control: list[float] = field(default_factory=list)
    loss_route: list[float] = field(default_factory=list)
    loss_control: list[float] = field(default_factory=list)
    resolved: dict = field(default_factory=dict)  # what --from / --to resolved to, and how often the word occurs
    metric: dict | None = None  # your metric: its name, clean value, and its value per window (route, control)

    def payload(self) -> dict:
        rows = self.table()
        lines, summary = self._verdict(rows)
        return {
            "experiment": "knockout",
            "verdict": {"lines": lines},
            "summary": summary,
            "model": self.model,
            "text": self.text,
            "tokens": self.tokens,
            "route": {"queries": self.queries, "keys": self.keys},
            "resolved": self.resolved,
            "control": {"queries": self.queries, "keys": self.control_keys, **_control_said(rows)},
            "target": {"token": self.target_token, "id": self.target_id},
            "window": self.window,
            "heads": self.heads if self.heads is not None else "all",
            "p_target_clean": self.p_clean,
            "loss_clean": self.loss_clean,
            "windows": rows,
            "metric": self.metric,  # name, clean, and its value per window: route, control
        }

    @classmethod
    def from_dict(cls, data: dict) -> KnockoutResult:
        rows, route, target = data["rows"], data["route"], data["target"]
        return cls(
            data["model"],
            data["text"],
            data["tokens"],
            route["queries"],
            route["keys"],
            data["control"]["keys"],
            target["token"],
            target["id"],
            data["window"],
            None if data["heads"] == "all" else data["heads"],
            data["p_target_clean"],
            data["loss_clean"],
            [tuple(r["layers"]) for r in rows],
            [r["p_target_route"] for r in rows],
            [r["p_target_control"] for r in rows],
            [r["prompt_loss_route"] for r in rows],
            [r["prompt_loss_control"] for r in rows],
            data["resolved"],
            data["metric"],
        )

    def table(self) -> list[dict]:
        """One row per window of layers: Δp, Δ loss of the target and of the prompt, route and control."""
        rows = [
            {
                "layers": list(w),
                "p_target_route": pr,
                "p_target_control": pc,
                "delta_p_route": pr - self.p_clean,
                "delta_p_control": pc - self.p_clean,
                "delta_nll_route": _nll(pr) - _nll(self.p_clean),  # the loss of predicting the target
                "delta_nll_control": _nll(pc) - _nll(self.p_clean),
                "delta_prompt_loss_route": lr - self.loss_clean,  # 0 when only the last position's edges are cut
                "delta_prompt_loss_control": lc - self.loss_clean,
                "prompt_loss_route": lr,  # the values the deltas are of (ar.load rebuilds the result from them)
                "prompt_loss_control": lc,
            }
            for w, pr, pc, lr, lc in zip(self.windows, self.p_route, self.p_control, self.loss_route, self.loss_control)
        ]
        if self.metric is not None:  # Δ your metric beside Δp, per window
            m = self.metric
            for row, mr, mc in zip(rows, m["route"], m["control"]):
                row["delta_metric_route"], row["delta_metric_control"] = mr - m["clean"], mc - m["clean"]
        return rows

    def _verdict(self, rows: list[dict]) -> tuple[list[str], dict]:
        most = max(rows, key=lambda r: abs(r["delta_p_route"])) if rows else None  # by magnitude, either sign
        lines = [f"p({self.target_token!r}) on the clean prompt: {self.p_clean:.3f}"]
        lines += [r["said"] for r in self.resolved.values()]
        if most:
            ctrl = most["delta_p_control"]
            lines.append(
                f"cutting the route in layers {most['layers'][0]}–{most['layers'][1]} moves it most: "
                f"{most['delta_p_route']:+.3f} (control route: {ctrl:+.3f})"
            )
        control = _control_said(rows)
        if control["note"]:
            lines.append(control["note"])
        summary = {"windows": len(rows), "window": self.window, "p clean": self.p_clean}
        if self.metric is not None and rows:  # your metric speaks first: the question was asked in it
            lines = _metric_lines(self.metric, rows) + lines
            summary = {f"{self.metric['name']} clean": self.metric["clean"], **summary}
        return lines, summary


def _metric_lines(metric: dict, rows: list[dict]) -> list[str]:
    most = max(rows, key=lambda r: abs(r["delta_metric_route"]))
    return [
        f"{metric['name']} on the clean prompt: {metric['clean']:.3f}",
        f"{metric['name']}: cutting the route in layers {most['layers'][0]}–{most['layers'][1]} moves it most: "
        f"{most['delta_metric_route']:+.3f} (control route: {most['delta_metric_control']:+.3f})",
    ]


NEUTRAL = 0.5  # a control moving p by half the route's largest move (and by 0.02 or more) is not neutral


def _control_said(rows: list[dict]) -> dict:
    """How much the control route itself moves p(target): its largest |Δp| and where, whether that is small
    beside the route's, and the line that says so when it is not."""
    if not rows:
        return {"max_abs_delta_p": None, "neutral": None, "note": ""}
    worst = max(rows, key=lambda r: abs(r["delta_p_control"]))
    move, route = abs(worst["delta_p_control"]), max(abs(r["delta_p_route"]) for r in rows)
    neutral = move < 0.02 or move < NEUTRAL * route
    note = (
        ""
        if neutral
        else (
            f"note: the control route is not neutral — cutting it moves p by up to {worst['delta_p_control']:+.3f} "
            f"(layers {worst['layers'][0]}–{worst['layers'][1]}), {move / max(route, 1e-12):.1f}× the route's largest "
            "move; compare the route with care (another seed draws another control)"
        )
    )
    return {"max_abs_delta_p": move, "neutral": neutral, "note": note}


def _nll(p: float) -> float:
    return float(-np.log(max(p, 1e-45)))


def _logits(loaded, batch, interventions) -> torch.Tensor:
    with torch.no_grad(), routed(loaded, interventions=interventions, impl="auto"):
        return loaded.model(**batch, **no_cache(loaded)).logits[0].float()  # (T, V)


TOKEN_BUDGET = 4096  # tokens (copies × T) per batched forward


def _copies(T: int, V: int, runs: int) -> int:
    """Copies of the text per forward: at a short text's length a forward is bound by reading the weights
    (Gemma 3's 262k × 640 LM head is 2/3 of one at 16 tokens), so runs share forwards; a long text, compute
    bound, runs one at a time."""
    return max(1, min(runs, LOGIT_BYTES // max(1, T * V * 4), TOKEN_BUDGET // max(1, T)))


def _runs(loaded, batch: dict, cuts: list, k: int):
    """Logits [T, V] of each cut, in order: ``cuts`` are functions copy -> interventions (KnockoutEdges of that
    batch item), run ``k`` copies of the text per forward."""
    for j in range(0, len(cuts), k):
        chunk = cuts[j : j + k]
        copies = repeat_batch(batch, len(chunk))
        made = [iv for c, cut in enumerate(chunk) for iv in cut(c)]
        with torch.no_grad(), routed(loaded, interventions=made, impl="auto"):
            logits = loaded.model(**copies, **no_cache(loaded)).logits.float()  # (copies, T, V)
        yield from logits.unbind(0)


def _measure(loaded, batch, target_id: int, interventions=(), logits=None) -> tuple[float, float]:
    """(p(target) at the last position, mean next-token loss over the prompt); ``logits`` if already run."""
    logits = _logits(loaded, batch, interventions) if logits is None else logits
    return _p(logits, target_id), float(_terms(logits, batch["input_ids"][0]).mean())


def _p(logits: torch.Tensor, target_id: int) -> float:
    return float(torch.softmax(logits[-1], -1)[target_id])


def _terms(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Each position's next-token loss [T − 1] (NaN for a one-token text)."""
    if ids.shape[0] < 2:
        return torch.full((1,), float("nan"))
    return torch.nn.functional.cross_entropy(logits[:-1], ids[1:], reduction="none")


def _cut_loss(clean_terms: torch.Tensor, logits: torch.Tensor, ids: torch.Tensor, first: int) -> float:
    """The prompt's mean loss with the route cut at query rows ``first`` and later: a causal model's rows before
    ``first`` are the clean run's (their terms taken from it, not from a batched rerun's float noise), so a
    cut of the last position alone leaves the loss exactly as it was."""
    if ids.shape[0] < 2:
        return float("nan")
    terms = clean_terms.clone()
    if first < len(terms):  # the last position predicts nothing inside the prompt
        terms[first:] = _terms(logits[first:], ids[first:])
    return float(terms.mean())


@verb(KnockoutSettings)
def knockout(model=None, text: str | None = None, *, settings: KnockoutSettings | None = None, progress=None, **fields):
    """Cut the route source → target in every window of ``window`` layers; see the module docstring. The
    fields are KnockoutSettings' (source, target, window, heads, target_token, seed), or pass ``settings``."""
    s = KnockoutSettings.of(settings, model, fields, text=text)
    say = reporter(progress)
    not_one = "route knockout measures a causal LM's next-token prediction; {} is not one"
    loaded = load_checked(s, say, causal_only(lambda name: KnockoutError(not_one.format(name))))
    say("stage", f"knocking out {s.source!r} → {s.target!r} in every {s.window}-layer window")
    ids, _ = encode_text(loaded.tokenizer, s.text, None)
    loaded.fit(ids.shape[1], "text", "the text")  # word positions are resolved on the tokens that run
    check_window_heads(loaded, s.window, s.heads, KnockoutError)
    queries, keys, control, resolved = _route(loaded, s, ids)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    _refuse_absent(loaded, batch, queries, keys, s, resolved)
    clean = _logits(loaded, batch, [])  # (T, V): one clean forward gives the target and its baseline
    target_id = _target_id(loaded, s.target_token, clean)
    p_clean, loss_clean = _measure(loaded, batch, target_id, logits=clean)  # the same terms _cut_loss reads
    metric = None if s.metric is None else TextMetric(loaded.tokenizer, s.metric, s.answer, s.wrong, ids, clean)
    heads = list(s.heads) if s.heads is not None else None
    result = KnockoutResult(
        loaded.name,
        s.text,
        tokens_of(loaded.tokenizer, ids[0]),
        queries,
        keys,
        control,
        loaded.tokenizer.decode([target_id]),
        target_id,
        s.window,
        heads,
        p_clean,
        loss_clean,
        resolved=resolved,
        metric=None if metric is None else {"name": metric.name, "clean": metric(clean), "route": [], "control": []},
    )
    _slide(loaded, batch, result, metric, clean)
    return result


@torch.no_grad()
def route_layers(loaded, batch: dict, queries: list[int], keys: list[int]) -> list[bool]:
    """Per attention layer: does any query → key of the route exist under that layer's own mask (its causal
    alignment, its sliding window, padding)? Read from one forward, as the model builds each layer's mask."""
    from ...engine import Mask

    masks: dict[int, object] = {}
    with routed(loaded, on_attend=[lambda layer, mask, args: masks.setdefault(layer, mask)]):
        loaded.model(**batch, **no_cache(loaded))
    T = batch["input_ids"].shape[1]
    q, k = torch.tensor(queries), torch.tensor(keys)
    exists = []
    for layer in range(loaded.n_layers):
        m = masks.get(layer)
        if m is None:
            exists.append(True)
            continue
        grid = m.materialize(1, 1, T, T) if isinstance(m, Mask) else m
        grid = grid.expand(1, grid.shape[1], T, T)[0, 0]  # [Tq, Tk] True = may attend
        exists.append(bool(grid[q][:, k].any()))
    return exists


def _refuse_absent(loaded, batch: dict, queries, keys, s: KnockoutSettings, resolved: dict) -> None:
    """A route no layer's mask lets exist is refused (a cut of it changes nothing: Δ would read 0.000, a
    silently wrong answer); one that exists in some layers only (sliding-window layers) says which."""
    exists = route_layers(loaded, batch, queries, keys)
    if not any(exists):
        raise KnockoutError(
            f"no route from {s.source!r} to {s.target!r} exists in any layer: every layer's mask forbids it (a key "
            "beyond the sliding window); choose words closer together",
            field="target",
        )
    if not all(exists):
        absent = [layer for layer, e in enumerate(exists) if not e]
        resolved["mask"] = {
            "said": f"the route does not exist in {len(absent)} of {len(exists)} layers (their window): cuts "
            f"there change nothing ({', '.join(map(str, absent[:12]))}{', …' if len(absent) > 12 else ''})",
            "absent_layers": absent,
        }


LOCAL = 3  # keys this close before a query are its local context: a control there moves the prediction itself


def _route(loaded, s: KnockoutSettings, ids: torch.Tensor) -> tuple[list[int], list[int], list[int], dict]:
    """(queries, keys, control keys, what the words resolved to): the route and a control of the same length —
    the same queries to as many other keys they see, drawn with ``seed`` (not the route's keys, not the
    queries, not position 0 (the sink), and not the LOCAL keys just before a query (its local context, which
    carries the prediction itself) while enough others remain)."""
    queries, q_matches = resolve_positions(loaded.tokenizer, s.text, ids, s.source, "source")
    keys, k_matches = resolve_positions(loaded.tokenizer, s.text, ids, s.target, "target")
    if not any(k <= q for q in queries for k in keys):
        raise KnockoutError(
            f"no {s.source!r} position comes after a {s.target!r} position: a causal model has no such route",
            field="target",
        )
    eligible = sorted({k for q in queries for k in range(1, q + 1)} - set(keys) - set(queries))
    if len(eligible) < len(keys):
        raise KnockoutError("the text is too short for a control route of the same length", field="text")
    distant = [k for k in eligible if not any(0 < q - k <= LOCAL for q in queries)]
    eligible = distant if len(distant) >= len(keys) else eligible
    g = np.random.default_rng(s.seed)
    control = sorted(int(x) for x in g.choice(eligible, size=len(keys), replace=False))
    resolved = {"source": said(s.source, queries, q_matches), "target": said(s.target, keys, k_matches)}
    return queries, keys, control, resolved


def _target_id(loaded, target_token: str | None, clean: torch.Tensor) -> int:
    """The token whose probability is read: the one given, or the model's own top prediction."""
    if target_token is None:
        return int(clean[-1].argmax())
    tid = loaded.tokenizer(target_token, add_special_tokens=False)["input_ids"]
    if len(tid) != 1:
        raise KnockoutError(f"target token {target_token!r} is {len(tid)} tokens; give one token", field="target_token")
    return int(tid[0])


def _slide(loaded, batch: dict, result: KnockoutResult, metric, clean: torch.Tensor) -> None:
    """The route and the control cut in every window of ``result.window`` layers, measured into ``result``;
    the runs batched as copies of the text (_copies), each copy its own window and route."""
    heads = result.heads
    starts = range(0, loaded.n_layers - result.window + 1)

    def cut(keys, start):
        layers = range(start, start + result.window)
        return lambda c: [KnockoutEdges(result.queries, keys, heads, layer=layer, batch=[c]) for layer in layers]

    cuts = [cut(keys, start) for start in starts for keys in (result.keys, result.control_keys)]
    T = batch["input_ids"].shape[1]
    runs = _runs(loaded, batch, cuts, _copies(T, clean.shape[-1], len(cuts)))
    ids = batch["input_ids"][0]
    clean_terms, first = _terms(clean, ids), min(result.queries)
    for start in starts:
        run_r, run_c = next(runs), next(runs)
        pr, lr = _p(run_r, result.target_id), _cut_loss(clean_terms, run_r, ids, first)
        pc, lc = _p(run_c, result.target_id), _cut_loss(clean_terms, run_c, ids, first)
        if metric is not None:
            result.metric["route"].append(metric(run_r))
            result.metric["control"].append(metric(run_c))
        result.windows.append((start, start + result.window - 1))
        result.p_route.append(pr)
        result.p_control.append(pc)
        result.loss_route.append(lr)
        result.loss_control.append(lc)


__all__ = ["KnockoutError", "KnockoutResult", "knockout"]
