"""The fit prediction against measured peaks (issue 52.5): each verb's whole-command peak RSS on SmolLM2 and
Gemma 3 in float32 and bfloat16 (one process per run, benchmarks/verbs.run: the kernel's ru_maxrss), beside
models/fit.predict from the config alone — and, for the verbs measured in all four, the prediction made with
constants fitted on the other three runs (leave one out): the error a new model would see.

    .venv/bin/python benchmarks/fit.py                     # measure (about 20 minutes on 2 cores), then compare
    .venv/bin/python benchmarks/fit.py --measured FILE     # compare runs measured before

Its JSON's ``fitted`` holds A, B and C fitted on every run: the constants of models/fit.WORKING.

Writes benchmarks/results/fit.json and prints the markdown table of docs/cost.md."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from precision import DTYPES, MODELS  # noqa: E402  (the same two models in the same two dtypes)
from verbs import IOI, TEXT, run  # noqa: E402

FITTED = ("heads", "patch", "circuit")  # routes and why: a small constant working memory, set by hand
ARGS = {
    "heads": ["heads", "--text", TEXT],
    "patch": ["patch", "--prompts", "ioi"],
    "circuit": ["circuit", "--prompts", "ioi"],
    "routes": ["routes", IOI, "--answer", " Mary", "--wrong", " John"],
}


def measure() -> dict:
    runs = {}
    for verb, args in ARGS.items():
        for model in MODELS:
            for dtype in DTYPES:
                r = run([*args, "--model", model, "--dtype", dtype, "--json", "{json}"])
                runs[f"{verb} {model} {dtype}"] = r
                print(verb, model, dtype, r["peak_rss_gib"], file=sys.stderr, flush=True)
    return runs


def compare(runs: dict) -> dict:
    from attnroute.models import config_of
    from attnroute.models.fit import GIB, Shape, predict

    shapes = {m: Shape.of(config_of(m)) for m in MODELS}
    rows = []
    verbs = [*FITTED, "routes"]
    order = lambda k: (verbs.index(k.split()[0]), MODELS.index(k.split()[1]), DTYPES.index(k.split()[2]))  # noqa: E731
    for key in sorted(runs, key=order):
        r = runs[key]
        verb, model, dtype = key.split()
        p = predict(shapes[model], verb, dtype)
        rows.append(
            {
                "verb": verb,
                "model": model,
                "dtype": dtype,
                "measured_gib": r["peak_rss_gib"],
                "predicted_gib": round(p["peak"] / GIB, 2),
                "error": round(p["peak"] / GIB / r["peak_rss_gib"] - 1, 3),
                "left_out_error": _left_out(runs, key, shapes),
            }
        )
    return {"when": time.strftime("%Y-%m-%d"), "runs": runs, "rows": rows}


def constants(runs: dict, keys: list[str], shapes: dict) -> np.ndarray:
    """A, B and C of models/fit.py (bytes; B and C at float32) fitted to the runs ``keys``: what each run's peak
    leaves above its runtime and weights is A + (B + C·V)·(bytes of the dtype / 4), by non-negative least squares
    (a negative part of a peak means nothing)."""
    from attnroute.models.fit import BYTES, GIB, predict

    X, y = [], []
    for k in keys:
        _, model, dtype = k.split()
        base = predict(shapes[model], "routes", dtype)  # runtime + weights (+ routes' small working)
        s = BYTES[dtype] / 4
        X.append([1, s, shapes[model].vocab * s])
        y.append(runs[k]["peak_rss_gib"] * GIB - base["runtime"] - base["weights"])
    return nnls(np.array(X, float), np.array(y, float))[0]


def _left_out(runs: dict, key: str, shapes: dict) -> float | None:
    """The error of the prediction for ``key`` with the verb's constants fitted on its other runs (None where
    they are too few to fit A, B and C: routes' small working memory)."""
    from attnroute.models.fit import BYTES, GIB, predict

    verb = key.split()[0]
    others = [k for k in runs if k.split()[0] == verb and k != key]
    if verb not in FITTED or len(others) < 3:
        return None
    a, b, c = constants(runs, others, shapes)
    _, model, dtype = key.split()
    base = predict(shapes[model], "routes", dtype)
    guess = base["runtime"] + base["weights"] + a + (b + c * shapes[model].vocab) * BYTES[dtype] / 4
    return round(guess / GIB / runs[key]["peak_rss_gib"] - 1, 3)


def fitted(runs: dict) -> dict:
    """Each fitted verb's A, B and C on all its runs: what models/fit.WORKING holds (GiB, GiB, bytes an entry)."""
    from attnroute.models import config_of
    from attnroute.models.fit import GIB, Shape

    shapes = {m: Shape.of(config_of(m)) for m in MODELS}
    out = {}
    for verb in FITTED:
        a, b, c = constants(runs, [k for k in runs if k.split()[0] == verb], shapes)
        out[verb] = {"A_gib": round(a / GIB, 3), "B_gib": round(b / GIB, 3), "C_bytes": round(c)}
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--measured", help="a JSON of runs measured before ({'verb model dtype': run})")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fit.json"))
    a = p.parse_args()
    runs = json.loads(Path(a.measured).read_text()) if a.measured else measure()
    result = compare(runs) | {"fitted": fitted(runs)}
    out = Path(a.out)
    if out.exists():  # what was measured apart (the long-sequence runs) stays
        result = {**json.loads(out.read_text()), **result}
    out.write_text(json.dumps(result, indent=1))
    print("| verb | model | dtype | measured | predicted | error | left out |\n|---|---|---|---:|---:|---:|---:|")
    for r in result["rows"]:
        lo = "" if r["left_out_error"] is None else f"{r['left_out_error']:+.1%}"
        print(
            f"| {r['verb']} | {r['model']} | {r['dtype']} | {r['measured_gib']} GiB | {r['predicted_gib']} GiB "
            f"| {r['error']:+.1%} | {lo} |"
        )


if __name__ == "__main__":
    main()
