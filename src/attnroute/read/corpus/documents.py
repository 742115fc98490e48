"""Corpus input, streamed: documents from a file, a directory or a saved Hugging Face dataset, one at
a time, never loaded whole.

    .txt        one document per blank-line-separated block (``per_line=True``: one per non-empty line)
    .jsonl      one JSON object per line; the document is its ``field`` ("text" unless told)
    directory   every *.txt file under it (sub-folders too), sorted by relative path, each file one
                document; or a dataset written by Hugging Face ``datasets`` (save_to_disk)
    .parquet    a parquet file (or a directory of them), rows streamed in batches; the ``field`` column

Documents are numbered 0, 1, 2 … in this order; the order is what shards and resumes rely on.

Every document is checked as it streams: it must be text (UTF-8, no lone surrogates, a string field)
and come from a regular file (a folder, FIFO, socket or device where a document is due is never
opened; a broken symlink or a loop is named). A bad document is refused in one line naming it (file
and line or row), or, with ``skip_bad``, skipped and counted with its reason.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ...errors import InputError

TEXT_SUFFIXES = (".txt", ".text", ".md")


class CorpusError(InputError):
    """A corpus that cannot be read; the message names the file and what was expected."""

    def __init__(self, message: str):
        super().__init__(message, field="corpus")


@dataclass(frozen=True)
class Bad:
    """A document that is not text, as a source yields it: where, and why."""

    where: str
    reason: str


def regular(path: Path, what: str = "document") -> str | None:
    """Why ``path`` cannot be read as a file without opening it (None: it is a regular file)."""
    try:
        mode = os.stat(path).st_mode  # follows symlinks: a loop or a dangling link fails here
    except OSError as e:
        kind = "a symlink loop" if e.errno == 40 else ("a broken symlink" if path.is_symlink() else "unreadable")
        return f"{path} is {kind} ({e.strerror}), not a {what}"
    if stat.S_ISDIR(mode):
        return f"{path} is a folder, not a {what}"
    if not stat.S_ISREG(mode):
        return f"{path} is a special file (FIFO, socket or device), not a {what}; it is never opened"
    return None


def corpus_kind(path: Path) -> str:
    if not path.exists() and not path.is_symlink():
        raise CorpusError(f"no such corpus: {path}")
    if path.is_dir():
        if any((path / f).exists() for f in ("dataset_info.json", "state.json", "dataset_dict.json")):
            return "dataset"
        parquet, texts = any(path.rglob("*.parquet")), any(p for p in path.rglob("*") if p.suffix in TEXT_SUFFIXES)
        if parquet and texts:
            raise CorpusError(f"{path} holds both .parquet and .txt files; give a folder of one kind")
        if parquet:
            return "parquet"
        if texts:
            return "dir"
        raise CorpusError(f"{path} holds no .txt files, no parquet files and no saved dataset")
    if reason := regular(path, "corpus file"):
        raise CorpusError(reason)
    suffix = path.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        return "txt"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".parquet":
        return "parquet"
    raise CorpusError(f"{path}: expected a .txt, .jsonl or .parquet file, a directory of .txt files or a saved dataset")


@dataclass(frozen=True)
class Corpus:
    """A corpus named once: its kind is found when it is made (a bad path or a flag that does not apply
    fails here, before any model loads), and each iteration streams the documents in order (empty ones
    skipped), at most ``limit``. ``skip_bad``: skip a document that is not text instead of refusing it;
    ``skipped`` then lists them."""

    path: Path
    field: str = "text"
    per_line: bool = False
    limit: int | None = None
    skip_bad: bool = False
    kind: str = dataclasses.field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))
        object.__setattr__(self, "kind", corpus_kind(self.path))
        if self.field != "text" and self.kind in ("txt", "dir"):
            raise InputError(
                f"`field` {self.field!r} names a column, and {self.path.name} is plain text (fields exist in .jsonl, "
                "parquet and datasets)",
                field="field",
            )
        if self.per_line and self.kind != "txt":
            raise InputError(f"`per_line` splits a .txt file, and {self.path.name} is not one", field="per_line")

    def __iter__(self) -> Iterator[str]:
        source = {"txt": _txt, "jsonl": _jsonl, "dir": _dir, "dataset": _dataset, "parquet": _parquet}[self.kind]
        n = 0
        self.skipped.clear()
        for text in source(self.path, self.field, self.per_line):
            if isinstance(text, Bad):
                if not self.skip_bad:
                    raise CorpusError(f"{text.where}: {text.reason} (`skip_bad` skips such documents)")
                self.skipped.append({"where": text.where, "reason": text.reason})
                continue
            if not text or not text.strip():
                continue
            if self.limit is not None and n >= self.limit:
                return
            n += 1
            yield text

    @cached_property
    def skipped(self) -> list[dict]:
        """The documents the last pass skipped (``skip_bad``): where and why."""
        return []

    @cached_property
    def scanned(self) -> tuple[int, str | None]:
        """(how many documents, the first one), from one streamed pass made once: every document is
        parsed, so a bad line anywhere is refused here, before the model loads."""
        n, first = 0, None
        for text in self:
            first = text if first is None else first
            n += 1
        return n, first

    def describe(self) -> str:
        name, field = self.path.name, self.field
        return {
            "txt": f"{name}: one document per {'line' if self.per_line else 'blank-line-separated block'}",
            "jsonl": f"{name}: one document per line, the {field!r} field",
            "dir": f"{name}/: one document per .txt file (sub-folders included)",
            "dataset": f"{name}/: a saved Hugging Face dataset, the {field!r} column",
            "parquet": f"{name}: parquet rows, the {field!r} column",
        }[self.kind]


def documents(path, field: str = "text", per_line: bool = False, limit: int | None = None) -> Iterator[str]:
    """The documents of ``Corpus(path, field, per_line, limit)``, streamed."""
    return iter(Corpus(path, field, per_line, limit))


def checked_text(value, where: str, what: str = "the document"):
    """``value`` if it is text that can be tokenized, else a Bad naming why."""
    if not isinstance(value, str):
        return Bad(where, f"{what} is {type(value).__name__}, not text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        return Bad(where, f"{what} holds a lone surrogate ({value[e.start]!r} at character {e.start}), not text")
    return value


def _txt(path: Path, field: str, per_line: bool) -> Iterator[str | Bad]:
    with open(path, "rb") as f:
        block: list[str] = []
        start = 1
        for i, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").replace("\r\n", "\n")  # as text mode reads Windows line ends
            except UnicodeDecodeError as e:
                yield Bad(f"{path}:{i}", f"not UTF-8 text ({e.reason} at byte {e.start})")
                block = []
                continue
            if per_line:
                yield line.rstrip("\n")
            elif line.strip():
                start = start if block else i
                block.append(line)
            elif block:
                yield checked_text("".join(block), f"{path}:{start}")
                block = []
        if block:
            yield checked_text("".join(block), f"{path}:{start}")


def _jsonl(path: Path, field: str, per_line: bool) -> Iterator[str | Bad]:
    with open(path, "rb") as f:
        for i, raw in enumerate(f, 1):
            where = f"{path}:{i}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield Bad(where, f"not UTF-8 text ({e.reason} at byte {e.start})")
                continue
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise CorpusError(f"{where}: not JSON ({e.msg}); a .jsonl corpus holds one object per line") from None
            if not isinstance(obj, dict) or field not in obj:
                keys = ", ".join(sorted(obj)) if isinstance(obj, dict) else type(obj).__name__
                raise CorpusError(f"{where}: no {field!r} field (it has: {keys}); choose one with `field`")
            yield checked_text(obj[field], where, f"the {field!r} field")


def _dir(path: Path, field: str, per_line: bool) -> Iterator[str | Bad]:
    candidates = sorted((p for p in path.rglob("*") if p.suffix in TEXT_SUFFIXES), key=lambda p: p.relative_to(path))
    for f in candidates:
        if reason := regular(f):
            yield Bad(str(f), reason.removeprefix(f"{f} is "))
            continue
        try:
            yield checked_text(f.read_bytes().decode("utf-8"), str(f))
        except UnicodeDecodeError as e:
            yield Bad(str(f), f"not UTF-8 text ({e.reason} at byte {e.start})")


def _dataset(path: Path, field: str, per_line: bool) -> Iterator[str | Bad]:
    from datasets import DatasetDict, load_from_disk  # memory-mapped Arrow: rows are read as they are visited

    try:
        ds = load_from_disk(str(path))
    except Exception as e:  # noqa: BLE001  (datasets raises many kinds for a bad directory)
        raise CorpusError(f"{path}: not a dataset saved with datasets.save_to_disk ({type(e).__name__}: {e})") from None
    if isinstance(ds, DatasetDict):  # refuse to guess the split
        raise CorpusError(f"{path} holds several splits ({', '.join(ds.keys())}); give the directory of one split")
    if field not in ds.column_names:
        raise CorpusError(
            f"{path}: no {field!r} column (it has: {', '.join(ds.column_names)}); choose one with `field`"
        )
    row = 0
    for batch in ds.select_columns([field]).iter(batch_size=64):
        for value in batch[field]:
            yield checked_text(value, f"{path} row {row}")
            row += 1


def _parquet(path: Path, field: str, per_line: bool) -> Iterator[str | Bad]:
    import pyarrow.parquet as pq

    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    for f in files:
        if reason := regular(f, "parquet file"):
            raise CorpusError(reason)
        try:
            pf = pq.ParquetFile(f)
        except Exception as e:  # noqa: BLE001  (pyarrow raises ArrowInvalid, OSError… for a damaged file)
            raise CorpusError(f"{f}: not a readable parquet file ({type(e).__name__}: {e})") from None
        if field not in pf.schema_arrow.names:
            names = ", ".join(pf.schema_arrow.names)
            raise CorpusError(f"{f}: no {field!r} column (it has: {names}); choose one with `field`")
        row = 0
        try:
            for batch in pf.iter_batches(batch_size=64, columns=[field]):
                for value in batch.column(0).to_pylist():
                    yield checked_text(value, f"{f} row {row}")
                    row += 1
        except Exception as e:  # noqa: BLE001  (a truncated file fails while it streams)
            raise CorpusError(f"{f}: not a readable parquet file at row {row} ({type(e).__name__}: {e})") from None


__all__ = ["Bad", "Corpus", "CorpusError", "checked_text", "corpus_kind", "documents", "regular"]
