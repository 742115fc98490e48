"""Writing a file so that nothing is lost: beside the target under a unique name, with the user's umask
(0644 under the usual 0022, not mkstemp's 0600), flushed, then renamed over the target — a kill leaves
the old file or the new, never half of one, and two writers never share a temporary name.

    atomic_write(path, lambda tmp: tmp.write_bytes(data))
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


@functools.cache
def umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc/self/status)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)  # elsewhere: set and restore (the one moment it is changed)
    os.umask(old)
    return old


def atomic_write(path, write: Callable[[Path], None]) -> Path:
    """``write(tmp)`` fills a temporary file beside ``path``; it gets the mode a new file would get, is
    fsynced and renamed over ``path``. On any failure the temporary file is removed and the error raised."""
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        os.fchmod(fd, 0o666 & ~umask())
        os.close(fd)
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


__all__ = ["atomic_write", "umask"]
