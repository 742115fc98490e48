"""attnroute's command line: a thin layer over the rooms.

Exit status: 0 success, 1 a check failed, 2 bad input or a target that cannot be loaded.
Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

console = Console(stderr=True)


class CliError(Exception):
    """Bad input: printed as one line, exit status 2."""


def _bench(args) -> int:
    if args.from_json:
        from .show.terminal import bench_markdown

        print(bench_markdown(json.loads(Path(args.from_json).read_text())))
        return 0
    from .bench import engine
    from .show.terminal import bench_markdown, bench_tables

    sizes = (256, 512) if args.quick else tuple(args.sizes)
    ps = (256, 512) if args.quick else (1024, 4096)
    with console.status("benchmarking (figures, not pass/fail)…") as status:
        result = engine.run(sizes, ps, new_tokens=32 if args.quick else 512, progress=lambda m: status.update(m))
    for table in bench_tables(result):
        Console().print(table)
    if args.markdown:
        print(bench_markdown(result))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2))
        console.print(f"wrote {args.json}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnroute", description="Transformer attention as routing.")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench", help="time and memory of every backend beside torch SDPA")
    b.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 8192], help="sequence lengths Tq = Tk")
    b.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke run")
    b.add_argument("--json", help="write the figures here")
    b.add_argument("--markdown", action="store_true", help="also print the tables as markdown")
    b.add_argument("--from-json", help="print the markdown tables of an earlier run and exit")
    b.set_defaults(fn=_bench)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except CliError as e:
        console.print(f"[red]error:[/red] {e}", highlight=False)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
