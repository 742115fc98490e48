"""What every command shares: output paths checked before any work, JSON to a file or stdout, lines
on stderr, integer lists, and the text of --text / --file.

Nothing here imports torch (nor does any module of cli/ at import time): `attnroute --help` and the
refusal of a bad flag answer before torch loads. Floors are imported inside the handlers.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
from pathlib import Path

from ..errors import InputError
from ..settings import DEFAULT_MODEL

STDOUT = "-"
MODEL_HELP = (
    "smollm2 (default; whisper-tiny when clips are given), minilm, gemma3-270m, whisper-tiny, a model directory, "
    "a .gguf file or a hub id org/name"
)


# ------------------------------------------------------------------------------------ the parser


def json_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--json",
        nargs="?",
        const=STDOUT,
        metavar="PATH",
        help=f"write {what} as JSON to PATH (`--json` alone or `-`: stdout)",
    )


def model_flag(p: argparse.ArgumentParser, help: str = MODEL_HELP) -> None:
    """--model, left out = the settings' own default model (smollm2); --dtype, --device and --device-map, what it
    is loaded into and where."""
    p.add_argument("--model", help=help)
    p.add_argument(
        "--dtype",
        help="what the model is loaded into: auto (the dtype its checkpoint stores; float32 for the bundled "
        "models), float32, bfloat16 or float16",
    )
    p.add_argument("--device", help="where it is loaded: cpu (the default), cuda, cuda:N, mps or auto")
    p.add_argument(
        "--device-map",
        dest="device_map",
        metavar="MAP",
        help="accelerate's device map: auto, balanced, balanced_low_0, sequential or FILE.json ({module: device})",
    )


# what a parser holds beside the settings' fields: where results go, the handler, the file of a text
NOT_SETTINGS = frozenset(
    {
        "fn",
        "fields",
        "command",
        "json",
        "csv",
        "plot",
        "out",
        "png_dir",
        "file",
        "add",
        "learn",
        "experiment",
        "cost_command",
        "markdown",
    }
)


def option(p: argparse.ArgumentParser, flag: str, cls, field: str | None = None, *, help: str | None = None, **kw):
    """A flag for the settings field ``field`` of ``cls``: left out it parses as None, and the settings' own
    default applies (said in --help, read from the one home of defaults); its help is the field's meaning
    unless ``help`` says it for the command line."""
    field = field or flag.lstrip("-").replace("-", "_")
    default = cls.default(field)
    text = help or cls.doc(field)
    if not (default is None or default is False or default == "" or default == ()) and "default" not in text:
        text = f"{text} (default {shown(default)})"
    if kw.get("dest") is None and flag.lstrip("-").replace("-", "_") != field:
        kw["dest"] = field
    # argparse %-formats help text: a field's "100 % token accuracy" crashed `learn crossattn --help`
    p.add_argument(flag, default=None, help=text.replace("%", "%%"), **kw)


def shown(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def settings_from(cls, args, *, convert: dict | None = None, elsewhere: str | None = None, only=None, skip=(), **fixed):
    """``cls`` built from the flags the user gave (a flag left out is None: the settings' default applies),
    ``convert`` (flag -> (field, function)) for flags that are not a field as typed, and ``fixed`` values.
    A flag given that ``cls`` has no field for is refused, never dropped: ``elsewhere`` says where it
    belongs ("applies to a corpus read; give `corpus` too, or leave it out"). ``only`` / ``skip``: the
    flags this settings object is built from, when one command builds two (report: its corpus)."""
    convert = convert or {}
    fixed = {k: v for k, v in fixed.items() if v is not None}  # a fixed None is no value: the flag still counts
    out = {}
    for dest, value in vars(args).items():
        if value is None or dest in NOT_SETTINGS or dest in fixed or dest in skip or (only and dest not in only):
            continue
        field, fn = convert.get(dest, (dest, None))
        if field not in cls.field_names():
            raise InputError(f"`{dest}` {elsewhere or 'is not a setting of this command'}", field=dest)
        out[field] = value if fn is None else fn(value)
    return cls(**out, **fixed)


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


def some_names(text: str, field: str, what: str) -> tuple[str, ...]:
    """'a,b' -> ('a', 'b'); a list with nothing in it (',') is refused, never read as "all" or "none"."""
    found = names(text)
    if not found:
        raise InputError(f"expected comma-separated {what}, got {text!r}", field=field)
    return found


# ------------------------------------------------------------------------------------ inputs and outputs


MAX_TEXT_BYTES = 16 << 20  # a text longer than this is no prompt: refused before it is decoded


def read_text_arg(text: str | None, file: str | None, *, required: bool = False, field: str = "file") -> str | None:
    """The text of the positional argument / --text, or of --file (UTF-8; '-' reads standard input), never
    both; ``required``: one of them must be given. ``field``: the file's flag, for the refusals."""
    if text is not None and file:
        raise InputError(f"the text and `{field}` were both given; give one", field=field)
    if not file:
        if text is None and required:
            raise InputError(f"give the text, or `{field}` to read it from a file ('-': standard input)", field=field)
        return text
    data, where = _text_bytes(file, field)
    if len(data) > MAX_TEXT_BYTES:
        raise InputError(
            f"{where} holds over {MAX_TEXT_BYTES:,} bytes; a text is at most {MAX_TEXT_BYTES:,}", field=field
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"`{field}` {where}: not UTF-8 text (byte {e.start})", field=field) from None


def _text_bytes(file: str, field: str) -> tuple[bytes, str]:
    """(at most MAX_TEXT_BYTES + 1 bytes of the file or of standard input, what to call it)."""
    if file == STDOUT:
        import sys

        return sys.stdin.buffer.read(MAX_TEXT_BYTES + 1), "standard input"
    path = Path(file)
    if not path.is_file():
        raise InputError(f"`{field}` {file}: no such file (or not a regular file)", field=field)
    with open(path, "rb") as f:
        return f.read(MAX_TEXT_BYTES + 1), file


def output_path(path: str | None, field: str, *, suffixes: tuple[str, ...] = ()) -> Path | None:
    """Validate a file the command will write, before any work: its folder exists and takes a new file
    (one is created and removed there), and the path is no folder and no special file (/dev/full, a
    FIFO). Returns the path, or None when nothing will be written."""
    if not path or path == STDOUT:  # None or '' : nothing will be written
        return None
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{field} {path} is a directory; give a file name", field=field)
    if not p.parent.is_dir():
        raise InputError(f"{field} {path}: the folder {p.parent} does not exist", field=field)
    if suffixes and p.suffix.lower() not in suffixes:
        raise InputError(f"{field} {path} must end in {' or '.join(suffixes)}", field=field)
    if p.exists() and not p.is_file():
        raise InputError(f"{field} {path} is not a regular file (a device, FIFO or socket); give a file", field=field)
    writable(p.parent, field, path)
    return p


def writable(folder: Path, field: str, path) -> None:
    """A new file can be made in ``folder`` (it is made and removed): read-only folders and /proc fail here."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".attnroute-", suffix=".probe", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise InputError(f"{field} {path}: cannot write in {folder} ({e.strerror or e})", field=field) from None


def output_dir(path: str | None, field: str) -> Path | None:
    """A folder the command will create or fill: it may exist as a folder, never as a file; it (or the
    folder it will be made in) must take new files."""
    if not path:
        return None
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"{field} {path} is a file; give a folder", field=field)
    parent = p if p.is_dir() else p.parent
    if not parent.is_dir():
        raise InputError(f"{field} {path}: the folder {parent} does not exist", field=field)
    writable(parent, field, path)
    return p


def outputs(inputs, files: dict[str, str | None], suffixes: dict | None = None, dirs: dict | None = None) -> None:
    """Every output checked before any work, and none of them an input, inside an input folder (a model
    or corpus directory), a hard link to an input, or another output: nothing the user gave is
    overwritten. ``inputs``: {field: value} or [(field, value)] — paths, and the names that resolve to
    files too (a bundled model's package and attnroute's model cache, a bundled prompt set)."""
    for field, path in files.items():
        output_path(path, field, suffixes=(suffixes or {}).get(field, ()))
    for field, path in (dirs or {}).items():
        output_dir(path, field)
    given = _input_paths(inputs)
    seen: dict[Path, str] = {}
    for field, path in {**files, **(dirs or {})}.items():
        if not path or path == STDOUT:
            continue
        target = Path(path).resolve()
        clash = next(((f, src) for f, src in given if _lands_in(target, src)), None)
        if clash:
            raise InputError(
                f"`{field}` {path} would write into `{clash[0]}` {clash[1]}; give a path outside it so "
                "that nothing you gave is overwritten",
                field=field,
            )
        if target in seen:
            raise InputError(
                f"`{field}` {path} is also the output of `{seen[target]}`; give a different file so that "
                "nothing you gave is overwritten",
                field=field,
            )
        seen[target] = field


def _input_paths(inputs) -> list[tuple[str, Path]]:
    """(field, path) of everything the inputs read; a model left out is the default model."""
    from ..bundled import resolved_inputs

    pairs = inputs.items() if isinstance(inputs, dict) else inputs
    pairs = [(f, DEFAULT_MODEL if f == "model" and v is None else v) for f, v in pairs]
    return [(field, src) for field, value in pairs for src in resolved_inputs(field, value)]


def _lands_in(target: Path, src: Path) -> bool:
    """Would writing ``target`` touch the input ``src``: the same file (by path or by inode: a hard link or
    a symlink), or anything inside the input folder."""
    if not src.exists():
        return target == src.resolve()
    if src.is_dir():
        return target == src.resolve() or src.resolve() in target.parents
    if target == src.resolve():
        return True
    try:
        a, b = os.stat(target), os.stat(src)
    except OSError:
        return False  # the target does not exist yet: it cannot be a link to the input
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def deliver(path, field: str, data: bytes) -> None:
    """Write an output atomically; if the write still fails (a full disk), keep the result in a file of
    the temporary folder and refuse in one line naming both: minutes of work are never lost."""
    from ..show.jsonout import write_bytes

    try:
        write_bytes(path, data)
    except OSError as e:
        fd, kept = tempfile.mkstemp(prefix="attnroute-", suffix=Path(path).suffix or ".out")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        raise InputError(
            f"{field} {path} could not be written ({e.strerror or e}); the result is kept in {kept}", field=field
        ) from None
    say(f"wrote {path}")


# ------------------------------------------------------------------------------------ showing


def later_rank() -> bool:
    """A rank other than 0 of a torchrun launch: its ranks refuse together (the same line), and one says it."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and int(os.environ.get("RANK", "0")) != 0


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


def emit_json(data, path: str | None, field: str = "json") -> None:
    """The JSON of a result: on stdout for '-', else written (atomically) to ``path`` and said on stderr."""
    if not path:
        return
    from ..show.jsonout import json_text

    text = json_text(data)
    if path == STDOUT:
        print(text)
        return
    deliver(path, field, text.encode("utf-8"))


def read_progress(json_path: str | None = None, shown=None):
    """Rich progress bars (on a terminal) or one line per stage (in a log) for a long read. With
    ``json_path`` (a file), each partial result the verb says — a site, a stage, a settle round — is written
    there as it finishes, marked partial until the end, and ``shown(result, event)``'s tables for what just
    finished are printed on stderr: a killed run leaves what it had measured."""
    from ..show.progress import ReadProgress

    def on_partial(event) -> None:
        if later_rank():
            return
        from ..show.jsonout import write_json

        if json_path not in (None, STDOUT):
            write_json(event.result.to_dict(), json_path)
        for t in shown(event.result, event) if shown is not None else ():
            console().print(t)

    wants = json_path not in (None, STDOUT) or shown is not None
    return ReadProgress(console(), on_partial=on_partial if wants else None)


def notes(meta: dict) -> None:
    """The routing check, the ablation statement and other notes of a read, one line each on stderr."""
    from ..show.heads import read_notes

    for line in read_notes(meta):
        say(line)


__all__ = [
    "MODEL_HELP",
    "STDOUT",
    "console",
    "deliver",
    "emit_json",
    "int_list",
    "later_rank",
    "json_flag",
    "model_flag",
    "names",
    "NOT_SETTINGS",
    "notes",
    "option",
    "settings_from",
    "shown",
    "output_dir",
    "output_path",
    "outputs",
    "read_progress",
    "read_text_arg",
    "say",
    "tables",
    "writable",
]
