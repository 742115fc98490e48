"""make gpu-check's script (benchmarks/gpu_check.py) runs its whole comparison path on the CPU in seconds, says in
one line what a machine lacks, and on a CUDA machine checks the verbs there (skipped here, saying why)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_comparison_runs_end_to_end_on_the_cpu(gpu_check, tmp_path, capsys):
    out = tmp_path / "gpu-check.json"
    assert gpu_check.main(["--device", "cpu", "--quick", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["models"]) == {"llama", "qwen2"}
    for verbs in report["models"].values():
        assert set(verbs) == {"heads", "patch", "routes", "circuit", "why"}
        for verb, r in verbs.items():
            assert r["float32"]["within"] and max(r["float32"]["max_rel_diff"].values()) == 0.0, verb
            # bf16: read within its tolerance (routes in float32 arithmetic), never an error or a refusal
            assert "error" not in r["bfloat16"] and "refused" not in r["bfloat16"] and r["bfloat16"]["within"], verb
            # the held model as it was after every run, a refusal's too (weights, mode, hooks, next logits)
            assert all(r[d]["left_as_it_was"] for d in ("float32", "bfloat16")), verb
    lines = capsys.readouterr().out.splitlines()
    assert sum(" float32 ok " in x for x in lines) == 10 and lines[-1].startswith("gpu-check: 0 failed")


def test_a_verb_that_changes_the_held_model_fails_the_check(gpu_check, monkeypatch, tmp_path, capsys):
    """The check's own state comparison can fail: a verb that leaves a hook on the model is a failure."""

    def heads(**given):
        given["model"].model.layers[0].register_forward_hook(lambda *a: None)
        return {"entropy": [0.0]}

    monkeypatch.setattr(gpu_check, "VERBS", {"heads": heads})
    assert gpu_check.main(["--device", "cpu", "--quick", "--out", str(tmp_path / "g.json")]) == 1
    assert "LEFT THE MODEL CHANGED (hooks)" in capsys.readouterr().out


def test_a_missing_package_is_named_in_one_line(gpu_check, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "accelerate" else real(name, *a))
    assert gpu_check.main(["--device", "cpu", "--quick"]) == 2
    assert (
        capsys.readouterr().out.strip()
        == f"gpu-check: missing Python packages: accelerate (this Python: {__import__('sys').executable})"
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
def test_without_cuda_it_says_so_and_checks_nothing(gpu_check, capsys):
    assert gpu_check.main(["--device", "cuda", "--quick"]) == 2
    assert "no CUDA device" in capsys.readouterr().out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: make gpu-check runs this on a GPU machine")
def test_the_verbs_on_cuda_agree_with_the_cpu(gpu_check, tmp_path):
    assert gpu_check.main(["--device", "cuda", "--quick", "--out", str(tmp_path / "g.json")]) == 0
