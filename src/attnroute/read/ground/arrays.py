"""An experiment's per-prompt arrays, gathered over ranks and kept in a checkpoint (patch, circuit).

Prompts are dealt round-robin over ranks (group.Shard). Every per-prompt number — the metric on the
clean and corrupt runs, each component's (or edge's) estimate and exact value — is computed by the rank
holding the prompt and gathered, so every rank sees the whole [components, prompts] arrays: the settling
order (from the mean estimate over all prompts) and the statistics are those of one process.

The checkpoint (checkpoint.py, written by rank 0 after every round of exact measurement) is keyed by what
changes the numbers: the prompts, the metric and the verb's settings, the model's config and weights.
Per-prompt values do not depend on how prompts were sharded, so a run resumes under any number of ranks;
what was already measured is not run again.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...engine import InputError
from .checkpoint import START_OVER, CheckpointMismatch, fingerprint, read_state, write_state
from .group import Shard


def pairs_key(kind: str, s, pairs, loaded, settings: list) -> str:
    """The checkpoint key of a verb over prompt pairs: the pairs, ``settings`` (what else changes the
    numbers) and the model. A Python callable metric cannot be recognised on resume: refused."""
    if not isinstance(s.metric, str):
        raise InputError(
            "a checkpoint needs a built-in metric (a Python callable cannot be recognised on resume)",
            field="checkpoint",
        )
    ident = {"pairs": [[p.clean, p.corrupt, p.answer, p.wrong] for p in pairs], "settings": settings}
    return fingerprint(kind, ident, loaded)


class Store:
    """The whole per-prompt arrays (gathered over ranks), resumed from and saved to ``path``.

    ``shapes``: every array the run keeps, by name ("values.*" arrays count what was measured: NaN = not yet)."""

    def __init__(self, kind: str, key: str | None, path, shapes: dict[str, tuple], shard: Shard):
        self.kind, self.key, self.shard = kind, key, shard
        self.path = None if path is None else Path(path)
        self.state = {k: np.full(v, np.nan) for k, v in shapes.items() if k.startswith("values.")}
        self.resumed = None
        if self.path is not None:
            found = load(self.path, kind, key, shapes)
            if found is not None:
                self.state.update(found)
                done = sum(int(np.isfinite(v).all(1).sum()) for k, v in found.items() if k.startswith("values."))
                self.resumed = {"from": str(self.path), "components_measured": done}

    def save(self) -> None:
        if self.path is not None and self.shard.rank == 0:
            write_state(self.path, {k: np.asarray(v, dtype=np.float64) for k, v in self.state.items()}, self.key)


def load(path: Path, kind: str, key: str, shapes: dict[str, tuple]) -> dict[str, np.ndarray] | None:
    """The arrays of a checkpoint written by this very command, None when there is none; refused in one
    line when it was written by another command, another version, or is damaged. Arrays the checkpoint
    holds must have their shapes; arrays not yet written (an interrupted first pass) may be missing."""
    found = read_state(path, kind, key)
    if found is None:
        return None
    state = found[1]
    bad = [k for k, shape in shapes.items() if k in state and state[k].shape != shape]
    bad += [k for k in ("m_clean", "m_corrupt") if k in shapes and k not in state]
    bad += [k for k in shapes if k.startswith("values.") and k not in state]
    if bad:
        raise CheckpointMismatch(f"checkpoint {path} is damaged: {bad[0]} is missing or misshapen; {START_OVER}")
    return state


__all__ = ["Store", "load", "pairs_key"]
