"""`make gpu-check`: attnroute's verbs on a GPU, in float32 and bfloat16, against the CPU's float32 reading.

It has to run unedited on the first GPU machine it meets, which may have no network and no venv. So it uses
the Python it is started with (``make gpu-check PYTHON=python3``; src/ is put on the path here), installs
nothing, and names any missing package in one line. It sets ATTNROUTE_UNVERIFIED_DEVICES=1: it is the run that
verifies the verbs on CUDA (models/placement.py).

What it reads:
- exactness: the bundled models where their packages are installed (SmolLM2), and always tiny random models of
  several architectures (Llama, Qwen2, Gemma 3, Mistral, GPT-2), built from configs in seconds with a
  word-level tokenizer made here (no tokenizer package needed). Each verb (heads, patch on IOI, routes,
  circuit, why) runs on the CPU in float32 (the reference), then on the device in float32 and in bfloat16.
  Its numbers are compared with the reference: max |Δ| against the dtype's stated tolerance
  (engine/tolerance.READ_TOLERANCE), rank agreement (Spearman) and top-k overlap of rankings. A refusal
  by name is recorded as such, not as a failure (routes reads bf16 weights in float32 arithmetic).
- cost: a random-weight model of Llama-3-8B's shape in bf16 on the device: time and peak device memory of
  heads, patch and circuit at 1,024 and 4,096 tokens (``--no-large`` skips it).

Output: one JSON (``--out``) and one verdict line per verb. Exit status 1 when any reading fails (an error, or
a float32 difference beyond tolerance), 2 when the machine cannot run it (a missing package, no device).
``--device cpu --quick`` runs the same path on the CPU in seconds: the tests run it that way.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("ATTNROUTE_UNVERIFIED_DEVICES", "1")

NEEDED = ("torch", "transformers", "numpy", "scipy", "safetensors", "tokenizers", "accelerate")
TINY = {
    "llama": {},
    "qwen2": {},
    "gemma3_text": {"head_dim": 16, "sliding_window": 8, "query_pre_attn_scalar": 16},
    "mistral": {"sliding_window": 8},
    "gpt2": {"n_positions": 256, "num_key_value_heads": None, "intermediate_size": None},
}
TEXT = (
    "When Bob and Lisa went to the store , Lisa gave a drink to Bob . When Kate and Mike went to the store , "
    "Mike gave a drink to Kate . When Bob and Lisa went to the store , Lisa gave a drink to"
)
DTYPES = ("float32", "bfloat16")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="the device checked against the CPU (default cuda)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu-check.json"))
    p.add_argument("--quick", action="store_true", help="tiny models only, two of them; no large model")
    p.add_argument("--no-large", action="store_true", help="skip the Llama-3-8B-shaped cost run")
    p.add_argument("--seconds", type=float, default=400, help="start no new reading after this many seconds")
    a = p.parse_args(argv)
    gone = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    if gone:
        print(f"gpu-check: missing Python packages: {', '.join(gone)} (this Python: {sys.executable})")
        return 2
    import torch

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"gpu-check: no CUDA device is visible to torch {torch.__version__}; nothing to check")
        return 2
    report = {"machine": machine(a.device), "models": {}, "cost": {}}
    save = saver(Path(a.out), report)  # written after every reading: a run stopped at its limit keeps what it did
    deadline = time.monotonic() + a.seconds
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in models(Path(tmp), a.quick):
            report["models"][name] = {}
            for verb in VERBS:
                if time.monotonic() > deadline:
                    report["stopped"] = f"not all read: past --seconds {a.seconds} before {name}/{verb}"
                    break
                r = report["models"][name][verb] = check(verb, model, a.device)
                print(f"{name:>12} {verb:<8} {r['verdict']}", flush=True)
                save()
        if not (a.quick or a.no_large) and a.device.startswith("cuda") and time.monotonic() < deadline:
            large(a.device, report["cost"], save, deadline)
    save()
    failed = [f"{m}/{v}" for m, vs in report["models"].items() for v, r in vs.items() if r["failed"]]
    print(f"gpu-check: {len(failed)} failed {failed or ''} → {a.out}")
    return 1 if failed else 0


def saver(out: Path, report: dict):
    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1, default=str))

    return save


def machine(device: str) -> dict:
    import torch
    import transformers

    gpu = torch.cuda.get_device_name() if device.startswith("cuda") else None
    return {"device": device, "gpu": gpu, "torch": torch.__version__, "transformers": transformers.__version__}


# ---------------------------------------------------------------- the models


def tokenizer():
    """A word-level tokenizer over IOI's words and TEXT's: every name is one token (tokenizers, no files)."""
    from importlib import resources

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    rows = [json.loads(x) for x in (resources.files("attnroute") / "data" / "ioi.jsonl").read_text().splitlines()]
    texts = [r[k] for r in rows if r for k in ("clean", "corrupt", "answer", "wrong")] + [TEXT]
    words = sorted({w for t in texts for w in t.replace(",", " , ").replace(".", " . ").split()})
    vocab = {"[PAD]": 0, "[UNK]": 1, "[BOS]": 2, "[EOS]": 3} | {w: i + 4 for i, w in enumerate(words)}
    t = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    t.pre_tokenizer, t.decoder = pre_tokenizers.Whitespace(), decoders.WordPiece()
    special = {"bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[PAD]", "unk_token": "[UNK]"}
    return PreTrainedTokenizerFast(tokenizer_object=t, **special)


def tiny(arch: str, root: Path, tok):
    """A random 2-layer model of ``arch``, saved; what it gives is how a user holds it: loaded with transformers
    into the dtype on the device, its tokenizer beside it (transformers would give a Qwen2 or GPT-2 directory
    its own tokenizer class, not this word-level one)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    base = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
    base |= dict(num_key_value_heads=2, vocab_size=len(tok), max_position_embeddings=256, initializer_range=0.15)
    base |= dict(pad_token_id=0, bos_token_id=2, eos_token_id=3)
    cfg = AutoConfig.for_model(arch, **{k: v for k, v in (base | TINY[arch]).items() if v is not None})
    torch.manual_seed(0)
    path = root / arch
    AutoModelForCausalLM.from_config(cfg).save_pretrained(path)

    def held(device: str, dtype: str) -> dict:
        where = {"": device}
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), device_map=where).eval()
        return {"model": model, "tokenizer": tok}

    return held


