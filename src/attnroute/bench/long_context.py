"""Child process for one long-context measurement; prints one JSON line.

python -m attnroute.bench.long_context MODE T            seconds and peak RSS of one run of MODE
python -m attnroute.bench.long_context pair MODE T N     N alternating rounds of sdpa-body and MODE
                                                         in one process: times and their ratio

MODE: sdpa (transformers' SDPA forward, no weights), sdpa-body (the same without the LM head),
sdpa-body-nocache (the body with use_cache=False, as attnroute's statistics pass runs it), eager
(eager with output_attentions, what BertViz / TransformerLens' bridge / nnsight / Inseq read),
headtable (attnroute's text statistics, fused backend), headtable-masses (the same without entropy:
masses, band and diagonals), headtable-max (with the row maximum and argmax: blocked backend).

Why pairs: on this 2-core machine one cell's time moves by up to ±15 % between processes (the same
command, minutes apart), which is the size of the effect measured. Alternating the baseline and the
candidate in one process, and taking the ratio of their medians, cancels most of that drift; peak
memory still needs one process per cell (the allocator's high-water mark is per process).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch

from ..read.ground.budget import peak

BASELINE = "sdpa-body"


def tokens(tokenizer, T: int) -> torch.Tensor:
    from ..read.heads import DEFAULT_TEXT

    ids = tokenizer(DEFAULT_TEXT, add_special_tokens=False).input_ids
    reps = T // len(ids) + 1
    seq = ([tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []) + ids * reps
    return torch.tensor([seq[:T]])


def runner(lm, mode: str):
    """A function ids -> None that runs MODE once on the loaded model."""
    from ..read.textpass import text_statistics

    def run(ids):
        with torch.no_grad():
            if mode in ("headtable", "headtable-max", "headtable-masses"):
                text_statistics(
                    lm, ids, lambda *a: None, max_weight=mode == "headtable-max", entropy=mode != "headtable-masses"
                )
            elif mode == "sdpa-body":  # the model body as a user calls it: what the statistics pass runs, no LM head
                lm.model.set_attn_implementation("sdpa")
                lm.model.base_model(input_ids=ids)
            elif mode == "sdpa-body-nocache":  # the same without the KV cache, as the statistics pass runs it
                lm.model.set_attn_implementation("sdpa")
                lm.model.base_model(input_ids=ids, use_cache=False)
            else:
                lm.model.set_attn_implementation(mode)
                out = lm.model(input_ids=ids, output_attentions=(mode == "eager"))
                del out

    return run


def main(mode: str, T: int, model: str = "smollm2") -> None:
    torch.set_num_threads(2)
    from ..models import load

    lm = load(model)
    run = runner(lm, mode)
    run(tokens(lm.tokenizer, 256))  # warm-up: first-call allocations and thread start-up, same for every mode
    ids = tokens(lm.tokenizer, T)
    t0 = time.perf_counter()
    run(ids)
    print(json.dumps({"mode": mode, "T": T, "seconds": time.perf_counter() - t0, "peak_rss_bytes": peak() or 0}))


def pair(mode: str, T: int, rounds: int, model: str = "smollm2") -> None:
    torch.set_num_threads(2)
    from ..models import load

    lm = load(model)
    runs = {BASELINE: runner(lm, BASELINE), mode: runner(lm, mode)}
    for run in runs.values():
        run(tokens(lm.tokenizer, 256))
    ids = tokens(lm.tokenizer, T)
    times: dict[str, list[float]] = {m: [] for m in runs}
    for _ in range(rounds):
        for m, run in runs.items():
            t0 = time.perf_counter()
            run(ids)
            times[m].append(time.perf_counter() - t0)
    med = {m: statistics.median(t) for m, t in times.items()}
    print(
        json.dumps(
            {
                "mode": mode,
                "T": T,
                "rounds": rounds,
                "baseline": BASELINE,
                "baseline_seconds": times[BASELINE],
                "seconds": times[mode],
                "ratio": med[mode] / med[BASELINE],
            }
        )
    )


if __name__ == "__main__":
    if sys.argv[1] == "pair":
        pair(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *(sys.argv[5:6]))
    else:
        main(sys.argv[1], int(sys.argv[2]), *(sys.argv[3:4]))
