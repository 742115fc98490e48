"""The one JSON writer and reader of attnroute's outputs.

Written JSON is strict (NaN and ±inf as null: bare NaN is not JSON, and strict parsers refuse it) and
lands atomically (a temporary file in the same folder, then renamed over the target), so a failed
write leaves the previous file whole, never half a file.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..engine.jsonable import strict
from ..errors import InputError
from ..files import atomic_write

INDENTED_UP_TO = 1 << 20  # a result's JSON is indented for reading up to 1 MiB; a larger one is for programs


def json_text(data, indent: int | None | str = "auto") -> str:
    """Strict JSON of ``data``. ``indent="auto"``: indented by 2 when that stays within INDENTED_UP_TO, else
    compact — a circuit's 70,651 edges are 40 MB indented and 25 MB without (the table's old key, written
    beside rows until 0.3, doubles it: docs/results.md)."""
    data = strict(data)
    if indent != "auto":
        return json.dumps(data, indent=indent, allow_nan=False)
    compact = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return compact if len(compact) > INDENTED_UP_TO // 2 else json.dumps(data, indent=2, allow_nan=False)


def write_bytes(path, data: bytes) -> Path:
    """``data`` into ``path`` atomically, with the user's umask (files.atomic_write)."""
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))


def write_text(path, text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


def write_json(data, path, indent: int | None | str = "auto") -> Path:
    return write_text(path, json_text(data, indent))


MAX_JSON_BYTES = 256 << 20  # a result file larger than this is no result attnroute wrote


class _Constant(ValueError):
    """A bare NaN, Infinity or -Infinity in a file: Python's json reads them, strict JSON has none."""


def _no_constant(name: str):
    raise _Constant(name)


def read_json(path, field: str, written_by: str) -> dict:
    """A JSON object from a file the user named, or one line naming the field, the file and what to do: a
    missing, huge, undecodable or absurdly nested file is refused before anything is built from it."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{field} {path}: no such file (write one with `{written_by}`)", field=field)
    if p.stat().st_size > MAX_JSON_BYTES:
        raise InputError(
            f"{field} {path} is {p.stat().st_size:,} bytes; a result file is at most {MAX_JSON_BYTES:,}", field=field
        )
    try:
        data = json.loads(p.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{field} {path}: not a JSON file ({e})", field=field) from None
    except _Constant as e:
        raise InputError(
            f"{field} {path} holds a bare {e} (not JSON: attnroute writes null for a number it could not compute); "
            f"write it again with `{written_by}`",
            field=field,
        ) from None
    except RecursionError:
        raise InputError(f"{field} {path}: nested too deeply to be a result of `{written_by}`", field=field) from None
    if not isinstance(data, dict):
        raise InputError(f"{field} {path}: not the result of `{written_by}` (not a JSON object)", field=field)
    return data


__all__ = ["json_text", "read_json", "write_bytes", "write_json", "write_text"]
