"""bf16 against float32 on SmolLM2 and Gemma 3 (issue 52.3): each verb run once per dtype in its own process
(peak RSS and time by the kernel, as benchmarks/verbs.py), and its numbers compared — heads' roles, patch's
head ranking on IOI (Spearman, top-10 overlap), routes' estimates (relative error: its exact knockouts are
refused below float32). circuit and why refuse bf16 by name (their stream checks are calibrated to float32),
so they have no bf16 row.

    .venv/bin/python benchmarks/precision.py [VERB …]   # about 15 minutes on 2 cores; VERBs: measure only those

Writes benchmarks/results/precision.json and prints the markdown table of docs/precision.md."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from verbs import IOI, TEXT, run  # noqa: E402

MODELS = ("smollm2", "gemma3-270m")
DTYPES = ("float32", "bfloat16")
ARGS = {
    "heads": ["heads", "--text", TEXT],
    "patch": ["patch", "--prompts", "ioi"],
    # refused below float32 (route_attribution._float32_only); before, its estimates were compared (--verify 0)
    "routes": ["routes", IOI, "--answer", " Mary", "--wrong", " John", "--verify", "0"],
}


def agreement(verb: str, a: dict, b: dict) -> dict:
    """What the bf16 result (b) keeps of the float32 one (a)."""
    if verb == "heads":
        ra = [h["role"] for h in a["rows"]]
        rb = [h["role"] for h in b["rows"]]
        return {"roles_equal": sum(x == y for x, y in zip(ra, rb)), "heads": len(ra)}
    if verb == "patch":
        ea, eb = (np.array([r["estimate"] for r in d["rows"]]) for d in (a, b))
        xa = {(r["layer"], r["head"]): r["delta"] for r in a["rows"] if r["delta"] is not None}
        xb = {(r["layer"], r["head"]): r["delta"] for r in b["rows"] if r["delta"] is not None}
        both = sorted(set(xa) & set(xb))
        return {
            "spearman": _spearman(ea, eb),
            "top10_overlap": len(set(np.argsort(-ea)[:10]) & set(np.argsort(-eb)[:10])),
            "exact_heads": len(both),
            "exact_max_abs_diff": max((abs(xa[k] - xb[k]) for k in both), default=None),
        }
    xa, xb = ({(r["layer"], r["head"], r["query"], r["key"]): r["estimate"] for r in d["rows"]} for d in (a, b))
    both = sorted(set(xa) & set(xb))  # the same route in both: each run keeps its own top
    scale = max(1.0, max(abs(xa[k]) for k in both))  # the effects bound's scale (engine/tolerance.py)
    return {"routes": len(both), "estimate_max_rel_err": max(abs(xa[k] - xb[k]) for k in both) / scale}


def _spearman(a, b) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return round(float(np.corrcoef(ra, rb)[0, 1]), 4)


def main() -> None:
    only = sys.argv[1:]  # verbs to measure again; the file's other rows stay
    out = ROOT / "benchmarks" / "results" / "precision.json"
    rows = json.loads(out.read_text())["rows"] if only and out.exists() else {}
    for verb, args in ARGS.items():
        if only and verb not in only:
            continue
        for model in MODELS:
            got = {dt: run([*args, "--model", model, "--dtype", dt, "--json", "{json}"], keep=True) for dt in DTYPES}
            cost = {dt: {k: got[dt][k] for k in ("wall_s", "cpu_s", "peak_rss_gib") if k in got[dt]} for dt in DTYPES}
            refused = got["bfloat16"].get("refused")
            rows[f"{verb} {model}"] = {
                **cost,
                "agreement": None if refused else agreement(verb, got["float32"]["result"], got["bfloat16"]["result"]),
                "refused": refused,
            }
            print(verb, model, rows[f"{verb} {model}"], file=sys.stderr, flush=True)
    out.write_text(json.dumps({"when": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
