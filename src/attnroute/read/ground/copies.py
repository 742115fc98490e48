"""k copies of a model batch, or of a block's output, along the batch axis: one forward then runs k
interventions, each on its own copy (knockouts, patches and settle rounds batched), since at a short prompt a
forward costs reading the weights, not the tokens."""

from __future__ import annotations

import torch

TILE_BYTES = 64 << 20  # a metric's per-prompt fields tiled, and low-precision logits widened, per call at most


def repeat_batch(batch: dict, k: int) -> dict:
    """A model batch as k copies along the batch axis: one forward that runs k interventions, each on its own
    copy (knockouts, patches and settle rounds batched; the intervention names its copy's items)."""
    return {key: val.repeat(k, *([1] * (val.dim() - 1))) for key, val in batch.items()}


def repeat_output(out, k: int, rows: int | None = None):
    """A block's output (a tensor or a tuple holding tensors) with every batch-major tensor repeated k times. In
    a tuple, batch-major means as many rows as its first tensor: a tensor of one row beside a batch of several
    broadcasts over it (T5's position bias [1, H, T, T], which each block hands the next) and stays as it is."""
    if isinstance(out, torch.Tensor):
        return out.repeat(k, *([1] * (out.dim() - 1))) if rows is None or out.shape[0] == rows else out
    if isinstance(out, tuple) and not hasattr(out, "_fields"):
        if rows is None:  # the tuple's rows: its first tensor's
            rows = next((o.shape[0] for o in out if isinstance(o, torch.Tensor) and o.dim()), None)
        return type(out)(repeat_output(o, k, rows) for o in out)
    return out


def batch_rows(batch: dict, a: int, b: int, B: int) -> dict:
    """Rows a … b − 1 of a batch of B rows (every tensor whose first axis is its rows); the whole batch as it is."""
    if (a, b) == (0, B):
        return batch
    return {k: v[a:b] if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == B else v for k, v in batch.items()}


def metric_of_copies(metric, x: torch.Tensor, batch: dict, fields: dict, n: int) -> torch.Tensor:
    """``metric(x, batch | fields)`` where x [k·n, …] holds k copies of n prompts (copy c: rows c·n … c·n + n − 1),
    ``batch`` is tiled as x, and ``fields`` [n, …] are per prompt: [k·n].

    Copies are read a slice at a time where the tiled fields and the float32 widening of x would pass TILE_BYTES.
    The clean run's log-probabilities [n, V] tiled to some 500 rows were 0.5 GiB of Gemma 3's patch (262k
    vocabulary), read by no metric but kl. A metric is one value per prompt, so the slices change no number."""
    fields = {name: v for name, v in fields.items() if v is not None}
    k = x.shape[0] // n
    per_copy = sum(v.nbytes for v in fields.values()) + x[:n].numel() * 4
    step = max(1, TILE_BYTES // max(1, per_copy))
    parts = []
    for c in range(0, k, step):
        a, b = c * n, min(k, c + step) * n
        tiled = {name: v.repeat(b // n - c, *([1] * (v.dim() - 1))) for name, v in fields.items()}
        parts.append(metric(x[a:b], {**batch_rows(batch, a, b, k * n), **tiled}))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


__all__ = ["TILE_BYTES", "batch_rows", "metric_of_copies", "repeat_batch", "repeat_output"]
