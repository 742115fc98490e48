"""Map swap (prompt-to-prompt, Hertz et al. 2022, on a language model): run prompt B with the attention
weights prompt A produced substituted in chosen layers and heads, and change nothing else — B's values,
B's residual stream — then compare B's output with and without A's routes.

    result = swap("smollm2", "The capital of France is", "The capital of Spain is")

The two prompts must have the same number of tokens (a map is [T, T]); otherwise refused. Per layer
(or per window of ``window`` layers), at the last position: the KL divergence of the swapped output
from B's own, its divergence from A's, and the probability of A's and of B's top token. A layer whose
swap moves B toward A carries routing that differs between the prompts; a layer whose swap changes
nothing carries the structure both share (or is not read at the last position).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...engine import InputError, SubstituteWeights
from ...engine.jsonable import Result
from ...progress import reporter
from ...settings import SwapSettings, verb
from ..adapter import routed
from ..capture import capture_weights
from ..ground.batches import last_logits
from ..ground.text_metric import TextMetric
from ..stimuli import encode_text, tokens_of
from ..study import causal_only
from .common import check_window_heads, load_checked


class SwapError(InputError):
    """Two prompts whose maps cannot be exchanged."""


@dataclass(repr=False)
class SwapResult(Result):
    """Prompt B run with A's attention maps, window by window.

    rows       one dict per window: layers [first, last], kl_from_b and kl_from_a (nats, of the swapped
               output's last-position distribution), p_top_a and p_top_b (probabilities), your metric
    top_a, top_b   each prompt's own top next token
    metric     your metric on B's and A's own runs (metric units)
    """

    KIND = "swap"
    TABLE = "layers"  # its table's key before format 1 (an alias of rows until 0.3)

    SCHEMA = {
        "experiment": str,
        "verdict": {"lines": [str]},
        "summary": dict,
        "model": str,
        "top_a": str,
        "top_b": str,
        "window": int,
        "rows": [{"layers": [int], "kl_from_a": float, "kl_from_b": float, "p_top_a": float, "p_top_b": float}],
    }

    model: str
    tokens_a: list[str]
    tokens_b: list[str]
    top_a: str
    top_b: str
    window: int
    heads: list[int] | None
    rows: list[dict] = field(default_factory=list)
    metric: dict | None = None  # your metric: its name and its value on B's and A's own runs

    def payload(self) -> dict:
        most = max(self.rows, key=lambda r: r["kl_from_b"]) if self.rows else None
        lines = [f"top token: A {self.top_a!r}, B {self.top_b!r}"]
        if most:
            lines.append(
                f"A's maps move B most in layers {most['layers'][0]}–{most['layers'][1]}: KL from B "
                f"{most['kl_from_b']:.3f} nats, from A {most['kl_from_a']:.3f}"
            )
        return {
            "experiment": "swap",
            "verdict": {"lines": lines},
            "summary": {"windows": len(self.rows), "window": self.window},
            "model": self.model,
            "tokens_a": self.tokens_a,
            "tokens_b": self.tokens_b,
            "top_a": self.top_a,
            "top_b": self.top_b,
            "window": self.window,
            "heads": self.heads if self.heads is not None else "all",
            "layers": self.rows,
            "metric": self.metric,
        }

    @classmethod
    def from_dict(cls, data: dict) -> SwapResult:
        out = super().from_dict({**data, "heads": None if data["heads"] == "all" else data["heads"]})
        return out


def _last_logprobs(loaded, ids, interventions=()) -> torch.Tensor:
    with torch.no_grad(), routed(loaded, interventions=interventions, impl="eager"):
        out = loaded.model(input_ids=ids, attention_mask=torch.ones_like(ids), **last_logits(loaded))
    logits = out.logits[0, -1].float()
    return torch.log_softmax(logits, -1)


def _kl(p_log: torch.Tensor, q_log: torch.Tensor) -> float:
    """KL(p ‖ q) in nats from log-probabilities."""
    return float((p_log.exp() * (p_log - q_log)).sum())


@verb(SwapSettings)
def swap(
    model=None,
    prompt_a: str | None = None,
    prompt_b: str | None = None,
    *,
    settings: SwapSettings | None = None,
    progress=None,
    **fields,
) -> SwapResult:
    """B run with A's weights in each window of ``window`` layers (all heads, or ``heads``). The fields are
    SwapSettings' (window, heads), or pass ``settings``."""
    s = SwapSettings.of(settings, model, fields, prompt_a=prompt_a, prompt_b=prompt_b)
    say = reporter(progress)
    not_one = "map swap compares a causal LM's next-token prediction; {} is not one"
    loaded = load_checked(s, say, causal_only(lambda name: SwapError(not_one.format(name))))
    say("stage", f"running B with A's maps in every {s.window}-layer window")
    ids_a, ids_b = _prompts(loaded, s)
    check_window_heads(loaded, s.window, s.heads, SwapError)
    heads = list(s.heads) if s.heads is not None else None
    maps_a = capture_weights(loaded, ids_a)  # L × [H, T, T]
    log_a, log_b = _last_logprobs(loaded, ids_a), _last_logprobs(loaded, ids_b)
    top_a, top_b = int(log_a.argmax()), int(log_b.argmax())
    tok = loaded.tokenizer
    # your metric on B's last position (log-probabilities read as logits: every metric here is shift-invariant)
    metric = None if s.metric is None else TextMetric(tok, s.metric, s.answer, s.wrong, ids_b, log_b[None])
    result = SwapResult(
        loaded.name,
        tokens_of(tok, ids_a[0]),
        tokens_of(tok, ids_b[0]),
        tok.decode([top_a]),
        tok.decode([top_b]),
        s.window,
        heads,
        metric=None if metric is None else {"name": metric.name, "b": metric(log_b[None]), "a": metric(log_a[None])},
    )
    heads_used = list(range(loaded.n_heads)) if heads is None else heads
    for start in range(0, loaded.n_layers - s.window + 1):
        ivs = [
            SubstituteWeights(heads_used, torch.from_numpy(maps_a[layer][heads_used])[None], layer=layer)
            for layer in range(start, start + s.window)
        ]
        row = _row(_last_logprobs(loaded, ids_b, ivs), log_a, log_b, top_a, top_b, metric, result.metric)
        result.rows.append({"layers": [start, start + s.window - 1], **row})
    return result


def _prompts(loaded, s: SwapSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """Both prompts as ids [1, T], of one length (a map is [T, T]) that fits the model."""
    ids_a, _ = encode_text(loaded.tokenizer, s.prompt_a, None)
    ids_b, _ = encode_text(loaded.tokenizer, s.prompt_b, None)
    longer = "prompt_b" if ids_b.shape[1] > ids_a.shape[1] else "prompt_a"
    loaded.fit(max(ids_a.shape[1], ids_b.shape[1]), longer, "the prompt")
    if ids_a.shape != ids_b.shape:
        raise SwapError(
            f"the prompts have {ids_a.shape[1]} and {ids_b.shape[1]} tokens; a map swap needs the same count "
            "(change a word for one of as many tokens)",
            field="prompt_b",
        )
    return ids_a, ids_b


def _row(log_s, log_a, log_b, top_a: int, top_b: int, metric, measured: dict | None) -> dict:
    """One window's numbers: KL of the swapped output from B's and A's, p of each top token, your metric."""
    row = {
        "kl_from_b": _kl(log_s, log_b),
        "kl_from_a": _kl(log_s, log_a),
        "p_top_a": float(log_s[top_a].exp()),
        "p_top_b": float(log_s[top_b].exp()),
    }
    if metric is not None:
        value = metric(log_s[None])
        row.update(metric=value, delta_metric=value - measured["b"])
    return row


__all__ = ["SwapError", "SwapResult", "swap"]
