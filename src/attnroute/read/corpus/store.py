"""A corpus read's checkpoint: one rank's accumulator in the ground floor's checkpoint file.

Written every ``checkpoint_every`` documents and when the read stops; rerunning the same command
resumes from it. Its identity (ground/checkpoint.fingerprint) holds the resolved settings, the number
of ranks and the candidate heads; the documents are checked by their own digest on resume (a moved
corpus resumes, a rewritten one is refused).
"""

from __future__ import annotations

from pathlib import Path

from ..ground.checkpoint import START_OVER, CheckpointMismatch, fingerprint, read_state, write_state
from .accumulator import Accumulator


def corpus_key(settings: dict, loaded, world: int, candidates) -> str:
    return fingerprint(
        "corpus", {"settings": settings, "world": world, "candidates": [list(map(int, p)) for p in candidates]}, loaded
    )


def checkpoint_path(base: str, rank: int, world: int) -> Path:
    return Path(base) if world == 1 else Path(f"{base}.rank{rank}-of-{world}")


def save_checkpoint(path: Path, acc: Accumulator, key: str) -> None:
    write_state(path, acc.state(), key, {"documents": acc.documents_digest})


def load_checkpoint(path: Path, key: str, shape: tuple[int, int, int]) -> Accumulator | None:
    """The accumulator a checkpoint holds, or None when there is none; refused in one line when it was
    written by another command or version, or is damaged (``shape``: layers, heads, candidates)."""
    found = read_state(path, "corpus", key)
    if found is None:
        return None
    meta, state = found
    try:
        acc = Accumulator.from_state(state)
    except (KeyError, ValueError, TypeError, IndexError) as e:
        raise CheckpointMismatch(f"checkpoint {path} is damaged ({type(e).__name__}: {e}); {START_OVER}") from None
    if problem := acc.check(*shape):
        raise CheckpointMismatch(f"checkpoint {path} is damaged: {problem}; {START_OVER}")
    acc.documents_digest = meta.get("documents", "")
    return acc


__all__ = ["checkpoint_path", "corpus_key", "load_checkpoint", "save_checkpoint"]
