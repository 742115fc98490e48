"""The checkpoint cache: where a long run checkpoints when the user names no file, so that a Ctrl-C (or a
crash) never loses the work done.

    path = default_checkpoint("patch", settings)   # $ATTNROUTE_RUNS, else <attnroute's cache>/runs/patch-<id>.ck
    entries()                                      # what `attnroute cache list` shows
    clear()                                        # what `attnroute cache clear` does (runs still going are kept)

The file's name comes from what can be known before the weights load — the verb, its settings (outputs
and progress aside), the model's name or path (or an object's class, name_or_path and config) — so that
the run can take the file's lock first. The file itself is keyed by the full fingerprint (checkpoint.py:
the pairs, the settings, every weight), checked on resume; a cached file that does not match is started
over, said in one line, never refused (the user did not name it). The cache is bounded: LIMIT_BYTES,
the oldest files removed first when a run begins.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import time
from pathlib import Path

LIMIT_BYTES = 2 * 1024**3  # the whole cache; the oldest runs go first
SUFFIX = ".ck"
# what does not change a run's numbers: where its results go, how it reports, the checkpoint itself, its batches
NOT_IDENTITY = {
    "checkpoint",
    "no_checkpoint",
    "progress",
    "json",
    "csv",
    "plot",
    "out",
    "max_memory",
}  # batching, not numbers


def runs_dir() -> Path:
    """$ATTNROUTE_RUNS, else the runs folder of attnroute's cache ($XDG_CACHE_HOME/attnroute/runs)."""
    from ...bundled import cache_dir

    env = os.environ.get("ATTNROUTE_RUNS")
    return Path(env) if env else cache_dir() / "runs"


def default_checkpoint(kind: str, settings) -> Path | None:
    """The cached checkpoint of this run, or None when its settings cannot name it (a Python metric)."""
    ident = identity(settings)
    if ident is None:
        return None
    digest = hashlib.sha256(json.dumps({"kind": kind, **ident}, sort_keys=True).encode()).hexdigest()[:20]
    return runs_dir() / f"{kind}-{digest}{SUFFIX}"


def identity(settings) -> dict | None:
    """The settings that change a run's numbers, as JSON-able values; None when one cannot be named."""
    out = {}
    for f in dataclasses.fields(settings):
        if f.name in NOT_IDENTITY:
            continue
        value = _plain(getattr(settings, f.name))
        if value is _UNNAMED:
            return None
        out[f.name] = value
    return out


_UNNAMED = object()


def _plain(value):
    if isinstance(value, str) and os.path.isfile(value):  # a prompts file, a corpus: which file, as it is now
        st = os.stat(value)
        return [os.path.realpath(value), st.st_size, st.st_mtime_ns]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, tuple | list):
        items = [_plain(v) for v in value]
        return _UNNAMED if any(v is _UNNAMED for v in items) else items
    if isinstance(value, Path):
        return str(value.resolve())
    config = getattr(value, "config", None) or getattr(getattr(value, "model", None), "config", None)
    if config is not None and hasattr(config, "to_json_string"):  # a model object (or a LoadedModel)
        return f"{type(value).__name__}:{hashlib.sha256(config.to_json_string().encode()).hexdigest()}"
    if hasattr(value, "name_or_path"):  # a tokenizer or processor object
        return f"{type(value).__name__}:{value.name_or_path}"
    return _UNNAMED  # a callable metric, an object without a name: no default checkpoint


def describe(path: Path, kind: str, settings) -> None:
    """A line of what the run is, beside its file, for `attnroute cache list` (written once)."""
    side = _side(path)
    if side.exists():
        return
    model = getattr(settings, "model", None)
    what = {
        "verb": kind,
        "model": model if isinstance(model, str) else type(model).__name__,
        "prompts": getattr(settings, "prompts", None) or getattr(settings, "corpus", None),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    side.write_text(json.dumps({k: str(v) for k, v in what.items() if v is not None}))


def entries() -> list[dict]:
    """Every cached run's file (a corpus read over ranks has one per rank): its bytes, last write and what
    it is, newest first."""
    folder = runs_dir()
    if not folder.is_dir():
        return []
    rows = []
    for f in folder.iterdir():
        if f.name.startswith(".") or SUFFIX not in f.name or not f.is_file():
            continue  # locks, descriptions, anything not a run
        side = _side(f)
        about = json.loads(side.read_text()) if side.exists() else {}
        stat = f.stat()
        rows.append({"file": str(f), "bytes": stat.st_size, "written": stat.st_mtime, **about})
    return sorted(rows, key=lambda r: -r["written"])


def _side(path: Path) -> Path:
    """The description of the run a file belongs to (every rank's file shares its run's)."""
    return path.with_name(path.name.split(SUFFIX)[0] + ".json")


def prune(keep: Path | None, limit: int = LIMIT_BYTES) -> list[Path]:
    """Remove the oldest cached runs until the cache holds at most ``limit`` bytes (never ``keep``, never a
    run in progress); the files removed."""
    rows = sorted(entries(), key=lambda r: r["written"])
    total = sum(r["bytes"] for r in rows)
    removed = []
    for r in rows:
        if total <= limit:
            break
        path = Path(r["file"])
        if keep is not None and path == keep or not _remove(path):
            continue
        total -= r["bytes"]
        removed.append(path)
    return removed


def clear() -> tuple[list[Path], list[Path]]:
    """Every cached run removed but the ones a process is writing: (removed, in use)."""
    removed, busy = [], []
    for r in entries():
        path = Path(r["file"])
        (removed if _remove(path) else busy).append(path)
    return removed, busy


def total_bytes() -> int:
    return sum(r["bytes"] for r in entries())


def _remove(path: Path) -> bool:
    """Delete a run's file unless a process holds its lock (a run in progress); its description goes with
    the run's last file."""
    lock = path.with_name(f".{path.name}.lock")  # checkpoint.exclusive's lock
    if lock.exists():
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            fd = None  # its run ended just now
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            finally:
                os.close(fd)
    path.unlink(missing_ok=True)
    side = _side(path)
    if not any(f.name.startswith(side.stem + SUFFIX) for f in path.parent.iterdir()):
        side.unlink(missing_ok=True)
    return True


__all__ = ["LIMIT_BYTES", "clear", "default_checkpoint", "describe", "entries", "prune", "runs_dir", "total_bytes"]
