"""What ranks send each other travels as tensors of bytes — JSON and safetensors, never a pickle — and comes
back as it went (ground/wire.py)."""

import math

import numpy as np
import pytest
import torch

from attnroute.read.ground import wire


def test_every_kind_of_value_a_verb_gathers_comes_back_as_it_went():
    value = {
        "state": {"m.n": np.arange(6.0).reshape(2, 3), "counters": np.array([3, 1700], dtype=np.int64)},
        "reasons": ["rank 1: a line", None],
        "floats": [0.5, float("nan"), float("inf")],
        "sums": (7, 3, [torch.ones(2, 3, dtype=torch.float64), torch.full((2,), 1.5, dtype=torch.bfloat16)]),
        "dtypes": [torch.float32, torch.bfloat16],
        "scalar": np.float64(2.5),
        "flag": True,
    }
    back = wire.decode(wire.encode(value))
    assert np.array_equal(back["state"]["m.n"], value["state"]["m.n"])
    assert back["state"]["counters"].dtype == np.int64 and back["state"]["counters"].tolist() == [3, 1700]
    assert back["reasons"] == ["rank 1: a line", None] and back["flag"] is True and back["scalar"] == 2.5
    assert back["floats"][0] == 0.5 and math.isnan(back["floats"][1]) and back["floats"][2] == math.inf
    n, length, tensors = back["sums"]
    assert (n, length) == (7, 3) and torch.equal(tensors[0], value["sums"][2][0])
    assert tensors[1].dtype == torch.bfloat16 and torch.equal(tensors[1], value["sums"][2][1])
    assert back["dtypes"] == [torch.float32, torch.bfloat16]


def test_no_pickle_on_the_wire():
    data = wire.encode({"a": np.zeros(3)})
    assert b"\x80\x04" not in data[:2] and b"numpy" not in data  # JSON skeleton + safetensors, no pickle opcodes


def test_a_value_it_cannot_carry_is_said_by_type():
    with pytest.raises(TypeError, match="cannot carry a object"):
        wire.encode(object())


def test_one_rank_needs_no_collective():
    marker = object()
    assert wire.gather(marker, 1)[0] is marker
