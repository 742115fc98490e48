"""A prompt set over ranks, and its checkpoint: `torchrun … -m attnroute patch --prompts …` and `--checkpoint`.

Prompts are dealt round-robin (prompt i to rank i mod world). Every per-prompt number — the metric on
the clean and corrupt runs, each component's estimate and exact value, each head's direct effect — is
computed by the rank holding the prompt and gathered, so every rank sees the whole [components,
prompts] arrays: the settling order (from the mean estimate over all prompts) and the statistics are
those of one process.

The checkpoint holds those arrays (safetensors, written atomically by rank 0 after every round of
exact patching) under a key made of what changes the numbers: the prompts, the metric, the direction,
the sites, the positions and settling rule, the model's config and weights. Per-prompt values do not
depend on how prompts were sharded, so a run resumes under any number of ranks; components already
measured are not run again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from ...engine import InputError
from ..corpus.checkpoint import START_OVER, CheckpointMismatch, read_safetensors, state_digest, weights_digest

VERSION = "patch-1"


class Shard:
    def __init__(self, n: int, rank: int, world: int):
        self.n, self.rank, self.world = n, rank, world
        self.rows = list(range(rank, n, world))  # this rank's prompts, as indices of the whole set

    def merge(self, local: np.ndarray) -> np.ndarray:
        """[..., n] arrays with NaN outside this rank's prompts -> the whole array, the same on every rank."""
        if self.world == 1:
            return local
        parts = [None] * self.world
        torch.distributed.all_gather_object(parts, np.asarray(local))
        out = np.full_like(parts[0], np.nan, dtype=np.float64)
        for r, part in enumerate(parts):
            out[..., r :: self.world] = part[..., r :: self.world]
        return out

    def merge_max(self, values: list[float]) -> list[float]:
        """Every rank's values, concatenated (for a worst case over all prompts)."""
        if self.world == 1:
            return list(values) or [float("nan")]
        parts = [None] * self.world
        torch.distributed.all_gather_object(parts, list(values))
        return [v for p in parts for v in p] or [float("nan")]


def checkpoint_key(s, loaded, metric_name: str) -> str:
    if not isinstance(s.metric, str):
        raise InputError("a checkpoint needs a built-in metric (a Python callable cannot be recognised on resume)",
                         field="checkpoint")  # fmt: skip
    ident = {
        "pairs": [[p.clean, p.corrupt, p.answer, p.wrong] for p in s.pairs],
        "settings": [metric_name, s.direction, list(s.sites), s.positions, str(s.exact), s.top],
        "config": hashlib.sha256(loaded.model.config.to_json_string().encode()).hexdigest(),
        "weights": weights_digest(loaded),
        "version": VERSION,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def save(path: Path, state: dict[str, np.ndarray], key: str) -> None:
    """Atomic: written beside under a unique name, then renamed over (a kill leaves the old or the new)."""
    from safetensors.numpy import save_file

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        state = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in state.items()}
        save_file(state, tmp, metadata={"key": key, "version": VERSION, "state": state_digest(state)})
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: Path, key: str, shapes: dict[str, tuple]) -> dict[str, np.ndarray] | None:
    """The arrays of a checkpoint written by this very command, None when there is none; refused in one
    line when it was written by another command, another version, or is damaged."""
    if not path.exists():
        return None
    meta, state = read_safetensors(path, "patch")
    if meta.get("version") != VERSION:
        raise CheckpointMismatch(
            f"checkpoint {path} was not written by this version of `attnroute patch`; {START_OVER}"
        )
    if meta.get("key") != key:
        raise CheckpointMismatch(f"checkpoint {path} was written by another command (other prompts, metric, sites "
                                 f"or model weights); rerun with the same arguments, or {START_OVER}")  # fmt: skip
    if meta.get("state") != state_digest(state):
        raise CheckpointMismatch(f"checkpoint {path} is damaged: its numbers do not match their digest; {START_OVER}")
    bad = [k for k, shape in shapes.items() if k not in state or state[k].shape != shape]
    if bad:
        raise CheckpointMismatch(f"checkpoint {path} is damaged: {bad[0]} is missing or misshapen; {START_OVER}")
    return state


__all__ = ["Shard", "checkpoint_key", "load", "save"]
