"""Circuits on SmolLM2, measured (results in benchmarks/results/circuits.json, tables in docs/benchmarks.md and
the README).

    .venv/bin/python benchmarks/circuits.py [--skip-ioi] [--skip-long] [--out benchmarks/results/circuits.json]

1. On the bundled IOI prompts (48 pairs, 3 lengths), against one forward + backward of the model over the
   same prompts (its SDPA attention, the same metric, gradients to the input embeddings): EAP over every
   edge (70,651), with and without the QK fix, and EAP-IG at 5 steps (forward + backward, EAP and EAP-IG:
   the median of 3 runs each; EAP-IG also as `--ig-steps 5` runs it, the default QK fix at every step, once);
   exact path patching of the top 50
   edges by |estimate| beside a plain hooks loop (one forward per edge: a pre-hook on the receiving layer
   and a forward hook on its q/k/v projection, or on the MLP or the final norm, as
   tests/read/test_circuits.py's reference does); `ar.circuit` end to end with its defaults.
2. At 4,096 tokens (data/python-docs-topics.jsonl cut to T), each cell in its own process (peak RSS over
   the RSS after loading): one forward + backward of the model, against EAP over every edge (the text as a
   clean/corrupt pair whose corrupt side has the first half of the tokens shuffled).
3. `attnroute routes` on the 4,096-token text with `--metric loss --verify 5`, the whole command, against
   one forward + backward of the model.
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from patching import _ids, _rss_kib  # noqa: E402  (the same 4,096-token text and RSS reading)


def fwdbwd(lm, groups) -> float:
    """One forward + backward of the model over the prompt groups (SDPA; gradients to the embeddings)."""
    from attnroute.read.ground.metrics import logit_diff

    lm.model.set_attn_implementation("sdpa")
    t0 = time.perf_counter()
    for g in groups:
        emb = lm.model.get_input_embeddings()(g.corrupt).detach().requires_grad_()
        m = logit_diff(lm.model(inputs_embeds=emb, use_cache=False).logits, {"answer": g.answer, "wrong": g.wrong})
        torch.autograd.grad(m.sum(), emb)
    return time.perf_counter() - t0


def edge_runs(lm, pairs):
    from attnroute.read.circuits.graph import Graph
    from attnroute.read.circuits.layout import discover
    from attnroute.read.circuits.runs import EdgeRun
    from attnroute.read.ground.metrics import logit_diff
    from attnroute.read.ground.pool import chunk_groups
    from attnroute.read.ground.prompts import tokenize_pairs

    groups, _ = tokenize_pairs(lm.tokenizer, lm.kind, pairs, "logit-diff")
    layout = discover(lm, groups[0].clean[:1])
    graph = Graph(layout)
    t0 = time.perf_counter()
    runs = [
        EdgeRun(lm, layout, graph, g, logit_diff, direction="denoising", ablation="corrupt")
        for g in chunk_groups(groups, 512)
    ]
    return groups, graph, runs, time.perf_counter() - t0


def timed_eap(runs, repeat: int = 1, **kw) -> tuple[np.ndarray, float]:
    """The estimates and the median time of ``repeat`` runs (this machine's timings wander by ±20 %)."""
    from attnroute.read.circuits.estimate import eap

    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        est = np.concatenate([eap(r, **kw) for r in runs], axis=1)
        times.append(time.perf_counter() - t0)
    return est, float(np.median(times))


@torch.no_grad()
def hooks_loop(lm, graph, runs, edges: list[int]) -> tuple[np.ndarray, float]:
    """One full forward per edge and run, written with transformers' hooks (test_circuits.reference)."""
    sys.path.insert(0, str(ROOT))
    from tests.read.test_circuits import reference

    out = np.zeros((len(edges), sum(r.n for r in runs)))
    lm.model.set_attn_implementation("sdpa")
    t0 = time.perf_counter()
    col = 0
    for r in runs:
        g = r.group
        fields = {"answer": g.answer, "wrong": g.wrong}
        for i, e in enumerate(edges):
            s, rc = graph.edge(e)
            sender = (s.kind, s.layer, s.head)
            unit = rc.head
            receiver = (rc.kind, rc.layer, unit, rc.channel)
            out[i, col : col + r.n] = (
                reference(lm.model, g.clean, g.corrupt, fields, sender, receiver) - r.m_base
            ).numpy()
        col += r.n
    return out, time.perf_counter() - t0


def ioi(previous: dict, hooks: bool = True) -> dict:
    import attnroute as ar
    from attnroute.models import load
    from attnroute.promptset import pairs_of

    lm = load("smollm2")
    pairs = pairs_of("ioi", None, None, None, None, "logit-diff")
    groups, graph, runs, record_s = edge_runs(lm, pairs)
    fwdbwd(lm, groups)  # warm
    fb = float(np.median([fwdbwd(lm, groups) for _ in range(3)]))
    plain, plain_s = timed_eap(runs, 3, qk_fix=False)
    fixed, fixed_s = timed_eap(runs, qk_fix=True)
    ig, ig_s = timed_eap(runs, 3, ig_steps=5, qk_fix=False)
    _, ig_fixed_s = timed_eap(runs, ig_steps=5)  # as `--ig-steps 5` runs it: the default QK fix at every step
    top = [int(e) for e in np.argsort(-np.abs(fixed.mean(1)))[:50]]
    t0 = time.perf_counter()
    exact = np.concatenate([(r.measure(top) - r.m_base).numpy() for r in runs], axis=1)
    settle_s = time.perf_counter() - t0
    if hooks:
        loop, loop_s = hooks_loop(lm, graph, runs, top)
        hooks_said = {"hooks_loop_top50_s": loop_s, "max_abs_diff_vs_hooks": float(np.abs(exact - loop).max())}
    else:  # the loop's figure kept from the run that measured it (it takes ~10 minutes)
        hooks_said = {k: previous.get(k) for k in ("hooks_loop_top50_s", "max_abs_diff_vs_hooks")}
        hooks_said["hooks_loop_from"] = "the previous run of this benchmark (--skip-hooks)"
    t0 = time.perf_counter()
    result = ar.circuit(lm, pairs).to_dict()
    circuit_s = time.perf_counter() - t0
    return {
        "prompts": len(pairs),
        "edges": len(graph),
        "record_s": record_s,
        "fwdbwd_s": fb,
        "eap_s": plain_s,
        "eap_qk_fix_s": fixed_s,
        "eap_ig5_s": ig_s,
        "eap_ratio": plain_s / fb,
        "eap_qk_fix_ratio": fixed_s / fb,
        "eap_ig5_ratio": ig_s / fb,
        "eap_ig5_qk_fix_s": ig_fixed_s,
        "eap_ig5_qk_fix_ratio": ig_fixed_s / fb,
        "exact_top50_s": settle_s,
        **hooks_said,
        "circuit_end_to_end_s": circuit_s,
        "circuit_estimate": result["meta"]["estimate"],
        "circuit": {k: result["circuit"][k] for k in ("cpr", "cmd", "checks")},
        "chosen_k": result["circuit"]["chosen"].get("k"),
        "settle": result["meta"]["exact"],
        "agreement": result["agreement"],
    }


# ------------------------------------------------------------------------------------ 2. EAP at 4,096 tokens


def child(kind: str, T: int) -> dict:
    from attnroute.models import load

    torch.manual_seed(0)
    lm = load("smollm2")
    ids = _ids(lm, T)
    base = _rss_kib("VmRSS")
    t0 = time.perf_counter()
    if kind == "fwdbwd":
        from attnroute.read.ground.metrics import loss

        lm.model.set_attn_implementation("sdpa")
        emb = lm.model.get_input_embeddings()(ids).detach().requires_grad_()
        m = loss(
            lm.model(inputs_embeds=emb, use_cache=False).logits,
            {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
        )
        torch.autograd.grad(m.sum(), emb)
        extra = {}
    else:
        clean_ids = ids[0, 1:].tolist()
        half = len(clean_ids) // 2
        g = torch.Generator().manual_seed(0)
        shuffled = [clean_ids[i] for i in torch.randperm(half, generator=g).tolist()] + clean_ids[half:]
        extra = _eap_long(lm, ids, shuffled)
    return {
        "T": T,
        "kind": kind,
        "seconds": time.perf_counter() - t0,
        "peak_over_loaded_gib": (_rss_kib("VmHWM") - base) / 2**20,
        **extra,
    }


def _eap_long(lm, ids, shuffled) -> dict:
    """EAP on one long clean/corrupt pair (the loss on the corrupt run's tokens), from token ids directly."""
    from attnroute.read.circuits.estimate import eap
    from attnroute.read.circuits.graph import Graph
    from attnroute.read.circuits.layout import discover
    from attnroute.read.circuits.runs import EdgeRun
    from attnroute.read.ground.metrics import loss
    from attnroute.read.ground.prompts import Group

    corrupt = torch.cat([ids[:, :1], torch.tensor([shuffled])], 1)
    group = Group(rows=[0], clean=ids, corrupt=corrupt, answer=None, wrong=None)
    layout = discover(lm, ids[:, :8])
    graph = Graph(layout)
    run = EdgeRun(lm, layout, graph, group, loss, direction="denoising", ablation="corrupt")
    est = eap(run, 1)
    return {"edges": len(graph), "qk_fix_layers": run.qk_fixed, "top_estimate": float(np.abs(est).max())}


def run_child(kind: str, T: int) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(T)], capture_output=True, text=True, timeout=7200
    )
    if done.returncode != 0:
        return {"T": T, "kind": kind, "error": (done.stderr.strip().splitlines() or ["killed"])[-1][:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def long_rows(T: int) -> dict:
    base, ours = run_child("fwdbwd", T), run_child("eap", T)
    row = {"T": T, "fwdbwd": base, "eap": ours}
    if "error" not in base and "error" not in ours:
        row["time_ratio"] = ours["seconds"] / base["seconds"]
        row["memory_ratio"] = ours["peak_over_loaded_gib"] / base["peak_over_loaded_gib"]
    return row


def routes_command(T: int, fwdbwd_s: float) -> dict:
    """`attnroute routes` on the T-token text with --metric loss --verify 5: the whole command's time."""
    from attnroute.models import load

    lm = load("smollm2")
    text = lm.tokenizer.decode(_ids(lm, T)[0, 1:])
    path = ROOT / "bench-out" / "routes-text.txt"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    out = ROOT / "bench-out" / "routes-long.json"
    cmd = [str(Path(sys.executable).with_name("attnroute")), "routes", "--file", str(path), "--metric", "loss"]
    cmd += ["--verify", "5", "--json", str(out)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=7200)
    seconds = time.perf_counter() - t0
    d = json.loads(out.read_text()) if done.returncode == 0 else {}
    return {
        "T": T,
        "seconds": seconds,
        "returncode": done.returncode,
        "fwdbwd_s": fwdbwd_s,
        "ratio": seconds / fwdbwd_s,
        "settle": d.get("meta", {}).get("settle"),
        "error": None if done.returncode == 0 else done.stderr.strip().splitlines()[-1][:300],
    }


def why_rows(T: int = 1000) -> dict:
    """`ar.why` on SmolLM2 at T tokens (random nouns, the second half repeating the first): one route, and
    the head's score averaged over its induction routes (about T/2), beside one forward of the model."""
    import random

    import attnroute as ar
    from attnroute.models import load

    sys.path.insert(0, str(ROOT / "data"))
    from make_induction import words

    lm = load("smollm2")
    nouns = words(lm.tokenizer)
    rng = random.Random(0)
    half = [rng.choice(nouns) for _ in range(T // 2)]
    text = "".join(half + half)  # each noun is one token with its leading space
    ids = lm.tokenizer(text, return_tensors="pt").input_ids
    lm.model.set_attn_implementation("sdpa")
    with torch.no_grad():
        lm.model(input_ids=ids)  # warm
        t0 = time.perf_counter()
        lm.model(input_ids=ids)
        forward_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    one = ar.why(lm, text, head="L18.H6", query=str(T - 10), key=str(T // 2 - 9)).to_dict()
    one_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    many = ar.why(lm, text, head="L18.H6", routes="induction").to_dict()
    many_s = time.perf_counter() - t0
    return {
        "T": int(ids.shape[1]),
        "forward_s": forward_s,
        "one_route_s": one_s,
        "one_route_relative_difference": one["meta"]["relative_difference"],
        "routes": many["meta"]["routes"],
        "routes_s": many_s,
        "routes_relative_difference": many["meta"]["relative_difference"],
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "circuits.json"))
    p.add_argument("--skip-ioi", action="store_true")
    p.add_argument("--skip-long", action="store_true")
    p.add_argument("--skip-routes", action="store_true")
    p.add_argument("--skip-hooks", action="store_true", help="keep the hooks loop's figure from the last run")
    p.add_argument("--only-why", action="store_true", help="only why's timing (written into the same file)")
    p.add_argument("--T", type=int, default=4096)
    p.add_argument("--child", nargs=2, metavar=("KIND", "T"))
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0], int(a.child[1]))))
        return
    out = Path(a.out)
    result = json.loads(out.read_text()) if out.exists() else {}
    if a.only_why:
        result["why"] = why_rows()
        print(json.dumps(result["why"], indent=1), file=sys.stderr)
        out.write_text(json.dumps(result, indent=1, default=str) + "\n")
        return
    if not a.skip_ioi:
        result["ioi"] = ioi(result.get("ioi", {}), hooks=not a.skip_hooks)
        print(json.dumps(result["ioi"], indent=1, default=str), file=sys.stderr)
        out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    if not a.skip_long:
        result["long"] = long_rows(a.T)
        print(json.dumps(result["long"], indent=1), file=sys.stderr)
        out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    if not a.skip_routes:
        fb = run_child("fwdbwd", a.T)["seconds"]  # its own, in the same run: this machine's speed wanders
        result["routes"] = routes_command(a.T, fb)
        print(json.dumps(result["routes"], indent=1), file=sys.stderr)
    result["threads"] = torch.get_num_threads()
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
