"""What the model runs for a group of same-length prompts, and what a metric reads from its outputs.

    batch = batch_of(loaded, ids)                 # input_ids, attention_mask (+ an encoder-decoder's decoder ids)
    x = metric_input(loaded, outputs, batch)      # logits, or an encoder's pooled sentence embedding
    kwargs = {**output_kwargs(loaded, metric), **no_cache(loaded)}

No padding ever enters a patched run: prompts of one length are one batch [n, T].
"""

from __future__ import annotations

import inspect

import torch

from ..effects import pooled
from .budget import dtype_factor, scaled
from .speech import Clips

# the logits of one batched forward's copies (patch, circuit, knockout): a 262k vocabulary is 1 MiB a float32 row
LOGIT_BYTES = 256 << 20


def batch_of(loaded, ids: torch.Tensor | Clips) -> dict:
    """The model's inputs for prompts [n, T] of one length: no padding; an encoder-decoder's decoder reads
    its start token only (the metric reads the first decoder position). Clips (a speech model's runs) give
    their features and decoder ids."""
    if isinstance(ids, Clips):
        return ids.batch()
    b = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if loaded.seq2seq:
        start = int(loaded.model.config.decoder_start_token_id or 0)
        b["decoder_input_ids"] = torch.full((ids.shape[0], 1), start, dtype=torch.long)
    return b


def output_kwargs(loaded, metric) -> dict:
    """logits_to_keep=1 when the metric reads the last position only and the model takes the argument:
    the output head then runs on one position (most of a small model's forward otherwise)."""
    if loaded.kind == "encoder" or not getattr(metric, "last_only", False):
        return {}
    return last_logits(loaded)


def logit_copies(loaded, n: int, length: int, kwargs: dict) -> int:
    """Copies of a group of n prompts of ``length`` tokens whose logits one forward may hold: LOGIT_BYTES under the
    memory cap in force, at the model's bytes a logit (a bf16 model's copies as many as float32's, in half the
    bytes). The token budgets alone let Gemma 3's patch hold 546 copies' logits at 1 MiB a prompt, half its working
    memory. The last position only under logits_to_keep=1; no bound for an encoder's pooled embedding."""
    if loaded.kind == "encoder":
        return 1 << 30
    cfg = loaded.model.config
    vocab = int(getattr(cfg, "vocab_size", 0) or getattr(cfg.get_text_config(), "vocab_size", 0) or 50_000)
    positions = 1 if kwargs.get("logits_to_keep") == 1 else length
    per_copy = n * positions * vocab * 4 * dtype_factor(loaded.model)
    return max(1, int(scaled(LOGIT_BYTES) // max(1, per_copy)))


def last_logits(loaded) -> dict:
    """logits_to_keep=1 where the model takes it: the output head on the last position alone (at 1,000 tokens
    SmolLM2's head over all of them is 28 GFLOP of a forward that reads one row)."""
    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(loaded.model.forward).parameters else {}


def no_cache(loaded) -> dict:
    """use_cache=False where the model takes it: a recomputed block must not append its keys to a cache
    a second time (the recomputation would then attend to 2·T keys), and nothing here decodes."""
    return {"use_cache": False} if "use_cache" in inspect.signature(loaded.model.forward).parameters else {}


def metric_input(loaded, outputs, batch: dict) -> torch.Tensor:
    """What a metric reads: the logits, or an encoder's mean-pooled sentence embedding."""
    return outputs.logits if loaded.kind != "encoder" else pooled(outputs.last_hidden_state, batch["attention_mask"])


def references(loaded, clean_out, batch) -> dict:
    """What kl and cosine compare with: the clean run's last-position log-probabilities / pooled embedding."""
    if loaded.kind == "encoder":
        return {"clean_embedding": pooled(clean_out.last_hidden_state, batch["attention_mask"]).detach()}
    return {"clean_logprobs": torch.log_softmax(clean_out.logits[:, -1].float(), -1).detach()}


__all__ = ["batch_of", "metric_input", "no_cache", "output_kwargs", "references"]
