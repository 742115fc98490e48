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

from ...promptset import METRICS, Metric


def _wide(x: torch.Tensor) -> torch.Tensor:
    """fp16/bf16 logits are read in fp32; fp32 and fp64 stay as they are."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _last(logits: torch.Tensor) -> torch.Tensor:
    return _wide(logits[:, -1])  # (B, V)


def logit_diff(logits, batch):
    last = _last(logits)
    return (last.gather(1, batch["answer"][:, None]) - last.gather(1, batch["wrong"][:, None]))[:, 0]


def prob(logits, batch):
    return torch.softmax(_last(logits), -1).gather(1, batch["answer"][:, None])[:, 0]


def logprob(logits, batch):
    return torch.log_softmax(_last(logits), -1).gather(1, batch["answer"][:, None])[:, 0]


def loss(logits, batch):
    ce = F.cross_entropy(_wide(logits[:, :-1]).transpose(1, 2), batch["input_ids"][:, 1:], reduction="none")
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


def resolve(metric: str | Metric) -> tuple[str, Metric]:
    """(name, callable) for a built-in name or a Python callable."""
    if isinstance(metric, str):
        return metric, BUILT_IN[metric]
    return getattr(metric, "__name__", "custom"), metric


__all__ = ["BUILT_IN", "cosine", "kl", "logit_diff", "logprob", "loss", "prob", "resolve"]
