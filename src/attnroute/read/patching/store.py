"""A patching experiment's per-prompt arrays, gathered over ranks and kept in a checkpoint.

Prompts are dealt round-robin over ranks (ground/group.Shard). Every per-prompt number — the metric on
the clean and corrupt runs, each component's estimate and exact value, each head's direct effect — is
computed by the rank holding the prompt and gathered, so every rank sees the whole [components,
prompts] arrays: the settling order (from the mean estimate over all prompts) and the statistics are
those of one process.

The checkpoint (ground/checkpoint.py, written by rank 0 after every round of exact patching) is keyed
by what changes the numbers: the prompts, the metric, the direction, the sites, the positions and the
settling rule, the model's config and weights. Per-prompt values do not depend on how prompts were
sharded, so a run resumes under any number of ranks; components already measured are not run again.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...engine import InputError
from ..ground.checkpoint import START_OVER, CheckpointMismatch, fingerprint, read_state, write_state
from ..ground.group import Shard


def patch_key(s, pairs, loaded, metric_name: str) -> str:
    if not isinstance(s.metric, str):
        raise InputError(
            "a checkpoint needs a built-in metric (a Python callable cannot be recognised on resume)",
            field="checkpoint",
        )
    ident = {
        "pairs": [[p.clean, p.corrupt, p.answer, p.wrong] for p in pairs],
        "settings": [metric_name, s.direction, list(s.sites), s.positions, str(s.exact), s.top],
    }
    return fingerprint("patch", ident, loaded)


class Store:
    """The whole per-prompt arrays (gathered over ranks), resumed from and saved to ``checkpoint``."""

    def __init__(self, s, pairs, loaded, metric_name: str, comps: dict, shard: Shard):
        N = len(pairs)
        self.shard, self.path = shard, None if s.checkpoint is None else Path(s.checkpoint)
        self.state = {f"values.{site}": np.full((len(cs), N), np.nan) for site, cs in comps.items()}
        self.key, self.resumed = None, None
        if self.path is not None:
            self.key = patch_key(s, pairs, loaded, metric_name)
            shapes = {**{k: v.shape for k, v in self.state.items()}, "m_clean": (N,), "m_corrupt": (N,)}
            found = load(self.path, self.key, shapes)
            if found is not None:
                self.state.update(found)
                done = sum(int(np.isfinite(v).all(1).sum()) for k, v in found.items() if k.startswith("values."))
                self.resumed = {"from": str(self.path), "components_measured": done}

    def save(self) -> None:
        if self.path is not None and self.shard.rank == 0:
            write_state(self.path, {k: np.asarray(v, dtype=np.float64) for k, v in self.state.items()}, self.key)


def load(path: Path, key: str, shapes: dict[str, tuple]) -> dict[str, np.ndarray] | None:
    """The arrays of a checkpoint written by this very command, None when there is none; refused in one
    line when it was written by another command, another version, or is damaged."""
    found = read_state(path, "patch", key)
    if found is None:
        return None
    state = found[1]
    bad = [k for k, shape in shapes.items() if k not in state or state[k].shape != shape]
    if bad:
        raise CheckpointMismatch(f"checkpoint {path} is damaged: {bad[0]} is missing or misshapen; {START_OVER}")
    return state


__all__ = ["Store", "load", "patch_key"]
