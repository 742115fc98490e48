"""Your metric on the runs of one text: what `knockout --metric` and `swap --metric` report beside their own.

    m = TextMetric(tokenizer, "logit-diff", answer=" Mary", wrong=" John", ids=ids, clean_logits=logits)
    m(logits_of_an_edited_run)  ->  float

The metric reads the last position; kl compares with the clean run's distribution (``clean_logits``).
"""

from __future__ import annotations

import torch

from ...engine import InputError
from ...promptset import METRIC_FIELDS, metric_name
from .metrics import resolve
from .prompts import single_token


def check_text_metric(tokenizer, metric, answer, wrong) -> dict:
    """The metric's token fields as ids [1], refused in one line (naming the field) before any run."""
    if metric is None:
        return {}
    if isinstance(metric, str):
        metric_name(metric)
        if metric == "cosine":
            raise InputError("metric cosine compares encoder embeddings; this verb reads a causal LM", field="metric")
    needs = METRIC_FIELDS.get(metric, ()) if isinstance(metric, str) else ()
    fields = {}
    for name, text in (("answer", answer), ("wrong", wrong)):
        if text is None:
            if name in needs:
                raise InputError(f"metric {metric} reads `{name}`: give the token (e.g. ' Mary')", field=name)
            continue
        fields[name] = torch.tensor([single_token(tokenizer, text, name)])
    return fields


class TextMetric:
    def __init__(self, tokenizer, metric, answer, wrong, ids: torch.Tensor, clean_logits: torch.Tensor):
        self.name, self.fn = resolve(metric)
        self.batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        self.batch.update(check_text_metric(tokenizer, metric, answer, wrong))
        self.batch["clean_logprobs"] = torch.log_softmax(clean_logits[-1:].float(), -1)  # (1, V)

    def __call__(self, logits: torch.Tensor) -> float:
        """``logits`` [T, V] of one run."""
        return float(self.fn(logits[None], self.batch)[0])


__all__ = ["TextMetric", "check_text_metric"]
