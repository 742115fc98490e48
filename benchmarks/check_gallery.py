"""The README's table of real attention code under `attnroute check`: outcome, finding, time.

    .venv/bin/python benchmarks/check_gallery.py      (run from the repository root)

Each row runs the whole battery (18 checks × fp32, fp16, bf16, each on several shapes) on one implementation copied into
tests/check/real/ (each file names its repository, path, commit and license).
"""

import importlib
import json
import pkgutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from attnroute.check import Outcome  # noqa: E402
from tests.check import real  # noqa: E402

KIND = {Outcome.FAIL: "bug", Outcome.HAZARD: "hazard"}


def finding(report) -> tuple[str, str]:
    fails = [c for c in report.checks if c.outcome is Outcome.FAIL]
    hazards = [c for c in report.checks if c.outcome is Outcome.HAZARD]
    first = (fails or hazards or [None])[0]
    if first is None:
        return "every check it can express passes", "—"
    names = sorted({c.name.removesuffix("_fp16").removesuffix("_bf16") for c in (fails or hazards)})
    return f"{', '.join(names)}: {first.detail.split(';')[0]}", KIND[first.outcome]


def main() -> None:
    from attnroute.check import CHECKS

    n = len(CHECKS)
    print(
        f"| implementation | convention | outcome (pass / fail / hazard / n/a of {n}) | first finding | kind | time |"
    )
    print("|---|---|---|---|---|---:|")
    rows = []
    for m in pkgutil.iter_modules(real.__path__):
        for t in importlib.import_module(f"{real.__name__}.{m.name}").TARGETS:
            t0 = time.perf_counter()
            r = real.check(t)
            seconds = time.perf_counter() - t0
            counts = " / ".join(str(r.count(o)) for o in (Outcome.PASS, Outcome.FAIL, Outcome.HAZARD, Outcome.NA))
            text, kind = finding(r)
            verdict = "exit 0" if r.passed else "exit 1"
            scale = f", --scale {t['scale']:g}" if t.get("scale") else ""
            scale += f", --softcap {t['softcap']:g}" if t.get("softcap") else ""
            print(
                f"| {t['name']} | {t['convention']}{scale} | {verdict}: {counts} | {text[:150]} | {kind} | "
                f"{seconds:.2f} s |"
            )
            rows.append(
                {
                    "target": t["name"],
                    "passed": r.passed,
                    "counts": r.to_dict()["counts"],
                    "finding": text,
                    "seconds": round(seconds, 3),
                }
            )
    times = [r["seconds"] for r in rows]
    out = Path(__file__).resolve().parent / "results" / "check_gallery.json"
    out.write_text(
        json.dumps(
            {
                "checks": n,
                "threads": torch.get_num_threads(),
                "targets": rows,
                "seconds_min": min(times),
                "seconds_max": max(times),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\n{len(rows)} targets, {min(times):.2f}–{max(times):.2f} s each; written to {out}")


if __name__ == "__main__":
    main()
