"""Checkpoints of every resumable verb: one identity, one file format, written atomically.

    key = fingerprint("patch", {"pairs": …, "settings": …}, loaded)
    write_state(path, {"values.head": array, …}, key)          # safetensors, beside then renamed over
    arrays = read_state(path, "patch", key)                   # None when there is none; refused otherwise

The identity is what changes the numbers: the verb's own inputs (``ident``), the model's config and
every weight (a fine-tune with frozen embeddings and the same config is another model), and VERSION.
The file holds float arrays (safetensors: no pickle) and their digest, so a changed number is seen.
A checkpoint written by another command, another version, or damaged is refused in one line.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import torch

from ...errors import InputError
from ...files import atomic_write, umask
from ...models.offload import named_params

VERSION = "3"  # 3: one identity for every verb (corpus was 2, patch "patch-1")
START_OVER = "remove it to start over"


class CheckpointMismatch(InputError):
    """A checkpoint that cannot be resumed: written by another command (other arguments, model, weights,
    documents or number of ranks), by another version, or damaged."""

    def __init__(self, message: str):
        super().__init__(message, field="checkpoint")


def weights_digest(loaded) -> str:
    """sha256 over every parameter's bytes, in the model's order; computed once per loaded model
    (SmolLM2: about a second)."""
    cached = getattr(loaded, "_weights_digest", None)
    if cached is None:
        h = hashlib.sha256()
        for name, p in named_params(loaded.model):  # an offloaded parameter loaded while it is hashed
            t = p.to("cpu").contiguous()  # one parameter at a time off its device (bounded memory)
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


def fingerprint(kind: str, ident: dict, loaded) -> str:
    """What a checkpoint of verb ``kind`` must agree with: ``ident`` (the verb's inputs that change the
    numbers, JSON-able), the model's config and weights, and VERSION."""
    whole = {
        "kind": kind,
        "ident": ident,
        "config": hashlib.sha256(loaded.model.config.to_json_string().encode()).hexdigest(),
        "weights": weights_digest(loaded),
        "version": VERSION,
    }
    return hashlib.sha256(json.dumps(whole, sort_keys=True).encode()).hexdigest()


def write_state(path: Path, state: dict[str, np.ndarray], key: str, extra: dict | None = None) -> None:
    """Atomic, with the user's umask (files.atomic_write): a kill leaves the old checkpoint or the new.
    ``extra``: more string metadata (the corpus's documents digest)."""
    from safetensors.numpy import save_file

    state = {k: np.ascontiguousarray(v) for k, v in state.items()}
    meta = {"key": key, "version": VERSION, "state": state_digest(state), **(extra or {})}
    atomic_write(path, lambda tmp: save_file(state, str(tmp), metadata=meta))


@contextlib.contextmanager
def exclusive(path: Path | None):
    """One writer per checkpoint: a lock beside the file it names (``.NAME.lock``, flock) held for the command's
    run. A second process asking for the same checkpoint — by the same name, or another that resolves to it (a
    symlink, a relative path) — is refused in one line: two writers would each resume from, and overwrite, the
    other's work. The lock file is removed when the run ends; a process that locked it just as its holder removed
    it finds the path no longer names the file it locked, and takes the new one (the usual flock-and-unlink
    rule: without the check, it and a third process could both hold "the" lock)."""
    if path is None:
        yield
        return
    real = Path(os.path.realpath(path))  # every name of one checkpoint takes one lock
    lock = real.with_name(f".{real.name}.lock")
    fd = _locked(lock, path)
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)  # removed while still held: a late locker sees it gone and retries
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _locked(lock: Path, path) -> int:
    """A descriptor holding the lock ``lock`` names now; refused when another process holds it."""
    for _ in range(8):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o666 & ~umask())
        except OSError as e:
            raise CheckpointMismatch(f"checkpoint {path}: its lock {lock} cannot be made ({e.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CheckpointMismatch(
                f"checkpoint {path} is in use by another attnroute process; wait for it to end, or give another path"
            ) from None
        held = os.fstat(fd)
        try:
            named = os.stat(lock)
        except FileNotFoundError:
            named = None
        if named is not None and (named.st_ino, named.st_dev) == (held.st_ino, held.st_dev):
            return fd
        os.close(fd)  # its holder removed it as this process locked it: the lock is the file there now
    raise CheckpointMismatch(f"checkpoint {path}: its lock {lock} keeps being replaced; give another path")


def read_state(path: Path, kind: str, key: str) -> tuple[dict, dict[str, np.ndarray]] | None:
    """(metadata, arrays) of the checkpoint at ``path`` written by this very command, None when there is
    none; refused in one line when it is not a checkpoint, was written by another command or version,
    or is damaged (``kind``: whose checkpoint it should be, for the message)."""
    if not path.exists():
        return None
    meta, state = _read(path, kind)
    if meta.get("version") != VERSION:
        raise CheckpointMismatch(f"checkpoint {path} was written by another version of attnroute; {START_OVER}")
    if meta.get("key") != key:
        raise CheckpointMismatch(
            f"checkpoint {path} was written by another command (other arguments, model weights or inputs); "
            f"rerun with the same arguments, or {START_OVER}"
        )
    if meta.get("state") != state_digest(state):
        raise CheckpointMismatch(f"checkpoint {path} is damaged: its numbers do not match their digest; {START_OVER}")
    return meta, state


def _read(path: Path, kind: str) -> tuple[dict, dict]:
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
            f"checkpoint {path} is damaged or not an attnroute {kind} checkpoint ({type(e).__name__}); {START_OVER}"
        ) from None


__all__ = [
    "START_OVER",
    "VERSION",
    "CheckpointMismatch",
    "exclusive",
    "fingerprint",
    "read_state",
    "state_digest",
    "weights_digest",
    "write_state",
]
