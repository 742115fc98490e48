"""Metrics: ``metric(logits, batch) -> Tensor[B]``, one value per prompt, larger = more of the behaviour.

    logits  [B, T', V]  the model's logits (T' = 1, the last position, when ``metric.last_only``);
                        for an encoder, the mean-pooled sentence embedding [B, D] instead
    batch   dict        input_ids [B, T], attention_mask [B, T], answer [B] and wrong [B] (token ids),
                        clean_logprobs [B, V] (the clean run's last-position log-probabilities),
                        clean_embedding [B, D] (encoders)

Built-ins by name (the command line's --metric):

    logit-diff  logit(answer) − logit(wrong) at the last position
    prob        p(answer) at the last position
    logprob     log p(answer) at the last position
    loss        the prompt's mean next-token cross-entropy (today's effect of `heads`; all positions)
    kl          KL(clean ‖ run) at the last position: 0 on the clean run itself
    cosine      encoders: cos(pooled embedding, the clean run's pooled embedding)

Any Python callable of the same shape works; set ``fn.last_only = True`` when it reads only the last
position (the model's output head then runs on one position: 49,152 logits per prompt, not T × 49,152).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...errors import InputError
from ...promptset import METRICS, Metric

WIDE_BLOCK = 1 << 24  # logits' values a cross-entropy block reads at once (64 MiB in fp32)
IGNORED = -100  # cross_entropy's default ignore_index


def _wide(x: torch.Tensor) -> torch.Tensor:
    """fp16/bf16 logits are read in fp32; fp32 and fp64 stay as they are."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _last(logits: torch.Tensor) -> torch.Tensor:
    return _wide(logits[:, -1])  # (B, V)


def logit_diff(logits, batch):
    last = logits[:, -1]  # the two logits read are widened, not the row: the same numbers
    return (_wide(last.gather(1, batch["answer"][:, None])) - _wide(last.gather(1, batch["wrong"][:, None])))[:, 0]


def prob(logits, batch):
    return torch.softmax(_last(logits), -1).gather(1, batch["answer"][:, None])[:, 0]


def logprob(logits, batch):
    return torch.log_softmax(_last(logits), -1).gather(1, batch["answer"][:, None])[:, 0]