def models(root: Path, quick: bool):
    """(name, how to get it on a device in a dtype): the bundled models that are installed — loaded by
    attnroute from their name (``device=``, ``dtype=``) — then tiny ones, held as a user holds a model."""
    from attnroute.bundled import model_path

    if not quick:
        for name in ("smollm2",):
            try:
                model_path(name)
            except Exception:  # noqa: BLE001  (its package is not installed here: the tiny models stand)
                print(f"gpu-check: the bundled {name} is not installed; tiny models only")
                continue
            yield name, lambda device, dtype, name=name: {"model": name, "device": device, "dtype": dtype}
    tok = tokenizer()
    for arch in list(TINY)[: 2 if quick else None]:
        yield arch, tiny(arch, root, tok)


# ---------------------------------------------------------------- the verbs and their numbers


def _heads(**given):
    import attnroute as ar

    r = ar.read_heads(text=TEXT, exact=0, ablation=False, progress=False, **given)
    return {c: r.columns[c] for c in ("entropy", "sink_mass", "prev_token", "induction")}


def _patch(**given):
    import attnroute as ar

    rows = ar.patch(prompts="ioi", exact=10, progress=False, no_checkpoint=True, **given).to_dict()["rows"]
    return {"estimate": [r["estimate"] for r in rows], "exact": [r["delta"] for r in rows]}


def _routes(**given):
    import attnroute as ar

    rows = ar.routes(text=TEXT, metric="loss", layers=[0], progress=False, no_checkpoint=True, **given)
    rows = rows.to_dict()["rows"]
    return {"estimate": [r["estimate"] for r in rows], "exact": [r["exact"] for r in rows]}


def _circuit(**given):
    import attnroute as ar

    r = ar.circuit(prompts="ioi", exact=0, ig_steps=1, progress=False, no_checkpoint=True, **given).to_dict()
    return {"estimate": [row["estimate"] for row in sorted(r["rows"], key=lambda x: x["edge"])]}


