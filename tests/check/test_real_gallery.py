"""The battery on real attention code (tests/check/real/): every outcome as decided from reading.

Each gallery file says where its code comes from (repository, path, commit, license) and what its
outcome per check must be. Checks a target's convention cannot express default to n/a (the causal
convention) or pass (the others); dtype-specific expectations (`causal_fp16`) override the base name.
"""

import importlib
import pkgutil

import pytest

from attnroute.check import CHECKS, Outcome

from . import real

TARGETS = [
    t for m in pkgutil.iter_modules(real.__path__) for t in importlib.import_module(f"{real.__name__}.{m.name}").TARGETS
]


def expected(target: dict, name: str) -> str:
    base = name.removesuffix("_fp16").removesuffix("_bf16")
    dtype = name[len(base) + 1 :] or "fp32"
    if dtype not in target.get("dtypes", ("fp32", "fp16", "bf16")):
        return "n/a"  # a dtype the target cannot run in (numpy has no bfloat16)
    default = "n/a" if target["convention"] == "causal" else "pass"
    return target["expect"].get(name, target["expect"].get(base, default))


REPORTS: dict[str, object] = {}  # one battery run per target, shared by the tests below (it is deterministic)


def run(target: dict):
    if target["name"] not in REPORTS:
        REPORTS[target["name"]] = real.check(target)
    return REPORTS[target["name"]]


def test_the_gallery_holds_ten_implementations_from_ten_repositories():
    modules = {t["fn"].__module__ for t in TARGETS}
    assert len(modules) >= 10
    for name in modules:
        doc = importlib.import_module(name).__doc__
        assert "Source: https://github.com/" in doc and "License:" in doc and ("commit" in doc or "release" in doc)


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t["name"])
def test_every_outcome_is_the_one_decided_from_reading(target):
    report = run(target)
    got = {c.name: c.outcome.value for c in report.checks}
    want = {name: expected(target, name) for name in CHECKS}
    wrong = {
        n: (got[n], want[n], next(c.detail for c in report.checks if c.name == n)) for n in CHECKS if got[n] != want[n]
    }
    assert not wrong, wrong
    cause = target.get("cause")
    if cause:
        first = next(c.detail for c in report.checks if c.outcome is Outcome.FAIL)
        assert cause in first, first


def test_correct_code_exits_0_and_buggy_code_exits_1():
    verdicts = {t["name"]: run(t).passed for t in TARGETS}
    buggy = {
        "Annotated Transformer",
        "GPT-2 (transformers 4.x _attn)",
        "timm Attention (unfused)",
        "T5 eager (no scale declared)",
        "diffusers SlicedAttnProcessor (v0.29.0)",
        "nanochat SDPA fallback (before #456)",
        "transformers Mistral window mask (v4.34.0)",
        "CLIP4Clip cross block (mask .repeat)",
        "CLIP4Clip cross block (repeat_interleave, −1e6 mask)",  # the tiling fixed; a −1e6 mask gives way near 1e6
        "PyG softmax (before e98be78)",
        "lm-engine SDPA, no padding mask (36bad91)",
        "ONNX Attention reference (before #7867, #8068)",
        "ONNX Attention reference (before #7867, #8068; cap not declared)",
    }
    assert {n for n, ok in verdicts.items() if not ok} == buggy
    assert all(run(t).count(Outcome.FAIL) == 0 for t in TARGETS if t["name"] not in buggy)
