"""The three worked circuits of docs/circuits.md, measured (results in benchmarks/results/circuit-examples.json).

    .venv/bin/python benchmarks/circuit_examples.py [--only induction|ioi|planted]

1. SmolLM2 on the bundled induction pairs (" w1 … w10 w1 … w6" against " u1 … u10 w1 … w6": the first
   span corrupted, so the key positions differ between the runs), with the edges from the previous-token
   heads `heads` names into the induction heads' keys and queries measured exactly; then the same
   questions under the other corruption (" w1 … w10 x1 … x6": the repeat corrupted, the first span — every
   induction key — the same in both runs), to show which corruption makes key-side edges visible.
2. SmolLM2 on the bundled 48 IOI pairs, the defaults.
3. The two-layer attention-only model `attnroute learn induction` trains and saves, on its own pairs:
   the planted edge (its previous-token head → its induction head's keys) should be the top head edge.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "circuit-examples.json"

PREVIOUS = ["L16.H0", "L11.H1", "L2.H1"]  # `attnroute heads` on SmolLM2's repeated tokens (issue 33)
INDUCTION = {"L18.H6": "L18.KV2", "L17.H3": "L17.KV1", "L17.H4": "L17.KV1"}  # query head: its kv head


def asked() -> list[str]:
    keys = {f"{p}>{kv}.k" for p in PREVIOUS for kv in INDUCTION.values()}
    return sorted(keys) + [f"{p}>{q}.q" for p in PREVIOUS for q in INDUCTION]


def summary(d: dict, labels: list[str] | None = None) -> dict:
    rows = {e["label"]: e for e in d["edges"]}
    measured = sorted((e for e in d["edges"] if e["exact"] is not None), key=lambda e: -abs(e["exact"]))
    c = d["circuit"]
    by_channel: dict[str, float] = {}
    for e in measured:
        ch = e["receiver"]["channel"] or e["receiver"]["kind"]
        by_channel[ch] = by_channel.get(ch, 0.0) + abs(e["exact"])
    return {
        "m_clean": d["meta"]["m_clean"],
        "m_corrupt": d["meta"]["m_corrupt"],
        "estimate": d["meta"]["estimate"],
        "settle": d["meta"]["exact"],
        "top": [{k: e[k] for k in ("label", "estimate", "exact", "exact_ci", "normalized")} for e in measured[:12]],
        "asked": [{k: rows[x][k] for k in ("label", "estimate", "exact", "exact_ci")} for x in labels or []],
        "measured_abs_by_channel": by_channel,
        "agreement": d["agreement"],
        "curve": c["curve"],
        "cpr": c["cpr"],
        "cmd": c["cmd"],
        "chosen": {k: c["chosen"].get(k) for k in ("k", "faithfulness", "faithfulness_ci", "bracket")},
        "chosen_labels": (c["chosen"].get("labels") or [])[:25],
        "checks": c["checks"],
    }


def repeat_corrupted(path: Path) -> Path:
    """The bundled induction pairs with the repeat corrupted instead of the first span."""
    from attnroute.bundled import prompts_path

    rows = [json.loads(x) for x in Path(prompts_path("induction")).read_text().splitlines() if x.strip()]
    rng = random.Random(0)
    out = []
    for r in rows:
        clean = r["clean"].split(" ")[1:]
        first, shown = clean[:10], len(clean) - 10
        others = [w for w in r["corrupt"].split(" ")[1:11] if w not in first]
        rng.shuffle(others)
        corrupt = first + others[:shown]
        out.append({**r, "corrupt": " " + " ".join(corrupt)})
    path.write_text("".join(json.dumps(x) + "\n" for x in out))
    return path


def induction(lm) -> dict:
    import attnroute as ar

    out = {}
    for name, prompts in (("first_span_corrupted", "induction"), ("repeat_corrupted", None)):
        if prompts is None:
            prompts = str(repeat_corrupted(ROOT / "bench-out" / "induction-repeat-corrupted.jsonl"))
        t0 = time.perf_counter()
        d = ar.circuit(lm, prompts, edges=asked()).to_dict()
        out[name] = {"seconds": time.perf_counter() - t0, **summary(d, asked())}
        print(name, json.dumps(out[name]["asked"], indent=0), flush=True)
    return out


def ioi(lm) -> dict:
    import attnroute as ar

    t0 = time.perf_counter()
    d = ar.circuit(lm, "ioi").to_dict()
    return {"seconds": time.perf_counter() - t0, **summary(d)}


def planted() -> dict:
    import attnroute as ar
    from attnroute.learn.induction import InductionSettings, run

    t0 = time.perf_counter()
    learned = run(InductionSettings(save=str(ROOT / "bench-out" / "induction-model")))
    train_s = time.perf_counter() - t0
    heads = learned["heads"]
    prev, ind = heads["previous_token"], heads["induction"]
    t0 = time.perf_counter()
    d = ar.circuit(learned["saved"]["model"], learned["saved"]["prompts"]).to_dict()
    head_edges = [e for e in d["edges"] if e["sender"]["kind"] == "head" and e["exact"] is not None]
    top = max(head_edges, key=lambda e: abs(e["exact"]))
    return {
        "train_s": train_s,
        "seconds": time.perf_counter() - t0,
        "previous_token_heads": prev["group"],
        "induction_heads": ind["group"],
        "top_head_edge": {k: top[k] for k in ("label", "estimate", "exact", "exact_ci")},
        **summary(d),
    }


def main() -> None:
    from attnroute.models import load

    p = argparse.ArgumentParser()
    p.add_argument("--only", choices=["induction", "ioi", "planted", "why"])
    a = p.parse_args()
    (ROOT / "bench-out").mkdir(exist_ok=True)
    result = json.loads(OUT.read_text()) if OUT.exists() else {}
    lm = load("smollm2") if a.only in (None, "induction", "ioi") else None
    run = {"induction": lambda: induction(lm), "ioi": lambda: ioi(lm), "planted": planted, "why": why_example}
    for name, fn in run.items():
        if a.only in (None, name):
            result[name] = fn()
            OUT.write_text(json.dumps(result, indent=1, default=str) + "\n")
            print(name, "done", flush=True)


def why_example() -> dict:
    """Why L18.H6 attends where it does: its score over the induction routes of 60 random nouns repeated
    (the nouns of the bundled induction set), split into query-side × key-side pairs."""
    import attnroute as ar
    from attnroute.models import load

    sys.path.insert(0, str(ROOT / "data"))
    from make_induction import words

    lm = load("smollm2")
    rng = random.Random(0)
    nouns = rng.sample(words(lm.tokenizer), 60)
    text = "".join(nouns + nouns)  # each noun is one token with its leading space
    t0 = time.perf_counter()
    d = ar.why(lm, text, head="L18.H6", routes="induction", top=15).to_dict()
    keep = ("score", "sum", "difference")
    return {
        "seconds": time.perf_counter() - t0,
        **{k: d[k] for k in keep},
        "routes": d["meta"]["routes"],
        "relative_difference": d["meta"]["relative_difference"],
        "pairs": [
            {"query": p["query_side"]["label"], "key": p["key_side"]["label"], "term": p["term"]} for p in d["pairs"]
        ],
        "key_side": [(t["component"]["label"], t["total"]) for t in d["totals"]["key_side"][:10]],
        "query_side": [(t["component"]["label"], t["total"]) for t in d["totals"]["query_side"][:10]],
    }


if __name__ == "__main__":
    main()