def _why(**given):
    import attnroute as ar

    r = ar.why(text=TEXT, head="L1.H1", query="20", key="5", progress=False, **given).to_dict()
    return {"score": [r["score"]], "sum": [r["sum"]]}


VERBS = {"heads": _heads, "patch": _patch, "routes": _routes, "circuit": _circuit, "why": _why}


def check(verb: str, model, device: str) -> dict:
    """The verb on the CPU in float32, then on ``device`` in each dtype, compared."""
    ref = _run(verb, model, "cpu", "float32")
    out = {"reference": {k: v for k, v in ref.items() if k != "numbers"}}
    if "error" in ref:
        return out | {"verdict": f"the CPU reference failed: {ref['error']}", "failed": True}
    for dtype in DTYPES:
        got = _run(verb, model, device, dtype)
        out[dtype] = got if "numbers" not in got else {k: v for k, v in got.items() if k != "numbers"}
        if "numbers" in got:
            out[dtype] |= compare(ref["numbers"], got["numbers"], dtype)
    return out | verdict(out)


def _run(verb: str, model, device: str, dtype: str) -> dict:
    import torch

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    given = model(device, dtype)
    before = _state(given["model"])
    start = time.perf_counter()
    try:
        numbers = VERBS[verb](**given)
    except Exception as e:  # noqa: BLE001  (every failure is data: its one line, and the traceback's last frame)
        refused = type(e).__name__ in ("CircuitUnsupported", "InputError", "InputTypeError", "ModelLoadError")
        out = {("refused" if refused else "error"): f"{type(e).__name__}: {str(e)[:300]}", "trace": _trace(e)}
        return out | _left(before, given["model"])
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() if device.startswith("cuda") else None
    return {"numbers": numbers, "seconds": round(seconds, 3), "peak_device_bytes": peak} | _left(before, given["model"])


def _state(model):
    """A held model's parameters' (dtype, device, requires_grad), mode, attention implementation and next
    logits on a fixed input — to check the verb left it as it was (None for a model attnroute loads by name)."""
    import torch

    if isinstance(model, str):
        return None
    ids = torch.arange(4, 12, device=next(model.parameters()).device)[None]
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float().cpu()
    params = [(n, p.dtype, str(p.device), p.requires_grad) for n, p in model.named_parameters()]
    hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    forwards = [id(vars(m).get("forward")) for m in model.modules()]  # what a verb wrapped, given back
    attn = model.config._attn_implementation
    return {
        "logits": logits,
        "params": params,
        "training": model.training,
        "hooks": hooks,
        "forwards": forwards,
        "attn": attn,
    }


def _left(before, model) -> dict:
    import torch

    if before is None:
        return {}
    after = _state(model)
    same = {k: (torch.equal(before[k], after[k]) if k == "logits" else before[k] == after[k]) for k in before}
    return {"left_as_it_was": all(same.values()), "changed": [k for k, v in same.items() if not v]}


def compare(ref: dict, got: dict, dtype: str) -> dict:
    """max |Δ| per quantity against the dtype's tolerance; Spearman and top-10 overlap of estimates."""
    import numpy as np
    import torch

    from attnroute.engine.tolerance import READ_TOLERANCE

    bound = READ_TOLERANCE[getattr(torch, dtype)]["effects"]
    worst, agree = {}, {}
    for k, r in ref.items():
        r, g = _array(r), _array(got[k])
        both = ~(np.isnan(r) | np.isnan(g))
        scale = max(1.0, float(np.abs(r[both]).max())) if both.any() else 1.0
        worst[k] = float(np.abs(r[both] - g[both]).max() / scale) if both.any() else 0.0
        if r.size >= 10 and both.all():
            agree[k] = {"spearman": _spearman(r, g), "top10_overlap": _top_overlap(r, g, 10)}
    return {"max_rel_diff": worst, "tolerance": bound, "within": all(w <= bound for w in worst.values()), **agree}


