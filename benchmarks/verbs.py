"""Each verb's whole-command peak memory beside its time (issue 53.1): one process per verb, on SmolLM2 with
the bundled IOI prompts where a verb reads prompt pairs (`patch --sites head,q,k,v`, 10 minutes, is measured
apart: docs/benchmarks.md), timed and measured by the kernel (os.wait4: the
child's user + system CPU and its peak RSS), nothing else running.

    .venv/bin/python benchmarks/verbs.py [--only circuit,patch] [--out benchmarks/results/verbs.json]

``--only`` measures those rows and keeps the file's others (each row says when it was measured).

Prints a markdown table (docs/benchmarks.md, "Every verb's peak beside its time")."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IOI = "When Mary and John went to the store, John gave a drink to"
TEXT = "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog again."

VERBS = {  # name -> arguments (after `attnroute`); {json} is a scratch path
    "heads": ["heads", "--model", "smollm2", "--text", TEXT, "--json", "{json}"],
    "patch": ["patch", "--prompts", "ioi", "--json", "{json}"],
    "routes": ["routes", IOI, "--answer", " Mary", "--wrong", " John", "--json", "{json}"],
    "circuit": ["circuit", "--prompts", "ioi", "--json", "{json}"],
    "why": ["why", TEXT, "--head", "L18.H6", "--routes", "induction", "--json", "{json}"],
    "knockout": [
        "knockout",
        IOI,
        "--from",
        "to",
        "--to",
        "Mary",
        "--answer",
        " Mary",
        "--wrong",
        " John",
        "--json",
        "{json}",
    ],
    "composition": ["composition", "--model", "smollm2", "--json", "{json}"],
    # under a memory cap (ground/budget.py): the peak against the cap, the time against the uncapped row
    "circuit --max-memory 2.5G": ["circuit", "--prompts", "ioi", "--max-memory", "2.5G", "--json", "{json}"],
    "circuit --max-memory 2G": ["circuit", "--prompts", "ioi", "--max-memory", "2G", "--json", "{json}"],
    "patch --max-memory 2G": ["patch", "--prompts", "ioi", "--max-memory", "2G", "--json", "{json}"],
    "heads --max-memory 2.5G": [
        "heads",
        "--model",
        "smollm2",
        "--text",
        TEXT,
        "--max-memory",
        "2.5G",
        "--json",
        "{json}",
    ],
}


def run(args: list[str], keep: bool = False) -> dict:
    """One verb in its own process: wall, CPU (user + system) and peak RSS of that process alone. ``keep``: the
    result's JSON too (``{json}`` in ``args`` names it), and a refusal by name (exit 2) returned as ``refused``
    instead of stopping the benchmark."""
    exe = str(Path(sys.executable).with_name("attnroute"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        argv = [a.replace("{json}", str(out)) for a in args]
        start = time.perf_counter()
        child = subprocess.Popen(
            [exe, *argv, "--no-checkpoint"] if _resumable(args) else [exe, *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        err = child.stderr.read().decode(errors="replace") if child.stderr else ""
        result = json.loads(out.read_text()) if keep and out.exists() else None
    code = os.waitstatus_to_exitcode(status)
    if keep and code == 2:
        return {"args": args, "refused": err.strip().splitlines()[-1]}
    if code != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{err[-2000:]}")
    row = {
        "args": args,
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "wall_s": round(wall, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_gib": round(usage.ru_maxrss / 2**20, 2),  # kB on Linux
    }
    return row | ({"result": result} if keep else {})


def _resumable(args: list[str]) -> bool:
    return args[0] in ("patch", "circuit", "routes")  # heads checkpoints only a corpus read


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="", help="comma-separated verbs (default: all)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "verbs.json"))
    a = p.parse_args()
    names = [n for n in VERBS if not a.only or n in a.only.split(",")]
    out = Path(a.out)
    kept = json.loads(out.read_text())["verbs"] if a.only and out.exists() else {}  # --only: the other rows stay
    rows = {}
    for name in names:
        rows[name] = run(VERBS[name])
        print(name, rows[name], file=sys.stderr, flush=True)
    out.write_text(
        json.dumps({"when": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(), "verbs": {**kept, **rows}}, indent=1)
    )
    print("| verb | wall | CPU (user + system) | peak RSS, whole command |\n|---|---:|---:|---:|")
    for name, r in rows.items():
        print(f"| `attnroute {name}` | {r['wall_s']} s | {r['cpu_s']} s | {r['peak_rss_gib']} GiB |")


if __name__ == "__main__":
    main()
