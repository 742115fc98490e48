"""`attnroute cost kv`: exact bytes, the 70B example, bad input."""

import json

import pytest

from attnroute.cli import main
from attnroute.cost.kv import KVSpec


def kv(capsys, *argv):
    code = main(["cost", "kv", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_70b_example_exactly(capsys):
    code, out, _ = kv(
        capsys,
        "--layers",
        "80",
        "--heads",
        "64",
        "--head-dim",
        "128",
        "--dtype",
        "fp16",
        "--context",
        "128000",
        "--json",
    )
    r = json.loads(out)
    assert code == 0
    assert r["bytes_per_layer_per_token"] == 32_768 and r["bytes_per_token"] == 2_621_440
    assert r["cache_bytes"] == 335_544_320_000  # 335.5 GB = 312.5 GiB
    assert r["cache_bytes"] / 2**30 == 312.5
    # the usual "327 GB": 2,621,440 B / 1024 = 2,560 KiB, read as 2.56 MB, × 128,000
    assert r["bytes_per_token"] / 1024 / 1000 * 128_000 / 1000 == pytest.approx(327.68)  # "GB"
    _, out, _ = kv(
        capsys,
        "--layers",
        "80",
        "--heads",
        "64",
        "--kv-heads",
        "8",
        "--head-dim",
        "128",
        "--context",
        "128000",
        "--json",
    )
    assert json.loads(out)["cache_bytes"] * 8 == r["cache_bytes"]  # grouped-query: 8× less


def test_mqa_window_and_table(capsys):
    assert KVSpec(2, 1, 64, "int8", window=100).cache_bytes(1000, batch=3) == 3 * 100 * 2 * 2 * 64
    code, out, _ = kv(capsys, "--layers", "2", "--heads", "4", "--kv-heads", "1", "--head-dim", "8")
    assert code == 0 and "per layer per token" in out


def test_bundled_model_and_config_json(capsys, tmp_path):
    code, out, _ = kv(capsys, "--model", "smollm2", "--dtype", "fp32", "--context", "8192", "--json")
    r = json.loads(out)
    assert code == 0 and r["bytes_per_token"] == 2 * 30 * 3 * 64 * 4 and r["weight_bytes"] > 0
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps({"num_hidden_layers": 4, "num_attention_heads": 8, "hidden_size": 256, "num_key_value_heads": 2})
    )
    code, out, _ = kv(capsys, "--model", str(cfg), "--json")
    assert json.loads(out)["bytes_per_token"] == 4 * 2 * 2 * 32 * 2


@pytest.mark.parametrize(
    "argv,msg",
    [
        (["--layers", "0", "--heads", "4", "--head-dim", "8"], "--layers must be a positive integer"),
        (["--layers", "2", "--heads", "6", "--kv-heads", "4", "--head-dim", "8"], "must be a multiple of --kv-heads"),
        (["--layers", "2", "--heads", "4", "--head-dim", "8", "--dtype", "fp4"], "unknown --dtype 'fp4'"),
        (["--layers", "2"], "give --model"),
    ],
)
def test_bad_input_names_the_field(capsys, argv, msg):
    code, _, err = kv(capsys, *argv)
    assert code == 2 and msg in err


def test_config_missing_fields(capsys, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"num_attention_heads": 8}))
    code, _, err = kv(capsys, "--model", str(cfg))
    assert code == 2 and "'num_hidden_layers'" in err
