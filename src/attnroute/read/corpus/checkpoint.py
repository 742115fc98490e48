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
import torch

from ...errors import InputError
from .accumulator import Accumulator

CHECKPOINT_VERSION = 2  # 2: the weights' and the documents' digests, the statistics' own digest
START_OVER = "remove it to start over"


class CheckpointMismatch(InputError):
    """A checkpoint that cannot be resumed: written by another command (other arguments, model, weights,
    documents or number of ranks), by another version, or damaged."""

    def __init__(self, message: str):
        super().__init__(message, field="checkpoint")


def weights_digest(loaded) -> str:
    """sha256 over every parameter's bytes, in the model's order (a fine-tune with frozen embeddings and
    the same config is another model); computed once per loaded model (SmolLM2: about a second)."""
    cached = getattr(loaded, "_weights_digest", None)
    if cached is None:
        h = hashlib.sha256()
        for name, p in loaded.model.named_parameters():
            t = p.detach().contiguous()
            h.update(name.encode())
            h.update((t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().data)
        cached = loaded._weights_digest = h.hexdigest()
    return cached


def state_digest(state: dict) -> str:
    """sha256 over the arrays a checkpoint holds (names, dtypes, shapes, bytes): a changed number is seen."""
    h = hashlib.sha256()
    for name in sorted(state):
        a = np.ascontiguousarray(state[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}".encode())
        h.update(a.data)
    return h.hexdigest()


def fingerprint(settings: dict, loaded, world: int, candidates) -> str:
    """What a checkpoint must agree with: the arguments that change the numbers (``settings``), the model
    (its config and every weight), the number of ranks and the candidate heads. The documents are
    checked by their own digest, on resume (load_checkpoint)."""
    ident = {
        "settings": settings,
        "config": hashlib.sha256(loaded.model.config.to_json_string().encode()).hexdigest(),
        "weights": weights_digest(loaded),
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
        state = {k: np.ascontiguousarray(v) for k, v in acc.state().items()}
        meta = {"key": key, "version": str(CHECKPOINT_VERSION), "state": state_digest(state)}
        save_file(state, tmp, metadata=meta | {"documents": acc.documents_digest})
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_safetensors(path: Path, what: str) -> tuple[dict, dict]:
    """(metadata, arrays) of a checkpoint file; refused in one line when it is not a regular file or not a
    readable safetensors file (``what``: whose checkpoint it should be, for the message)."""
    from safetensors import safe_open
    from safetensors.numpy import load_file

    if not path.is_file():
        raise CheckpointMismatch(f"checkpoint {path} is not a regular file; {START_OVER}")
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
        return meta, load_file(str(path))
    except Exception as e:  # noqa: BLE001  (a damaged or foreign file)
        raise CheckpointMismatch(
            f"checkpoint {path} is damaged or not an attnroute {what} checkpoint ({type(e).__name__}); {START_OVER}"
        ) from None


def load_checkpoint(path: Path, key: str, shape: tuple[int, int, int]) -> Accumulator | None:
    """The accumulator a checkpoint holds, or None when there is none; refused in one line when it was
    written by another command or version, or is damaged (``shape``: layers, heads, candidates)."""
    if not path.exists():
        return None
    meta, state = read_safetensors(path, "corpus")
    if meta.get("version") != str(CHECKPOINT_VERSION):
        raise CheckpointMismatch(f"checkpoint {path} was written by another version of attnroute; {START_OVER}")
    if meta.get("key") != key:
        raise CheckpointMismatch(
            f"checkpoint {path} was written by another command (other arguments, model weights, candidates or "
            f"number of ranks); rerun with the same arguments, or {START_OVER}"
        )
    if meta.get("state") != state_digest(state):
        raise CheckpointMismatch(f"checkpoint {path} is damaged: its numbers do not match their digest; {START_OVER}")
    try:
        acc = Accumulator.from_state(state)
    except (KeyError, ValueError, TypeError, IndexError) as e:
        raise CheckpointMismatch(f"checkpoint {path} is damaged ({type(e).__name__}: {e}); {START_OVER}") from None
    if problem := acc.check(*shape):
        raise CheckpointMismatch(f"checkpoint {path} is damaged: {problem}; {START_OVER}")
    acc.documents_digest = meta.get("documents", "")
    return acc


__all__ = [
    "CHECKPOINT_VERSION",
    "state_digest",
    "weights_digest",
    "CheckpointMismatch",
    "checkpoint_path",
    "fingerprint",
    "load_checkpoint",
    "read_safetensors",
    "save_checkpoint",
]
