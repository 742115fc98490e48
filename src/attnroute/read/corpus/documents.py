"""Corpus input, streamed: documents from a file, a directory or a saved Hugging Face dataset, one at
a time, never loaded whole.

    .txt        one document per blank-line-separated block (``per_line=True``: one per non-empty line)
    .jsonl      one JSON object per line; the document is its ``field`` ("text" unless told)
    directory   every *.txt file in it, sorted by name, each file one document; or a dataset written
                by Hugging Face ``datasets`` (save_to_disk: it holds dataset_info.json / state.json)
    .parquet    a parquet file (or a directory of them), rows streamed in batches; the ``field`` column

Documents are numbered 0, 1, 2 … in this order; the order is what shards and resumes rely on.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ...engine import InputError


class CorpusError(InputError):
    """A corpus that cannot be read; the message names the file and what was expected."""

    def __init__(self, message: str):
        super().__init__(message, field="corpus")


def corpus_kind(path: Path) -> str:
    if not path.exists():
        raise CorpusError(f"no such corpus: {path}")
    if path.is_dir():
        if (path / "dataset_info.json").exists() or (path / "state.json").exists():
            return "dataset"
        if any(path.glob("*.parquet")):
            return "parquet"
        if any(path.glob("*.txt")):
            return "dir"
        raise CorpusError(f"{path} holds no .txt files, no parquet files and no saved dataset")
    suffix = path.suffix.lower()
    if suffix in (".txt", ".text", ".md"):
        return "txt"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".parquet":
        return "parquet"
    raise CorpusError(f"{path}: expected a .txt, .jsonl or .parquet file, a directory of .txt files or a saved dataset")


@dataclass(frozen=True)
class Corpus:
    """A corpus named once: its kind is found when it is made (a bad path fails here, before any model
    loads), and each iteration streams the documents in order (empty ones skipped), at most ``limit``."""

    path: Path
    field: str = "text"
    per_line: bool = False
    limit: int | None = None
    kind: str = dataclasses.field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))
        object.__setattr__(self, "kind", corpus_kind(self.path))

    def __iter__(self) -> Iterator[str]:
        source = {"txt": _txt, "jsonl": _jsonl, "dir": _dir, "dataset": _dataset, "parquet": _parquet}[self.kind]
        n = 0
        for text in source(self.path, self.field, self.per_line):
            if not text or not text.strip():
                continue
            if self.limit is not None and n >= self.limit:
                return
            n += 1
            yield text

    def scan(self) -> tuple[int, str | None]:
        """(how many documents, the first one) in one streamed pass: every document is parsed, so a bad
        line anywhere is refused here, before the model loads."""
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
            "dir": f"{name}/: one document per .txt file",
            "dataset": f"{name}/: a saved Hugging Face dataset, the {field!r} column",
            "parquet": f"{name}: parquet rows, the {field!r} column",
        }[self.kind]


def documents(path, field: str = "text", per_line: bool = False, limit: int | None = None) -> Iterator[str]:
    """The documents of ``Corpus(path, field, per_line, limit)``, streamed."""
    return iter(Corpus(path, field, per_line, limit))


def _txt(path: Path, field: str, per_line: bool) -> Iterator[str]:
    with open(path, encoding="utf-8", errors="strict") as f:
        try:
            if per_line:
                yield from (line.rstrip("\n") for line in f)
                return
            block: list[str] = []
            for line in f:
                if line.strip():
                    block.append(line)
                elif block:
                    yield "".join(block)
                    block = []
            if block:
                yield "".join(block)
        except UnicodeDecodeError as e:
            raise CorpusError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def _jsonl(path: Path, field: str, per_line: bool) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise CorpusError(
                    f"{path}:{i}: not JSON ({e.msg}); a .jsonl corpus holds one object per line"
                ) from None
            if not isinstance(obj, dict) or field not in obj:
                keys = ", ".join(sorted(obj)) if isinstance(obj, dict) else type(obj).__name__
                raise CorpusError(f"{path}:{i}: no {field!r} field (it has: {keys}); choose one with `field`")
            if not isinstance(obj[field], str):
                raise CorpusError(f"{path}:{i}: the {field!r} field is {type(obj[field]).__name__}, not text")
            yield obj[field]


def _dir(path: Path, field: str, per_line: bool) -> Iterator[str]:
    for f in sorted(path.glob("*.txt")):
        try:
            yield f.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise CorpusError(f"{f} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def _dataset(path: Path, field: str, per_line: bool) -> Iterator[str]:
    from datasets import load_from_disk  # memory-mapped Arrow: rows are read as they are visited

    try:
        ds = load_from_disk(str(path))
    except Exception as e:  # noqa: BLE001  (datasets raises many kinds for a bad directory)
        raise CorpusError(f"{path}: not a dataset saved with datasets.save_to_disk ({type(e).__name__}: {e})") from None
    if hasattr(ds, "keys") and not hasattr(ds, "column_names"):  # a DatasetDict: refuse to guess the split
        raise CorpusError(f"{path} holds several splits ({', '.join(ds.keys())}); give the directory of one split")
    if field not in ds.column_names:
        raise CorpusError(
            f"{path}: no {field!r} column (it has: {', '.join(ds.column_names)}); choose one with `field`"
        )
    for batch in ds.select_columns([field]).iter(batch_size=64):
        yield from batch[field]


def _parquet(path: Path, field: str, per_line: bool) -> Iterator[str]:
    import pyarrow.parquet as pq

    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    for f in files:
        pf = pq.ParquetFile(f)
        if field not in pf.schema_arrow.names:
            raise CorpusError(
                f"{f}: no {field!r} column (it has: {', '.join(pf.schema_arrow.names)}); choose one with `field`"
            )
        for batch in pf.iter_batches(batch_size=64, columns=[field]):
            yield from batch.column(0).to_pylist()


__all__ = ["Corpus", "CorpusError", "corpus_kind", "documents"]