def token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy per position [B, T] of logits [B, T, V] (read in fp32 at least) against targets [B, T].

    Every dtype goes through _BlockwiseCrossEntropy, which keeps the logits alone for the backward: autograd
    through F.cross_entropy keeps a log-softmax as large as the logits (in fp32 for low-precision logits, with
    a float32 copy besides). Heads' working memory then scales with the logits' dtype, as models/fit.py counts
    it. Each block holds rows of [B·T, V], the vocabulary contiguous: cross_entropy over the transposed
    [B, V, T] view reads the vocabulary with a stride of T and took 3.3 s instead of 0.35 s at 4,096 × 49,152
    on 2 cores."""
    return _BlockwiseCrossEntropy.apply(logits, targets)


def _blocks(logits: torch.Tensor):
    """(b, rows) blocks of one prompt's positions holding at most WIDE_BLOCK values, in order."""
    step = max(1, WIDE_BLOCK // logits.shape[-1])
    for b in range(logits.shape[0]):
        for i in range(0, logits.shape[1], step):
            yield b, slice(i, i + step)


class _BlockwiseCrossEntropy(torch.autograd.Function):
    """Cross-entropy of logits [B, T, V], in float32 at least, a block at a time (WIDE_BLOCK values).

    Autograd through ``F.cross_entropy`` keeps the log-softmax of every position for the backward, and through
    ``logits.float()`` a float32 copy too: three times bf16 logits (a 262k vocabulary: 1.5 MiB a position),
    twice float32 ones. This keeps the logits alone and widens each block again in the backward; its gradient
    is (softmax − one-hot) · ∂out, cast to the logits' dtype, as autograd's through the cast, within rounding
    (tests/read/test_low_precision.py)."""

    @staticmethod
    def forward(ctx, logits, targets):
        ctx.save_for_backward(logits, targets)
        out = logits.new_empty(targets.shape, dtype=torch.promote_types(logits.dtype, torch.float32))
        for b, rows in _blocks(logits):
            out[b, rows] = F.cross_entropy(_wide(logits[b, rows]), targets[b, rows], reduction="none")
        return out

    @staticmethod
    def backward(ctx, grad_out):
        logits, targets = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for b, rows in _blocks(logits):
            p, t = torch.softmax(_wide(logits[b, rows]), -1), targets[b, rows]
            kept = (t != IGNORED).nonzero()[:, 0]  # cross_entropy's ignore_index: no loss, no gradient
            p[kept, t[kept]] -= 1
            p[t == IGNORED] = 0
            grad[b, rows] = p * grad_out[b, rows, None]
        return grad, None


def loss(logits, batch):
    ce = token_loss(logits[:, :-1], batch["input_ids"][:, 1:])
    m = batch["attention_mask"][:, 1:].float()
    return (ce * m).sum(1) / m.sum(1).clamp_min(1)


def kl(logits, batch):
    ref = batch["clean_logprobs"]  # (B, V)
    return (ref.exp() * (ref - torch.log_softmax(_last(logits), -1))).sum(-1)


def cosine(embedding, batch):
    return F.cosine_similarity(_wide(embedding), batch["clean_embedding"], dim=-1)


BUILT_IN = {"logit-diff": logit_diff, "prob": prob, "logprob": logprob, "loss": loss, "kl": kl, "cosine": cosine}
for _name, _fn in BUILT_IN.items():  # what each reads is said once, in promptset.METRICS
    _fn.last_only = METRICS[_name].last_only


class MetricError(InputError):
    """A metric (most often your own callable) that did not give one finite number per prompt."""

    def __init__(self, message: str):
        super().__init__(message, field="metric")


def measured(metric, x: torch.Tensor, batch: dict, n: int, name: str) -> torch.Tensor:
    """``metric(x, batch)``, checked: a floating tensor of ``n`` finite values, one per prompt (its graph kept
    for the estimates' backward). A metric that raises, returns another shape or type, or gives NaN or inf is
    refused in one line naming it — never a traceback, never a result built on it."""
    try:
        out = metric(x, batch)
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001  (your callable may fail in any way)
        said = str(e).splitlines()[0][:160] if str(e) else ""
        raise MetricError(f"metric {name} raised {type(e).__name__}: {said}") from None
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        what = type(out).__name__ if not isinstance(out, torch.Tensor) else f"a tensor of {out.dtype}"
        raise MetricError(
            f"metric {name} returned {what}; expected a floating tensor [B] of {n} values, one per prompt"
        )
    if tuple(out.shape) != (n,):
        raise MetricError(f"metric {name} returned shape {list(out.shape)}; expected [{n}], one value per prompt")
    if torch.is_grad_enabled() and x.requires_grad and not out.requires_grad:
        raise MetricError(
            f"metric {name} returned a tensor cut from the model's graph (.detach(), .item(), numpy, a new tensor): "
            "attnroute differentiates your metric for its estimates; compute it from the logits with torch operations"
        )
    bad = ~torch.isfinite(out.detach())
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0])
        raise MetricError(
            f"metric {name} gave {float(out[i].detach())} for prompt {i + 1} of a batch of {n}; "
            "every value must be finite"
        )
    return out


def checked(fn, name: str) -> Metric:
    """``fn`` whose every value is checked (``measured``: one finite number per prompt), ``last_only`` kept."""

    def metric(x, batch):
        return measured(fn, x, batch, x.shape[0], name)

    metric.last_only = getattr(fn, "last_only", False)
    metric.__name__ = name
    return metric


def resolve(metric: str | Metric) -> tuple[str, Metric]:
    """(name, callable) for a built-in name or a Python callable — checked wherever it is called."""
    name = metric if isinstance(metric, str) else getattr(metric, "__name__", "custom")
    return name, checked(BUILT_IN[metric] if isinstance(metric, str) else metric, name)


__all__ = [
    "BUILT_IN",
    "MetricError",
    "cosine",
    "kl",
    "logit_diff",
    "logprob",
    "loss",
    "measured",
    "prob",
    "checked",
    "resolve",
]
