"""Patching and route attribution on SmolLM2, measured (results in benchmarks/results/patching.json, tables in
docs/benchmarks.md and the README).

    .venv/bin/python benchmarks/patching.py [--lengths 4096 16384] [--out benchmarks/results/patching.json]

1. `attnroute patch` on the bundled IOI prompts (48 pairs, 3 lengths), head outputs, denoising, logit-diff:
   the default (attribution estimate, then exact settling), and every head exact — beside a plain patching
   loop written with transformers hooks: the model's own SDPA attention, a forward pre-hook on each layer's
   o_proj that puts the clean run's slice of one head in, one forward per head per length group. The loop's
   values are compared with attnroute's (max |Δ|).
2. Route attribution at T tokens (the first documents of data/python-docs-topics.jsonl, cut to T): its two
   passes (forward + backward, then the blocked streaming pass with the top 20 kept), against one forward +
   backward of the model (its SDPA attention, the same metric, gradients to the input embeddings; no
   parameter gradients on either side). Each cell in its own process (peak RSS − RSS after loading, from
   VmHWM). Past 8,192 tokens both sides recompute each layer in the backward (torch.utils.checkpoint): the
   stored activations of a plain backward would not fit in 24 GB; 16,384 is beyond SmolLM2's 8,192 trained
   positions, so those cells are timing and memory only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "data" / "python-docs-topics.jsonl"


# ------------------------------------------------------------------------------------ 1. patch on IOI


@torch.no_grad()
def hooks_loop(lm, groups) -> tuple[np.ndarray, float]:
    """M(corrupt with head h of layer l from clean) [L, H, N] by forward pre-hooks, one forward per head."""
    from attnroute.read.ground.metrics import logit_diff

    L, H = lm.n_layers, lm.n_heads
    N = sum(len(g.rows) for g in groups)
    out = np.zeros((L, H, N))
    lm.model.set_attn_implementation("sdpa")
    t0 = time.perf_counter()
    for g in groups:
        rec = {}
        hooks = [
            p.register_forward_pre_hook(lambda m, a, l=l, rec=rec: rec.__setitem__(l, a[0].clone()))
            for l, p in enumerate(lm.out_projections)
        ]
        lm.model(input_ids=g.clean, logits_to_keep=1)
        for h in hooks:
            h.remove()
        fields = {"answer": g.answer, "wrong": g.wrong}
        for l, proj in enumerate(lm.out_projections):
            d = rec[l].shape[-1] // H
            for h in range(H):

                def put(m, a, l=l, h=h, d=d, rec=rec):
                    x = a[0].clone()
                    x[..., h * d : (h + 1) * d] = rec[l][..., h * d : (h + 1) * d]
                    return (x,)

                hook = proj.register_forward_pre_hook(put)
                out[l, h, g.rows] = logit_diff(lm.model(input_ids=g.corrupt, logits_to_keep=1).logits, fields).numpy()
                hook.remove()
    return out, time.perf_counter() - t0


def ioi() -> dict:
    import attnroute as ar
    from attnroute.bundled import prompts_path
    from attnroute.models import load
    from attnroute.read.ground.prompts import tokenize_pairs

    lm = load("smollm2")
    path = prompts_path("ioi")
    t0 = time.perf_counter()
    settled = ar.patch(lm, path, no_checkpoint=True).to_dict()  # timed from scratch: never a cached checkpoint
    settle_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    every = ar.patch(lm, path, exact="all", no_checkpoint=True).to_dict()
    all_s = time.perf_counter() - t0
    groups, _ = tokenize_pairs(lm.tokenizer, lm.kind, ar.PatchSettings(prompts=path).read_pairs(), "logit-diff")
    ref, loop_s = hooks_loop(lm, groups)
    ours = np.zeros_like(ref)
    for r in every["rows"]:
        ours[r["layer"], r["head"]] = r["values"]
    a = settled["agreement"]["head"]
    full = every["agreement"]["head"]
    return {
        "prompts": settled["meta"]["n_prompts"],
        "lengths": settled["meta"]["lengths"],
        "m_clean": settled["meta"]["m_clean"],
        "m_corrupt": settled["meta"]["m_corrupt"],
        "attnroute_settle_s": settle_s,
        "attnroute_settle_measured": settled["meta"]["exact"]["head"]["measured"],
        "attnroute_all_s": all_s,
        "hooks_loop_all_s": loop_s,
        "max_abs_diff_vs_hooks": float(np.abs(ours - ref).max()),
        "settled_agreement": a,
        "all_heads_agreement": full,
        "top_heads": [
            {k: r[k] for k in ("layer", "head", "normalized", "normalized_ci")}
            for r in sorted((r for r in every["rows"]), key=lambda r: -abs(r["normalized"]))[:10]
        ],
    }


# ------------------------------------------------------------------------------------ 2. routes at T tokens


def _ids(lm, T: int) -> torch.Tensor:
    texts = [json.loads(line)["text"] for line in CORPUS.read_text().splitlines() if line.strip()]
    ids = lm.tokenizer("\n\n".join(texts), return_tensors="pt").input_ids[:, : T - 1]
    return torch.cat([torch.tensor([[lm.tokenizer.bos_token_id]]), ids], 1)


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def child(kind: str, T: int) -> dict:
    """One cell: 'fwdbwd' (the model's forward + backward) or 'routes' (attnroute's two passes)."""
    from attnroute.models import load
    from attnroute.read.ground.metrics import logit_diff
    from attnroute.read.ground.recompute import checkpointed
    from attnroute.read.patching.routes import CHECKPOINT_FROM, output_gradients, stream_routes

    torch.manual_seed(0)
    lm = load("smollm2")
    ids = _ids(lm, T)
    tok = lm.tokenizer
    fields = {"answer": torch.tensor(tok(" the")["input_ids"]), "wrong": torch.tensor(tok(" a")["input_ids"])}
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    base = _rss_kib("VmRSS")
    t0 = time.perf_counter()
    if kind == "fwdbwd":
        lm.model.set_attn_implementation("sdpa")
        with checkpointed(lm, T > CHECKPOINT_FROM):
            emb = lm.model.get_input_embeddings()(ids).detach().requires_grad_()
            m = logit_diff(lm.model(inputs_embeds=emb, logits_to_keep=1, use_cache=False).logits, fields)
            (g,) = torch.autograd.grad(m.sum(), emb)
        extra = {"grad_norm": float(g.norm())}
    else:
        grads, m = output_gradients(lm, batch, logit_diff, fields, {"logits_to_keep": 1}, list(range(lm.n_layers)))
        t1 = time.perf_counter()
        routes, _, _ = stream_routes(lm, batch, grads, 20, {"logits_to_keep": 1}, record_blocks=False)
        extra = {"pass1_s": t1 - t0, "pass2_s": time.perf_counter() - t1, "top_route": routes[0]}
    return {
        "T": T,
        "kind": kind,
        "seconds": time.perf_counter() - t0,
        "peak_over_loaded_gib": (_rss_kib("VmHWM") - base) / 2**20,
        "metric": float(m.sum()),
        **extra,
    }


def run_child(kind: str, T: int) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, str(T)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        return {"T": T, "kind": kind, "error": (done.stderr.strip().splitlines() or ["killed"])[-1][:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def routes_rows(lengths) -> list[dict]:
    rows = []
    for T in lengths:
        base, ours = run_child("fwdbwd", T), run_child("routes", T)
        row = {"T": T, "fwdbwd": base, "routes": ours}
        if "error" not in base and "error" not in ours:
            row["time_ratio"] = ours["seconds"] / base["seconds"]
            row["memory_ratio"] = ours["peak_over_loaded_gib"] / base["peak_over_loaded_gib"]
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384])
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "patching.json"))
    p.add_argument("--skip-ioi", action="store_true")
    p.add_argument("--skip-routes", action="store_true", help="keep the routes rows of the last run")
    p.add_argument("--child", nargs=2, metavar=("KIND", "T"))
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0], int(a.child[1]))))
        return
    out = Path(a.out)
    result = json.loads(out.read_text()) if out.exists() else {}
    if not a.skip_ioi:
        result["ioi"] = ioi()
        print(json.dumps(result["ioi"], indent=1), file=sys.stderr)
    if not a.skip_routes:
        result["routes"] = routes_rows(a.lengths)
    result["threads"] = torch.get_num_threads()
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
