"""`attnroute check`: exit 0 all pass, 1 a check failed, 2 cannot load or call; --json contract."""

import json
import sys

import pytest

from attnroute.cli import main


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "myattn.py").write_text(
        "import torch\n"
        "def good(q, k, v, attn_mask=None):\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,"
        " enable_gqa=q.shape[1] != k.shape[1])\n"
        "def bad(q, k, v, attn_mask=None):\n"
        "    return good(q, k, v, None if attn_mask is None else ~attn_mask)\n"
        "def wrong_signature(x):\n"
        "    return x\n"
        "raise_me = 3\n"
    )
    monkeypatch.chdir(tmp_path)
    yield
    sys.modules.pop("myattn", None)


def run(capsys, *argv):
    code = main(["check", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_user_function_passes_with_exit_0_and_json(capsys, user_module):
    code, out, _ = run(
        capsys, "myattn:good", "--json", "--skip", "masked_garbage,masked_garbage_fp16,masked_garbage_bf16"
    )
    data = json.loads(out)
    assert code == 0 and data["passed"] is True and data["target"] == "myattn:good"
    assert {"name", "passed", "skipped", "detail"} <= set(data["checks"][0])
    assert "masked_garbage" not in {c["name"] for c in data["checks"]}


def test_failing_check_gives_exit_1_and_names_the_row(capsys, user_module):
    code, out, _ = run(capsys, "myattn:bad", "--only", "causal")
    assert code == 1
    assert "inverted" in out and "query" in out


@pytest.mark.parametrize(
    "target,message",
    [
        ("nosuchmodule:fn", "cannot import 'nosuchmodule'"),
        ("myattn:missing", "has no callable 'missing'"),
        ("myattn:raise_me", "has no callable 'raise_me'"),
        ("myattn:wrong_signature", "cannot call myattn:wrong_signature"),
        ("torch.flash", "unknown target 'torch.flash'"),
    ],
)
def test_unloadable_or_uncallable_targets_exit_2(capsys, user_module, target, message):
    code, _, err = run(capsys, target)
    assert code == 2 and message in err and "Traceback" not in err


def test_unknown_check_name_exit_2(capsys):
    code, _, err = run(capsys, "torch.sdpa", "--only", "causal,telepathy")
    assert code == 2 and "telepathy" in err


def test_builtin_torch_mha_finding(capsys):
    code, out, _ = run(capsys, "torch.mha", "--json", "--only", "empty_rows,causal")
    data = json.loads(out)
    by = {c["name"]: c for c in data["checks"]}
    assert code == 1 and by["causal"]["passed"]
    assert not by["empty_rows"]["passed"] and "NaN" in by["empty_rows"]["detail"]


def test_hf_targets_run_each_attention_implementation(capsys):
    code, out, _ = run(capsys, "hf:minilm", "--json", "--only", "causal,padding_right,empty_rows")
    data = json.loads(out)
    names = [t["target"] for t in data["targets"]]
    assert names == ["hf:minilm[eager]", "hf:minilm[sdpa]"]
    eager = {c["name"]: c for c in data["targets"][0]["checks"]}
    sdpa = {c["name"]: c for c in data["targets"][1]["checks"]}
    # transformers' eager path gives a row that may attend to nothing uniform weights over masked keys
    assert not eager["empty_rows"]["passed"] and "took 1.00 in total" in eager["empty_rows"]["detail"]
    assert sdpa["empty_rows"]["passed"] and eager["causal"]["passed"] and eager["padding_right"]["passed"]
    assert code == 1
