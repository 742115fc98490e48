"""k copies of a model batch, or of a block's output, along the batch axis: one forward then runs k
interventions, each on its own copy (knockouts, patches and settle rounds batched), since at a short prompt a
forward costs reading the weights, not the tokens."""

from __future__ import annotations

import torch


def repeat_batch(batch: dict, k: int) -> dict:
    """A model batch as k copies along the batch axis: one forward that runs k interventions, each on its own
    copy (knockouts, patches and settle rounds batched; the intervention names its copy's items)."""
    return {key: val.repeat(k, *([1] * (val.dim() - 1))) for key, val in batch.items()}


def repeat_output(out, k: int):
    """A block's output (a tensor or a tuple holding tensors) with every batch-major tensor repeated k times."""
    if isinstance(out, torch.Tensor):
        return out.repeat(k, *([1] * (out.dim() - 1)))
    if isinstance(out, tuple):
        return type(out)(repeat_output(o, k) for o in out) if not hasattr(out, "_fields") else out
    return out


__all__ = ["repeat_batch", "repeat_output"]
