"""Bad input: a ValueError naming the tensors, the expected and the actual shapes."""

import pytest
import torch

import attnroute as ar

from .helpers import qkv


def test_head_dim_mismatch_names_both_tensors():
    q, k, v = qkv(1, 2, 2, 3, 4, 8)
    with pytest.raises(ValueError, match=r"q \[1, 2, 3, 8\] has D=8, k \[1, 2, 4, 6\] has D=6"):
        ar.attend(q, k[..., :6], v)


def test_heads_not_divisible():
    q, k, v = qkv(1, 6, 4, 3, 4, 8)
    with pytest.raises(ValueError, match="H=6 must be a multiple of kv heads Hkv=4"):
        ar.attend(q, k, v)


def test_mask_that_does_not_broadcast():
    q, k, v = qkv(2, 2, 2, 3, 4, 8)
    with pytest.raises(ValueError, match=r"does not broadcast to \[B, H, Tq, Tk\] = \[2, 2, 3, 4\]: its Tq is 5"):
        ar.attend(q, k, v, torch.ones(5, 4, dtype=torch.bool))


def test_wrong_rank_and_types():
    q, k, v = qkv(1, 2, 2, 3, 4, 8)
    with pytest.raises(ValueError, match=r"q must be 4-D \[B, H, Tq, D\], got shape \[2, 3, 8\]"):
        ar.attend(q[0], k, v)
    with pytest.raises(ValueError, match="impl must be one of"):
        ar.attend(q, k, v, impl="flash")
    with pytest.raises(TypeError, match="mask must be None"):
        ar.attend(q, k, v, mask="causal")


def test_eager_refuses_over_budget_and_names_blocked():
    q, k, v = qkv(1, 2, 2, 64, 64, 8)
    with pytest.raises(MemoryError, match="use impl='blocked'"):
        ar.attend(q, k, v, impl="eager", memory_budget=1000)
    out = ar.attend(q, k, v, impl="blocked", memory_budget=1000)
    torch.testing.assert_close(out, ar.attend(q, k, v, impl="eager"))
