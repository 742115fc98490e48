"""bf16 against float32 on SmolLM2 and Gemma 3 (issue 52.3): each verb run once per dtype in its own process
(peak RSS and time by the kernel, as benchmarks/verbs.py), and its numbers compared — heads' roles, patch's
head ranking on IOI (Spearman, top-10 overlap), circuit's top 20 edges on IOI (overlap, exact effects' largest
difference), why's split (its sum against the model's own score in each dtype, and the score against float32's),
routes' estimates and exact knockouts (bf16 weights read in float32 arithmetic, models/arithmetic.py).

    .venv/bin/python benchmarks/precision.py [VERB …] [MODEL …]   # about 40 minutes on 2 cores; measure only those
    .venv/bin/python benchmarks/precision.py --floors              # only the floor columns, added to the rows

Each row says when it was measured and on which CPU, and whether that CPU has bf16 arithmetic (AVX512-BF16 or
AMX): without it torch emulates bf16 and a bf16 run's time is not bf16's cost.

Each row's ``peak`` also says the floor: what a verb's process holds whatever the dtype (the runtime and the
tokenizer, 0.35 GiB for SmolLM2 and 0.70 GiB for Gemma 3's 262k vocabulary), and bf16's peak over float32's above
it, the part the dtype governs (weights and working memory). Writes benchmarks/results/precision.json."""

from __future__ import annotations

import json
import os
import subprocess
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
    "routes": ["routes", IOI, "--answer", " Mary", "--wrong", " John"],
    "circuit": ["circuit", "--prompts", "ioi"],
    "why": ["why", TEXT, "--head", "L5.H0", "--routes", "induction"],  # L5.H0: a head both models have
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
    if verb == "circuit":
        return _circuit(a, b)
    if verb == "why":
        return {
            "sum_rel_err": {
                k: abs(d["difference"]) / max(1.0, abs(d["score"])) for k, d in (("float32", a), ("bfloat16", b))
            },
            "score_float32": a["score"],
            "score_bfloat16": b["score"],
            "score_rel_diff": abs(a["score"] - b["score"]) / max(1.0, abs(a["score"])),
        }
    return _routes(a, b)


def _routes(a: dict, b: dict) -> dict:
    """The routes kept in both runs (each keeps its own top): the largest difference of their estimates and of
    their exact effects where both measured one, over the largest |value|; the top 10's overlap."""
    xa, xb = ({(r["layer"], r["head"], r["query"], r["key"]): r for r in d["rows"]} for d in (a, b))
    both = [k for k in xa if k in xb]
    out = {"routes": len(both), "top10_overlap": len(set(list(xa)[:10]) & set(list(xb)[:10]))}
    for field in ("estimate", "exact"):
        keys = [k for k in both if xa[k][field] is not None and xb[k][field] is not None]
        err = max(abs(xa[k][field] - xb[k][field]) for k in keys) / max(abs(xa[k][field]) for k in keys)
        out |= {f"{field}s": len(keys), f"{field}_max_rel_err": round(err, 4)}
    return out


def _circuit(a: dict, b: dict) -> dict:
    """The top 20 edges by value (the exact effect where measured, else the estimate) in each dtype: their overlap,
    and where an edge was measured exactly in both, the largest difference relative to the largest |effect|."""
    top = {k: [r["label"] for r in d["rows"][:20]] for k, d in (("a", a), ("b", b))}
    xa, xb = ({r["label"]: r["exact"] for r in d["rows"] if r["exact"] is not None} for d in (a, b))
    both = sorted(set(xa) & set(xb))
    scale = max(1.0, max((abs(xa[k]) for k in both), default=1.0))
    return {
        "top20_overlap": len(set(top["a"]) & set(top["b"])),
        "top10_overlap": len(set(top["a"][:10]) & set(top["b"][:10])),
        "top20_changed": sorted(set(top["a"]) ^ set(top["b"])),  # to judge against the error band
        "exact_both": len(both),
        "exact_max_rel_diff": max((abs(xa[k] - xb[k]) for k in both), default=0.0) / scale,
        "settled": [d["meta"]["exact"].get("settled") for d in (a, b)],
    }


