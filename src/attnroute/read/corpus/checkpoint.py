"""Corpus checkpoints: one rank's accumulator in a safetensors file, keyed to what wrote it.

A checkpoint is written atomically (beside, then renamed over) every ``checkpoint_every`` documents
and when the read stops; rerunning the same command resumes from it. One written by other arguments,
another model, other candidates or another number of ranks is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from ...errors import InputError
from .accumulator import Accumulator

CHECKPOINT_VERSION = 1


class CheckpointMismatch(InputError):
    """A checkpoint written by another command (other arguments, model or number of ranks)."""


def fingerprint(settings: dict, loaded, world: int, candidates) -> str:
    """What a checkpoint must agree with: the arguments that change the numbers (``settings``, with the
    corpus path resolved), the model (config and a slice of its weights), the number of ranks and the
    candidate heads."""
    first = next(loaded.model.parameters()).detach().flatten()[:4096].float().numpy().tobytes()
    ident = {
        "settings": settings | {"corpus": str(Path(settings["corpus"]).resolve())},
        "model": loaded.name,
        "config": hashlib.sha256(loaded.model.config.to_json_string().encode()).hexdigest(),
        "weights": hashlib.sha256(first).hexdigest(),
        "world": world,
        "candidates": [list(map(int, p)) for p in candidates],
        "version": CHECKPOINT_VERSION,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def checkpoint_path(base: str, rank: int, world: int) -> Path:
    return Path(base) if world == 1 else Path(f"{base}.rank{rank}-of-{world}")


def save_checkpoint(path: Path, acc: Accumulator, key: str) -> None:
    """Atomic: written beside under a unique name (two writers never share one, and no file of the
    user's is taken), then renamed over (a SIGKILL leaves the old file or the new, never half)."""
    from safetensors.numpy import save_file

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file({k: np.ascontiguousarray(v) for k, v in acc.state().items()}, tmp, metadata={"key": key})
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: Path, key: str) -> Accumulator | None:
    if not path.exists():
        return None
    from safetensors import safe_open
    from safetensors.numpy import load_file

    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
        state = load_file(str(path))
    except Exception as e:  # noqa: BLE001  (a damaged or foreign file)
        raise CheckpointMismatch(
            f"{path} is not an attnroute corpus checkpoint ({type(e).__name__})", field="checkpoint"
        ) from None
    if meta.get("key") != key:
        raise CheckpointMismatch(
            f"{path} was written by another command (other arguments, model, candidates or number of ranks); "
            "rerun with the same arguments, or give a new `checkpoint`",
            field="checkpoint",
        )
    return Accumulator.from_state(state)


__all__ = [
    "CHECKPOINT_VERSION",
    "CheckpointMismatch",
    "checkpoint_path",
    "fingerprint",
    "load_checkpoint",
    "save_checkpoint",
]
