"""`attnroute check`: exit 0 all pass, 1 a check failed, 2 cannot load or call; --json contract."""

import dataclasses
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
    code, out, _ = run(capsys, "myattn:good", "--json")
    data = json.loads(out)
    assert code == 0 and data["passed"] is True and data["target"] == "myattn:good"
    assert {"name", "outcome", "passed", "detail"} <= set(data["checks"][0])
    assert data["counts"]["fail"] == 0 and data["counts"]["hazard"] == 6  # NaN/inf behind the mask: torch SDPA
    code, out, _ = run(capsys, "myattn:good", "--json", "--strict")
    assert code == 1 and json.loads(out)["strict"] is True
    code, out, _ = run(capsys, "myattn:good", "--json", "--skip", "causal")
    assert next(c for c in json.loads(out)["checks"] if c["name"] == "causal")["outcome"] == "n/a"


def test_json_to_a_file_and_summary_on_stdout(capsys, user_module, tmp_path):
    code, out, _ = run(capsys, "myattn:good", "--only", "causal", "--json", str(tmp_path / "c.json"))
    assert code == 0 and json.loads((tmp_path / "c.json").read_text())["checks"][0]["outcome"] == "pass"
    assert "myattn:good: PASS" in out


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
    assert code == 1 and by["causal"]["outcome"] == "pass"
    assert by["empty_rows"]["outcome"] == "fail" and "NaN" in by["empty_rows"]["detail"]


def test_a_target_that_always_raises_never_exits_0(capsys, user_module):
    code, _, err = run(capsys, "myattn:wrong_signature")
    assert code == 2 and "cannot call" in err


def test_hf_targets_run_transformers_own_code_end_to_end(capsys):
    code, out, _ = run(capsys, "hf:minilm", "--json", "--only", "causal,padding_right,empty_rows,scale")
    data = json.loads(out)
    names = [t["target"] for t in data["targets"]]
    assert names == ["hf:minilm[eager]", "hf:minilm[sdpa]"]
    eager = {c["name"]: c for c in data["targets"][0]["checks"]}
    sdpa = {c["name"]: c for c in data["targets"][1]["checks"]}
    # transformers' eager path gives a row that may attend to nothing uniform weights over masked keys
    assert eager["empty_rows"]["outcome"] == "hazard" and "took 1.00 in total" in eager["empty_rows"]["detail"]
    assert sdpa["empty_rows"]["outcome"] == "pass" and eager["padding_right"]["outcome"] == "pass"
    assert eager["causal"]["outcome"] == "n/a"  # an encoder cannot be causal
    assert eager["scale"]["outcome"] == "pass" and "d=32" in eager["scale"]["detail"]  # the model's own head dim
    assert code == 0


def _verdicts(target, only):
    import attnroute as ar
    from attnroute.check.targets import resolve

    out = {}
    for t in resolve(target):
        # a Target carries its head dim, mask family, mask source and extra checks; its scale is left to the fit
        r = ar.check(dataclasses.replace(t, scale=None), only=only)
        out[t.name] = {c.name: c for c in r.checks}
    return out


@pytest.mark.parametrize("model", ["smollm2", "minilm"])
def test_hf_verdicts_follow_transformers_mask_function_and_the_models_scaling(model, monkeypatch, request):
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    loaded = request.getfixturevalue(model)  # the bundled model, loaded once per session
    monkeypatch.setattr("attnroute.models.load", lambda name, **kw: loaded)  # hf: targets read this one
    only = ["scale", "padding_right"]
    clean = _verdicts(f"hf:{model}", only)
    assert all(c.outcome.value == "pass" for v in clean.values() for c in v.values()), clean

    real = ALL_MASK_ATTENTION_FUNCTIONS["sdpa"]

    def inverted_sdpa_mask(*args, **kwargs):
        return ~real(*args, **kwargs)

    monkeypatch.setitem(ALL_MASK_ATTENTION_FUNCTIONS._global_mapping, "sdpa", inverted_sdpa_mask)
    broken_mask = _verdicts(f"hf:{model}", only)[f"hf:{model}[sdpa]"]["padding_right"]
    assert broken_mask.outcome.value == "fail" and "→ sdpa_mask" in broken_mask.detail
    monkeypatch.setitem(ALL_MASK_ATTENTION_FUNCTIONS._global_mapping, "sdpa", real)

    monkeypatch.setattr(loaded.attention_modules[0], "scaling", 1.0)
    wrong_scale = _verdicts(f"hf:{model}", only)
    for impl in ("eager", "sdpa"):
        assert wrong_scale[f"hf:{model}[{impl}]"]["scale"].outcome.value == "fail"
        assert "1/√d is missing" in wrong_scale[f"hf:{model}[{impl}]"]["scale"].detail
        assert wrong_scale[f"hf:{model}[{impl}]"]["padding_right"].outcome.value == "pass"  # masks judged at τ


