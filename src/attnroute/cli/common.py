"""What every command shares: output paths checked before any work, JSON to a file or stdout, lines
on stderr, integer lists, and the text of --text / --file.

Nothing here imports torch (nor does any module of cli/ at import time): `attnroute --help` and the
refusal of a bad flag answer before torch loads. Floors are imported inside the handlers.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

from ..errors import InputError

STDOUT = "-"
MODEL_HELP = "smollm2 (default), minilm, a model directory, a .gguf file or a hub id org/name"


# ------------------------------------------------------------------------------------ the parser


def json_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--json",
        nargs="?",
        const=STDOUT,
        metavar="PATH",
        help=f"write {what} as JSON to PATH (`--json` alone or `-`: stdout)",
    )


def model_flag(p: argparse.ArgumentParser, default: str | None = "smollm2", help: str = MODEL_HELP) -> None:
    p.add_argument("--model", default=default, help=help)


def int_list(text: str | None, field: str) -> tuple[int, ...] | None:
    """'3,4' -> (3, 4); None stays None. Stray commas and empty lists are refused (an empty list would
    silently mean "nothing")."""
    if text is None:
        return None
    parts = [x.strip() for x in text.split(",")]
    if not text.strip() or any(not x for x in parts):
        raise InputError(f"{field} must be comma-separated integers, got {text!r}", field=field)
    try:
        return tuple(int(x) for x in parts)
    except ValueError:
        raise InputError(f"{field} must be comma-separated integers, got {text!r}", field=field) from None


def names(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else tuple(x.strip() for x in text.split(",") if x.strip())


# ------------------------------------------------------------------------------------ inputs and outputs


def read_text_arg(text: str | None, file: str | None) -> str | None:
    """The text of --text or --file (UTF-8), never both."""
    if text is not None and file:
        raise InputError("text and file were both given; give one", field="file")
    if not file:
        return text
    path = Path(file)
    if not path.is_file():
        raise InputError(f"file {file}: no such file", field="file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"file {file}: not UTF-8 text", field="file") from None


def output_path(path: str | None, field: str, *, suffixes: tuple[str, ...] = ()) -> Path | None:
    """Validate a file the command will write, before any work: its folder exists, it is no folder."""
    if not path or path == STDOUT:  # None or '' : nothing will be written
        return None
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{field} {path} is a directory; give a file name", field=field)
    if not p.parent.is_dir():
        raise InputError(f"{field} {path}: the folder {p.parent} does not exist", field=field)
    if suffixes and p.suffix.lower() not in suffixes:
        raise InputError(f"{field} {path} must end in {' or '.join(suffixes)}", field=field)
    return p


def output_dir(path: str | None, field: str) -> Path | None:
    """A folder the command will create or fill: it may exist as a folder, never as a file."""
    if not path:
        return None
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"{field} {path} is a file; give a folder", field=field)
    return p


def outputs(inputs: dict[str, str | None], files: dict[str, str | None], suffixes: dict | None = None) -> None:
    """Every output checked before any work, and none of them an input or another output: nothing the
    user gave is overwritten."""
    for field, path in files.items():
        output_path(path, field, suffixes=(suffixes or {}).get(field, ()))
    seen: dict[Path, str] = {}
    for role, group in (("input", inputs), ("output", files)):
        for field, path in group.items():
            if not path or path == STDOUT:
                continue
            key = Path(path).resolve()
            if key in seen:
                raise InputError(
                    f"{field} {path} is also the {seen[key]}; give a different file so that nothing you gave is "
                    "overwritten",
                    field=field,
                )
            seen[key] = f"{role} of `{field}`"


# ------------------------------------------------------------------------------------ showing


@functools.cache
def console():
    """Rich's console on stderr (progress, notes): stdout stays for tables or JSON."""
    from rich.console import Console

    return Console(stderr=True)


def say(message: str) -> None:
    """A line on stderr, printed as it is (a file name like [bold].png is not Rich markup)."""
    console().print(message, markup=False, highlight=False, soft_wrap=True)


def tables(json_path: str | None):
    """Where human tables go: stdout, unless stdout carries the JSON."""
    from rich.console import Console

    return Console(stderr=json_path == STDOUT)


def emit_json(data, path: str | None) -> None:
    """The JSON of a result: on stdout for '-', else written (atomically) to ``path`` and said on stderr."""
    if not path:
        return
    from ..show.jsonout import json_text, write_json

    if path == STDOUT:
        print(json_text(data))
        return
    write_json(data, path)
    say(f"wrote {path}")


def read_progress():
    """Rich progress bars (on a terminal) or one line per stage (in a log) for a long read."""
    from ..show.terminal import ReadProgress

    return ReadProgress(console())


def notes(meta: dict) -> None:
    """The routing check, the ablation statement and other notes of a read, one line each on stderr."""
    from ..show.terminal import read_notes

    for line in read_notes(meta):
        say(line)


__all__ = [
    "MODEL_HELP",
    "STDOUT",
    "console",
    "emit_json",
    "int_list",
    "json_flag",
    "model_flag",
    "names",
    "notes",
    "output_dir",
    "output_path",
    "outputs",
    "read_progress",
    "read_text_arg",
    "say",
    "tables",
]