def _array(x):
    import numpy as np

    return np.array([np.nan if v is None else v for v in np.ravel(np.asarray(x, dtype=object))], dtype=float)


def _spearman(a, b) -> float:
    import numpy as np

    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def _top_overlap(a, b, k: int) -> int:
    import numpy as np

    return len(set(np.argsort(-np.abs(a))[:k]) & set(np.argsort(-np.abs(b))[:k]))


def verdict(out: dict) -> dict:
    """One line: each dtype's outcome; failed when float32 is off tolerance or any run errored."""
    parts, failed = [], False
    for dtype in DTYPES:
        r = out[dtype]
        if r.get("left_as_it_was") is False:
            parts.append(f"{dtype} LEFT THE MODEL CHANGED ({', '.join(r['changed'])})")
            failed = True
        if "error" in r:
            parts.append(f"{dtype} ERROR {r['error'][:120]}")
            failed = True
        elif "refused" in r:
            parts.append(f"{dtype} refused ({r['refused'][:80]})")
            failed |= dtype == "float32"
        else:
            worst = max(r["max_rel_diff"].values(), default=0.0)
            ok = "ok" if r["within"] else "OFF"
            parts.append(f"{dtype} {ok} max rel Δ {worst:.2g} (tol {r['tolerance']:g}), {r['seconds']:.1f} s")
            failed |= dtype == "float32" and not r["within"]
    return {"verdict": "; ".join(parts), "failed": failed}


# ---------------------------------------------------------------- the cost of a large model


def large(device: str, out: dict, save, deadline: float) -> None:
    """Time and peak device memory of heads, patch and circuit on a random Llama-3-8B-shaped model in bf16,
    into ``out`` (saved after each), until ``deadline``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import attnroute as ar

    cfg = LlamaConfig(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        max_position_embeddings=8192,
        rope_theta=500000.0,
    )
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # built in bf16 on the device: no float32 copy (32 GB) on the way
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg).eval()
    finally:
        torch.set_default_dtype(before)
    tok = tokenizer()
    loaded = ar.load_model(model, tokenizer=tok)
    for tokens in (1024, 4096):
        words = (TEXT + " ") * (tokens // len(TEXT.split()) + 1)
        text = " ".join(words.split()[: tokens - 1])
        for verb, run in (
            ("heads", lambda t=text: ar.read_heads(loaded, t, exact=0, ablation=False, progress=False)),
            ("patch", lambda t=text: ar.patch(loaded, [_pair(t)], exact=2, progress=False, no_checkpoint=True)),
            ("circuit", lambda t=text: ar.circuit(loaded, [_pair(t)], exact=0, ig_steps=1, progress=False)),
        ):
            if time.monotonic() > deadline:
                out["stopped"] = f"past the deadline before {verb}@{tokens}"
                return
            out[f"{verb}@{tokens}"] = _timed(run)
            print(f"{'llama3-8b':>12} {verb:<8} {tokens} tokens: {out[f'{verb}@{tokens}']}", flush=True)
            save()


def _pair(text: str):
    import attnroute as ar

    words = text.split()
    return ar.PromptPair(" ".join(words), " ".join(words[:-1] + ["Kate"]), " Bob", " Lisa")


RUN_LIMIT = 75  # seconds one large run may take before it is stopped and said (the whole check: under 5 minutes)


def _timed(run) -> dict:
    """Seconds and peak device memory of ``run``; stopped after RUN_LIMIT seconds (SIGALRM), its error kept."""
    import signal

    import torch

    def stop(*_):
        raise TimeoutError(f"stopped after {RUN_LIMIT} s")

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(RUN_LIMIT)
    try:
        run()
    except Exception as e:  # noqa: BLE001  (a failure is the measurement)
        return {"error": f"{type(e).__name__}: {str(e)[:200]}", "trace": _trace(e)}
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    seconds = round(time.perf_counter() - start, 2)
    return {"seconds": seconds, "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}


def _trace(e: BaseException) -> str:
    """The traceback's last frames: what the next session fixes from the JSON alone."""
    return "".join(traceback.format_exception(e))[-1500:]


if __name__ == "__main__":
    sys.exit(main())
