"""Where a route's effect goes wrong in bfloat16: the weights' rounding or the arithmetic? (issue 52.3)

SmolLM2's IOI routes (top 20, all 20 knocked out exactly) read four ways, in this process:
  float32              the float32 model
  rounded              the same model with every weight rounded to bfloat16, computing in float32
  bfloat16             the bfloat16 model as routes reads it: float32 arithmetic from its bf16 weights
                       (models/arithmetic.py)
  bfloat16-arithmetic  the bfloat16 model computing in bf16 (that float32 arithmetic lifted, here only)
and Whisper tiny.en's cross routes on a clip in bfloat16 (as routes reads it) against float32;
each compared with float32: estimates' largest difference over the largest |estimate|, exact knockouts'
over the largest |exact|, and attention weights' largest difference.

    .venv/bin/python benchmarks/routes_precision.py      # about a minute on 2 cores

Writes benchmarks/results/routes-precision.json."""

from __future__ import annotations

import contextlib
import importlib
import json
from pathlib import Path

import torch

import attnroute as ar

ARITHMETIC = importlib.import_module("attnroute.read.patching.route_attribution").float32_arithmetic
IOI = "When Mary and John went to the store, John gave a drink to"
OUT = Path(__file__).resolve().parent / "results" / "routes-precision.json"


def model(how: str):
    module = importlib.import_module("attnroute.read.patching.route_attribution")
    module.float32_arithmetic = ARITHMETIC
    if how.startswith("bfloat16"):
        if how == "bfloat16-arithmetic":  # measured here, never the product's way
            module.float32_arithmetic = lambda loaded: contextlib.nullcontext()
        return ar.load_model("smollm2", dtype="bfloat16")
    loaded = ar.load_model("smollm2")
    if how == "rounded":
        with torch.no_grad():
            for p in loaded.model.parameters():
                p.copy_(p.to(torch.bfloat16).float())
    return loaded


def routes(how: str) -> dict:
    r = ar.route_attribution(
        model(how), IOI, answer=" Mary", wrong=" John", top=20, verify=20, progress=False, no_checkpoint=True
    )
    return {(x["layer"], x["head"], x["query"], x["key"]): x for x in r.routes}


def compared(a: dict, b: dict) -> dict:
    both = [k for k in a if k in b and a[k]["exact"] is not None and b[k]["exact"] is not None]
    diff = lambda f: max(abs(a[k][f] - b[k][f]) for k in both)  # noqa: E731
    top = lambda f: max(abs(a[k][f]) for k in both)  # noqa: E731
    return {
        "routes": len(both),
        "estimate_max_rel_err": diff("estimate") / top("estimate"),
        "exact_max_rel_err": diff("exact") / top("exact"),
        "exact_max_abs_err": diff("exact"),
        "weight_max_abs_err": diff("weight"),
    }


def speech(dtype: str) -> dict:
    """Whisper tiny.en's cross-attention routes on the `rome` clip (top 10, 5 knocked out exactly)."""
    model = ar.load_model("whisper-tiny", dtype=dtype)
    r = ar.speech_routes(model, "rome", answer="Rome", wrong="Paris", top=10, verify=5, progress=False)
    return {(x["layer"], x["head"], x["query"], x["key"]): x for x in r.routes}


def main() -> None:
    base = routes("float32")
    rows = {how: compared(base, routes(how)) for how in ("rounded", "bfloat16", "bfloat16-arithmetic")}
    rows["whisper bfloat16"] = compared(speech("float32"), speech("bfloat16"))
    OUT.write_text(json.dumps(rows, indent=1) + "\n")
    for how, row in rows.items():
        print(how, {k: round(v, 4) for k, v in row.items()})


if __name__ == "__main__":
    main()
