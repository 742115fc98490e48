"""`attnroute cache list | clear`: the runs attnroute checkpointed to its cache (read/ground/runs.py) — what
each is and its size — and emptying it (a run still going keeps its file)."""

from __future__ import annotations

import time

from .common import console, emit_json, json_flag


def add(sub) -> None:
    c = sub.add_parser("cache", help="list or empty the runs checkpointed to attnroute's cache (a rerun resumes them)")
    inner = c.add_subparsers(dest="action", required=True)
    listed = inner.add_parser("list", help="what is kept: each run's verb, model, prompts, size and last write")
    json_flag(listed, "the list")
    listed.set_defaults(fn=run_list)
    cleared = inner.add_parser("clear", help="remove every cached run (a run in progress keeps its file)")
    cleared.set_defaults(fn=run_clear)


def run_list(args) -> int:
    from ..read.ground import runs

    rows = runs.entries()
    if args.json is not None:
        emit_json({"folder": str(runs.runs_dir()), "limit_bytes": runs.LIMIT_BYTES, "runs": rows}, args.json)
        return 0
    _table(rows, runs)
    return 0


def run_clear(args) -> int:
    from ..read.ground import runs

    removed, busy = runs.clear()
    kept = f"; {len(busy)} in use by a running command, kept" if busy else ""
    console().print(f"removed {len(removed)} checkpoint file(s) from {runs.runs_dir()}{kept}")
    return 0


def _table(rows: list[dict], runs) -> None:
    from rich.table import Table

    total = sum(r["bytes"] for r in rows)
    title = f"{len(rows)} checkpoint(s) in {runs.runs_dir()}: {_size(total)} of {_size(runs.LIMIT_BYTES)} kept"
    table = Table(title=title)
    for column in ("verb", "model", "prompts", "size", "last written", "file"):
        table.add_column(column, overflow="fold")
    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["written"]))
        table.add_row(r.get("verb", "?"), r.get("model", "?"), r.get("prompts", ""), _size(r["bytes"]), when, r["file"])
    console().print(table)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
