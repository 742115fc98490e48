"""`attnroute bench`: time and memory of every backend beside torch SDPA, and the reading benchmarks on
SmolLM2 (figures, never pass/fail)."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from .common import STDOUT, console, emit_json, json_flag, outputs, tables

SUITES = ("all", "engine", "read", "effects", "long-context")
SIZES = [1024, 4096, 8192]  # the engine benchmark's lengths Tq = Tk
READ_PARTS = {
    "read": ("effects", "long_context"),
    "all": ("effects", "long_context"),
    "effects": ("effects",),
    "long-context": ("long_context",),
}


def add(sub) -> None:
    b = sub.add_parser("bench", help="time and memory of every backend beside torch SDPA")
    b.add_argument("--sizes", type=int, nargs="+", default=SIZES, help="sequence lengths Tq = Tk")
    b.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke run")
    b.add_argument(
        "--suite",
        choices=SUITES,
        default="all",
        help="which benchmarks to run (effects / long-context: one half of read, the other kept)",
    )
    b.add_argument("--out", help="write engine.json / read.json into this directory")
    json_flag(b, "the results ({engine, read}, the suites that ran)")
    b.add_argument("--markdown", action="store_true", help="also print the tables as markdown")
    b.add_argument("--from-json", help="print the markdown tables of an earlier run's JSON and exit")
    b.set_defaults(fn=run)


def run(args) -> int:
    if args.from_json:
        print(markdown_of(args.from_json))
        return 0
    for T in args.sizes:
        if T < 16:
            raise InputError(f"sizes must be at least 16, got {T}", field="sizes")
    if args.sizes != SIZES and (args.quick or args.suite not in ("engine", "all")):
        why = "`quick` runs its own tiny sizes" if args.quick else f"the {args.suite} suite runs no engine benchmark"
        raise InputError(f"`sizes` would be ignored: {why}", field="sizes")
    outputs({}, {"json": args.json}, dirs={"out": args.out})
    out = Path(args.out) if args.out else None
    results = {}
    if args.suite in ("engine", "all"):
        results["engine"] = engine_suite(args, out)
    if args.suite in READ_PARTS:
        results["read"] = read_suite(args, out)
    emit_json(results, args.json)
    return 0


def engine_suite(args, out) -> dict:
    from ..bench import engine
    from ..show.bench import bench_markdown, bench_tables

    sizes, ps = ((256, 512), (256, 512)) if args.quick else (tuple(args.sizes), (1024, 4096))
    with console().status("engine benchmark (figures, not pass/fail)…") as status:
        result = engine.run(sizes, ps, new_tokens=32 if args.quick else 512, progress=status.update)
    for table in bench_tables(result):
        tables(args.json).print(table)
    if args.markdown:
        print(bench_markdown(result))
    write(out, "engine.json", result)
    return result


def read_suite(args, out) -> dict:
    from ..bench import reading
    from ..show.bench import read_bench_markdown
    from ..show.jsonout import read_json

    parts = READ_PARTS[args.suite]
    previous = None
    if out and (out / "read.json").exists() and len(parts) == 1:  # the other half is kept from the last run
        previous = read_json(out / "read.json", "out", "attnroute bench --out DIR")
    with console().status("read benchmark (SmolLM2; minutes)…") as status:
        result = reading.run(progress=status.update, quick=args.quick, parts=parts, previous=previous)
    if args.json != STDOUT:
        print(read_bench_markdown(result))
    write(out, "read.json", result)
    return result


def write(out, name: str, result: dict) -> None:
    if out:
        out.mkdir(parents=True, exist_ok=True)
        emit_json(result, str(out / name), "out")  # atomic, and kept elsewhere if the write fails


def markdown_of(path: str) -> str:
    """The markdown tables of an earlier run's JSON, or a one-line refusal naming what is wrong."""
    from ..show.bench import bench_markdown, read_bench_markdown
    from ..show.jsonout import read_json

    data = read_json(path, "from_json", "attnroute bench --out DIR")
    try:
        is_read = "effects" in data or "long_context" in data  # read.json may hold one of its two parts
        return read_bench_markdown(data) if is_read else bench_markdown(data)
    except (KeyError, TypeError, IndexError) as e:
        raise InputError(
            f"from_json {path}: not the JSON of `attnroute bench` ({type(e).__name__}: {e})", field="from_json"
        ) from None
