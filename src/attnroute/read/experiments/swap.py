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
from ...models import LoadedModel, load, load_tokenizer
from ...progress import reporter
from ...settings import SwapSettings, verb
from ..adapter import routed
from ..capture import capture_weights
from ..ground.text_metric import TextMetric, check_text_metric
from ..stimuli import encode_text, tokens_of


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

    ROWS = "layers"  # the table its notebook display shows
    SCHEMA = {
        "experiment": str,
        "verdict": {"lines": [str]},
        "summary": dict,
        "model": str,
        "top_a": str,
        "top_b": str,
        "window": int,
        "layers": [{"layers": [int], "kl_from_a": float, "kl_from_b": float, "p_top_a": float, "p_top_b": float}],
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

    def to_dict(self) -> dict:
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


def _last_logprobs(loaded, ids, interventions=()) -> torch.Tensor:
    with torch.no_grad(), routed(loaded, interventions=interventions, impl="eager"):
        logits = loaded.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0, -1].float()
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
    if s.metric is not None and not isinstance(s.model, LoadedModel):  # its tokens are checked before the weights
        found = load_tokenizer(s.model)
        if found is not None:
            check_text_metric(found[0], s.metric, s.answer, s.wrong)
    loaded = s.model if isinstance(s.model, LoadedModel) else load(s.model, progress=lambda m: say("load", m))
    say("stage", f"running B with A's maps in every {s.window}-layer window")
    prompt_a, prompt_b, window = s.prompt_a, s.prompt_b, s.window
    heads = list(s.heads) if s.heads is not None else None
    if not loaded.causal:
        raise SwapError("map swap compares a causal LM's next-token prediction; this model is not one")
    ids_a, _ = encode_text(loaded.tokenizer, prompt_a, None)
    ids_b, _ = encode_text(loaded.tokenizer, prompt_b, None)
    longer = "prompt_b" if ids_b.shape[1] > ids_a.shape[1] else "prompt_a"
    loaded.fit(max(ids_a.shape[1], ids_b.shape[1]), longer, "the prompt")
    if ids_a.shape != ids_b.shape:
        raise SwapError(
            f"the prompts have {ids_a.shape[1]} and {ids_b.shape[1]} tokens; a map swap needs the same count "
            "(change a word for one of as many tokens)",
            field="prompt_b",
        )
    L, H = loaded.n_layers, loaded.n_heads
    if not 1 <= window <= L:
        raise SwapError(f"window must be between 1 and the model's {L} layers, got {window}", field="window")
    bad = [h for h in heads or [] if not 0 <= h < H]
    if bad:
        raise SwapError(f"head {bad[0]} does not exist: the model has {H} heads", field="heads")
    heads_used = list(range(H)) if heads is None else list(heads)
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
        window,
        heads,
        metric=None if metric is None else {"name": metric.name, "b": metric(log_b[None]), "a": metric(log_a[None])},
    )
    for start in range(0, L - window + 1):
        ivs = [
            SubstituteWeights(heads_used, torch.from_numpy(maps_a[layer][heads_used])[None], layer=layer)
            for layer in range(start, start + window)
        ]
        log_s = _last_logprobs(loaded, ids_b, ivs)
        result.rows.append(
            {
                "layers": [start, start + window - 1],
                "kl_from_b": _kl(log_s, log_b),
                "kl_from_a": _kl(log_s, log_a),
                "p_top_a": float(log_s[top_a].exp()),
                "p_top_b": float(log_s[top_b].exp()),
                **(
                    {}
                    if metric is None
                    else {"metric": metric(log_s[None]), "delta_metric": metric(log_s[None]) - result.metric["b"]}
                ),
            }
        )
    return result


__all__ = ["SwapError", "SwapResult", "swap"]
