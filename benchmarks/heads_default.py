"""The fast default of `attnroute heads` on SmolLM2, measured: wall time of the command a user types
(model load from the safetensors cache included) and whether its exact top-10 equals the full sweep's.

    .venv/bin/python benchmarks/heads_default.py [--out benchmarks/results/heads_default.json]

1. `attnroute heads --model smollm2 --json …` in a child process, timed (the default: one-backward
   gradient estimate for all 270 heads, exact zero-ablation for the 20 it ranks highest by magnitude,
   then 10 more at a time until a round changes nothing in the exact top 10).
2. read_heads(exact="all") in this process: the full exact zero-ablation sweep on the same effect batch.
3. The top-10 heads by exact Δ loss among the default's measured heads versus the top-10 of the full sweep.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/heads_default.json")
    args = ap.parse_args()
    exe = Path(sys.executable).with_name("attnroute")
    with tempfile.TemporaryDirectory() as d:
        js = Path(d) / "heads.json"
        t0 = time.perf_counter()
        subprocess.run([str(exe), "heads", "--model", "smollm2", "--json", str(js)], check=True, capture_output=True)
        default_s = time.perf_counter() - t0
        default = json.loads(js.read_text())
    from attnroute.read.heads import read_heads

    t0 = time.perf_counter()
    full = read_heads("smollm2", exact="all")
    full_s = time.perf_counter() - t0
    H = full.heads
    exact_full = full["ablation_delta"]
    rows = default["rows"]
    measured = {(r["layer"], r["head"]): r["ablation_delta"] for r in rows if r["ablation_delta"] is not None}
    top_default = sorted(measured, key=lambda k: -measured[k])[:10]
    order = np.argsort(-exact_full.ravel())[:10]
    top_full = [(int(i // H), int(i % H)) for i in order]
    diffs = [abs(measured[k] - float(exact_full[k])) for k in measured]
    result = {
        "model": "smollm2",
        "default_command_seconds": default_s,
        "default_statement": default["meta"]["ablation"]["statement"],
        "default_exact_heads": default["meta"]["ablation"]["heads_measured"],
        "default_rounds": default["meta"]["ablation"]["rounds"],
        "routing_check_max_abs_diff": default["meta"]["routing_check"]["max_abs_diff"],
        "full_sweep_read_seconds": full_s,
        "full_sweep_effects_seconds": full.meta["timings_s"]["effects"],
        "top10_default": top_default,
        "top10_full": top_full,
        "top10_equal_as_sets": set(top_default) == set(top_full),
        "top10_equal_in_order": top_default == top_full,
        "exact_default_vs_full_max_abs_diff": max(diffs),
    }
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
