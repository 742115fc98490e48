"""Child process for one long-context measurement; prints JSON {seconds, peak_rss_bytes}.

python -m attnroute.bench.long_context MODE T
MODE: sdpa (transformers' SDPA forward, no weights), sdpa-body (the same without the LM head), eager
(eager with output_attentions, what BertViz / TransformerLens' bridge / nnsight / Inseq read),
headtable (attnroute's text statistics, fused backend), headtable-masses (the same without entropy:
masses, band and diagonals), headtable-max (with the row maximum and argmax: blocked backend).
"""

from __future__ import annotations

import json
import sys
import time

import torch


def peak_rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def tokens(tokenizer, T: int) -> torch.Tensor:
    from ..read.heads import DEFAULT_TEXT

    ids = tokenizer(DEFAULT_TEXT, add_special_tokens=False).input_ids
    reps = T // len(ids) + 1
    seq = ([tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []) + ids * reps
    return torch.tensor([seq[:T]])


def main(mode: str, T: int, model: str = "smollm2") -> None:
    torch.set_num_threads(2)
    from ..read.heads import text_statistics
    from ..read.models import load

    lm = load(model)

    def run(ids):
        with torch.no_grad():
            if mode in ("headtable", "headtable-max", "headtable-masses"):
                text_statistics(
                    lm, ids, lambda *a: None, max_weight=mode == "headtable-max", entropy=mode != "headtable-masses"
                )
            elif mode == "sdpa-body":  # the model body only: what the statistics pass runs, without the LM head
                lm.model.set_attn_implementation("sdpa")
                lm.model.base_model(input_ids=ids)
            else:
                lm.model.set_attn_implementation(mode)
                out = lm.model(input_ids=ids, output_attentions=(mode == "eager"))
                del out

    run(tokens(lm.tokenizer, 256))  # warm-up: first-call allocations and thread start-up, same for every mode
    ids = tokens(lm.tokenizer, T)
    t0 = time.perf_counter()
    run(ids)
    print(json.dumps({"mode": mode, "T": T, "seconds": time.perf_counter() - t0, "peak_rss_bytes": peak_rss()}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), *(sys.argv[3:4]))