def _spearman(a, b) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return round(float(np.corrcoef(ra, rb)[0, 1]), 4)


def machine() -> dict:
    """The CPU a row was measured on (Linux /proc/cpuinfo) and whether it computes in bf16 natively."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    return {"cpu": name, "cores": os.cpu_count(), "native_bf16": "avx512_bf16" in flags or "amx_bf16" in flags}


FLOOR = """
import resource, sys
import attnroute.cli  # the modules a verb's process imports: torch, transformers, attnroute
from attnroute.bundled import model_path
from attnroute.models.caches import gguf_cache
from attnroute.models.directory import directory_tokenizer
directory_tokenizer(gguf_cache(model_path(sys.argv[1])))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def floor(model: str) -> float:
    """GiB a verb's process holds whatever the dtype: the runtime and the model's tokenizer, no weights (a child
    process that imports what a verb imports and reads the tokenizer from the model's cache). A peak minus this is
    what the dtype governs: the weights and the working memory."""
    out = subprocess.run([sys.executable, "-c", FLOOR, model], capture_output=True, text=True, check=True)
    return round(int(out.stdout.split()[-1]) / 2**20, 2)  # kB on Linux


def beside_floor(cost: dict, floor_gib: float) -> dict:
    """The floor, and bf16's peak over float32's with and without it."""
    a, b = cost["float32"]["peak_rss_gib"], cost["bfloat16"]["peak_rss_gib"]
    return {
        "floor_gib": floor_gib,
        "ratio": round(b / a, 3),
        "ratio_above_floor": round((b - floor_gib) / (a - floor_gib), 3),
    }


def add_floors(out: Path) -> None:
    """``--floors``: the floor columns added to the stored rows, nothing measured again (the floor is the same
    for every verb of a model and cheap to measure; the rows' peaks stay as measured)."""
    data = json.loads(out.read_text())
    floors = {model: floor(model) for model in MODELS}
    for key, row in data["rows"].items():
        if not row.get("refused"):
            row["peak"] = beside_floor(row, floors[key.split()[1]])
    out.write_text(json.dumps(data, indent=1))


def main() -> None:
    if sys.argv[1:] == ["--floors"]:
        return add_floors(ROOT / "benchmarks" / "results" / "precision.json")
    asked = sys.argv[1:]  # verbs and models to measure again; the file's other rows stay
    verbs = [a for a in asked if a in ARGS] or list(ARGS)
    models = [a for a in asked if a in MODELS] or list(MODELS)
    out = ROOT / "benchmarks" / "results" / "precision.json"
    rows = json.loads(out.read_text())["rows"] if asked and out.exists() else {}
    floors: dict[str, float] = {}
    for verb, args in ARGS.items():
        if verb not in verbs:
            continue
        for model in models:
            got = {dt: run([*args, "--model", model, "--dtype", dt, "--json", "{json}"], keep=True) for dt in DTYPES}
            cost = {dt: {k: got[dt][k] for k in ("wall_s", "cpu_s", "peak_rss_gib") if k in got[dt]} for dt in DTYPES}
            refused = got["bfloat16"].get("refused")
            rows[f"{verb} {model}"] = {
                **cost,
                "peak": None if refused else beside_floor(cost, floors.setdefault(model, floor(model))),
                "agreement": None if refused else agreement(verb, got["float32"]["result"], got["bfloat16"]["result"]),
                "refused": refused,
                "when": time.strftime("%Y-%m-%d"),
                **machine(),
            }
            print(verb, model, rows[f"{verb} {model}"], file=sys.stderr, flush=True)
    out.write_text(json.dumps({"when": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
