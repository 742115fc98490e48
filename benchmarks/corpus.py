"""Corpus reading on SmolLM2, measured (results in benchmarks/results/corpus.json, table in docs/benchmarks.md).

    .venv/bin/python benchmarks/corpus.py [--docs 24] [--out benchmarks/results/corpus.json]

1. Throughput: the first --docs documents of data/python-docs-topics.jsonl cut into 1,024-token windows.
   attnroute's corpus statistics (fused, no ablation: --exact 0) against the plain transformers SDPA
   forward of the same windows — the whole model, and the body without the LM head — in this process.
2. Ranks: the same read as `attnroute heads --corpus` in one process (2 threads) and with
   `torchrun --nproc-per-node 2` (1 thread each), wall clock of the command.
3. The bundled corpus, all 79 documents: the HeadTable with intervals and the number of candidate
   heads whose zero ablation changes the loss significantly (20 candidates, Holm, α = 0.05).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

CORPUS = Path(__file__).resolve().parents[1] / "data" / "python-docs-topics.jsonl"


def throughput(docs: int) -> dict:
    from attnroute.models import load
    from attnroute.read import corpus as corpus_mod
    from attnroute.read.corpus.read import read_corpus, windows

    lm = load("smollm2")
    wins = [w for text in corpus_mod.documents(CORPUS, limit=docs) for w in windows(lm, text, 1024)]
    tokens = sum(w.shape[1] for w in wins)
    lm.model.set_attn_implementation("sdpa")
    out = {"documents": docs, "windows": len(wins), "tokens": tokens}
    with torch.no_grad():
        for name, call in (("sdpa_model", lm.model), ("sdpa_body", lm.model.base_model)):
            call(input_ids=wins[0])  # warm-up
            t0 = time.perf_counter()
            for w in wins:
                call(input_ids=w)
            out[f"{name}_seconds"] = time.perf_counter() - t0
    table = read_corpus(lm, CORPUS, limit=docs, max_tokens=1024, exact=0, verify=False)
    out["attnroute_seconds"] = table.meta["timings_s"]["documents"]
    for name in ("sdpa_model", "sdpa_body", "attnroute"):
        out[f"{name}_tokens_per_s"] = tokens / out[f"{name}_seconds"]
    out["ratio_vs_sdpa_model"] = out["attnroute_tokens_per_s"] / out["sdpa_model_tokens_per_s"]
    out["ratio_vs_sdpa_body"] = out["attnroute_tokens_per_s"] / out["sdpa_body_tokens_per_s"]
    return out


def ranks(docs: int) -> dict:
    exe = Path(sys.executable)
    args = [
        "heads",
        "--model",
        "smollm2",
        "--corpus",
        str(CORPUS),
        "--limit",
        str(docs),
        "--exact",
        "0",
        "--no-verify",
        "--max-tokens",
        "1024",
    ]
    out = {"documents": docs}
    with tempfile.TemporaryDirectory() as d:
        for name, cmd, threads in (
            ("one_process", [str(exe), "-m", "attnroute", *args, "--json", f"{d}/one.json"], "2"),
            (
                "two_ranks",
                [
                    str(exe.with_name("torchrun")),
                    "--nproc-per-node",
                    "2",
                    "--master-port",
                    "29541",
                    "-m",
                    "attnroute",
                    *args,
                    "--json",
                    f"{d}/two.json",
                ],
                "1",
            ),
        ):
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": threads})
            out[f"{name}_seconds"] = time.perf_counter() - t0
    out["speedup"] = out["one_process_seconds"] / out["two_ranks_seconds"]
    return out


def bundled() -> dict:
    from attnroute.read.corpus.read import read_corpus

    t0 = time.perf_counter()
    table = read_corpus("smollm2", CORPUS, max_tokens=1024, exact=20, importance_tokens=256)
    seconds = time.perf_counter() - t0
    imp = table.meta["importance"]
    ci = table["entropy_ci"]
    return {
        "seconds": seconds,
        "n_documents": table.meta["n_documents"],
        "n_tokens": table.meta["n_tokens"],
        "candidates": imp["candidates"],
        "significant_heads": imp["significant_heads"],
        "n_significant": imp["n_significant"],
        "correction": imp["correction"],
        "entropy_ci_median": float(torch.tensor(ci).nanmedian()),
        "top_effects": [
            {
                "layer": layer,
                "head": h,
                "delta": round(float(d), 4),
                "ci": round(float(table["ablation_delta_ci"][layer, h]), 4),
                "p_holm": float(table["ablation_p_holm"][layer, h]),
            }
            for layer, h, d in table.top("ablation_delta", 10)
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=24)
    ap.add_argument("--out", default="benchmarks/results/corpus.json")
    ap.add_argument("--parts", default="throughput,ranks,bundled")
    a = ap.parse_args()
    torch.set_num_threads(2)
    result = {}
    for part in a.parts.split(","):
        result[part] = {"throughput": throughput, "ranks": ranks, "bundled": lambda n: bundled()}[part](a.docs)
        print(part, json.dumps(result[part], indent=1), flush=True)
    Path(a.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
