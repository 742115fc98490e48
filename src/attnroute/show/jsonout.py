"""The one JSON writer and reader of attnroute's outputs.

Written JSON is strict (NaN and ±inf as null: bare NaN is not JSON, and strict parsers refuse it) and
lands atomically (a temporary file in the same folder, then renamed over the target), so a failed
write leaves the previous file whole, never half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ..engine.jsonable import strict
from ..errors import InputError


def json_text(data, indent: int | None = 2) -> str:
    return json.dumps(strict(data), indent=indent, allow_nan=False)


def write_bytes(path, data: bytes) -> Path:
    """``data`` into ``path`` atomically: a temporary file beside it (a unique name, so two writers never
    share one), fsync, then a rename over the target."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text(path, text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


def write_json(data, path, indent: int | None = 2) -> Path:
    return write_text(path, json_text(data, indent))


def read_json(path, field: str, written_by: str) -> dict:
    """A JSON object from a file the user named, or one line naming the field, the file and what to do."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{field} {path}: no such file (write one with `{written_by}`)", field=field)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{field} {path}: not a JSON file ({e})", field=field) from None
    if not isinstance(data, dict):
        raise InputError(f"{field} {path}: not the result of `{written_by}` (not a JSON object)", field=field)
    return data


__all__ = ["json_text", "read_json", "write_bytes", "write_json", "write_text"]