def test_hf_decoder_decodes_with_its_cache_like_recomputation(capsys):
    code, out, _ = run(capsys, "hf:smollm2", "--json", "--only", "cached_decode,decode_alignment")
    data = json.loads(out)
    for t in data["targets"]:
        by = {c["name"]: c for c in t["checks"]}
        assert by["cached_decode"]["outcome"] == "pass" and by["decode_alignment"]["outcome"] == "pass"
    assert code == 0


def test_causal_decoders_from_the_cli(tmp_path, monkeypatch, capsys):
    """A decoder causal by nature (no mask argument): --convention causal; one that takes a mask but only a
    causal one: --mask-family causal, judged on every check with a causal mask (none left n/a); the first
    refused under --convention causal names the flag that fits it."""
    (tmp_path / "decoders.py").write_text(
        "import torch\n"
        "from attnroute.check import Unsupported\n"
        "def natural(q, k, v):\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,"
        " enable_gqa=q.shape[1] != k.shape[1])\n"
        "def needs_mask(q, k, v, attn_mask=None):\n"
        "    if attn_mask is None:\n"
        "        raise Unsupported('this decoder always takes its causal mask')\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,"
        " enable_gqa=q.shape[1] != k.shape[1])\n"
    )
    monkeypatch.chdir(tmp_path)
    try:
        assert main(["check", "decoders:natural", "--convention", "causal"]) == 1  # top-left is_causal: decode fails
        out = capsys.readouterr().out
        assert "decode_alignment: Tq=1" in out and "aligned top-left" in out
        assert main(["check", "decoders:needs_mask", "--mask-family", "causal", "--json", "-"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["counts"]["n/a"] == 0 and data["counts"]["pass"] >= 40
        assert main(["check", "decoders:needs_mask", "--convention", "causal"]) == 2
        assert "--mask-family causal" in capsys.readouterr().err
        with pytest.raises(SystemExit) as bad:  # argparse's own refusal: exit 2, the choices named
            main(["check", "decoders:natural", "--mask-family", "sideways"])
        assert bad.value.code == 2 and "choose from 'any', 'causal', 'bidirectional'" in capsys.readouterr().err
    finally:
        sys.modules.pop("decoders", None)
    help_text = (
        __import__("subprocess")
        .run([sys.executable, "-m", "attnroute", "check", "--help"], capture_output=True, text=True)
        .stdout
    )
    help_text = " ".join(help_text.split())  # argparse wraps its lines
    assert "causal (the target is causal by nature" in help_text and "--mask-family" in help_text
    assert "--softcap" in help_text and "cap·tanh(s/cap)" in help_text


def test_softcap_from_the_cli(capsys, tmp_path, monkeypatch):
    (tmp_path / "capped.py").write_text(
        "import torch\n"
        "def gemma(q, k, v, attn_mask=None):\n"
        "    s = q @ k.repeat_interleave(q.shape[1] // k.shape[1], 1).transpose(-1, -2) * q.shape[-1] ** -0.5\n"
        "    s = 2.0 * torch.tanh(s / 2.0)\n"
        "    s = s if attn_mask is None else s.masked_fill(~attn_mask, float('-inf'))\n"
        "    w = torch.softmax(s.float(), -1).nan_to_num(0.0).to(q.dtype)\n"
        "    return w @ v.repeat_interleave(q.shape[1] // v.shape[1], 1)\n"
    )
    monkeypatch.chdir(tmp_path)
    try:
        code, out, _ = run(capsys, "capped:gemma", "--softcap", "2", "--only", "scale,causal,padding_right")
        assert code == 0, out
        code, _, err = run(capsys, "capped:gemma", "--softcap", "0")
        assert code == 2 and "softcap must be a positive finite number" in err and len(err.strip().splitlines()) == 1
    finally:
        sys.modules.pop("capped", None)
