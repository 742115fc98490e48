"""A norm's form (LayerNorm or RMSNorm, w or 1 + w) is read from what it computed, and in half precision the
closest form wins: a wrong form can come within the dtype's rounding, the right one comes closer."""

from __future__ import annotations

import pytest
import torch

from attnroute.engine.tolerance import rounding, split_tolerance
from attnroute.read.circuits.layout import _same
from attnroute.read.ground.norms import _LAST, norm_form


class RMS(torch.nn.Module):
    """RMSNorm as Llama computes it: σ in float32, the product in the model's dtype."""

    def __init__(self, d: int, dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(1 + 0.1 * torch.randn(d, generator=torch.Generator().manual_seed(1)))
        self.weight.data = self.weight.data.to(dtype)
        self.variance_epsilon = 1e-6

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_an_rmsnorm_of_a_wide_stream_is_read_as_an_rmsnorm_in_every_dtype(dtype):
    """At d = 4096 a stream's mean is ~1/64 of its σ: a LayerNorm's output misses the RMSNorm's by less than
    bfloat16's rounding, so the first form within tolerance (LayerNorm is tried first) was the wrong one."""
    _LAST.clear()
    norm = RMS(4096, dtype)
    x = (torch.randn(2, 5, 4096, generator=torch.Generator().manual_seed(0)) + 0.01).to(dtype)
    form = norm_form(norm, x, norm(x))
    assert form is not None and not form.centred
    got = form.scale * form.c / form.sigma + form.bias
    assert float((got - norm(x).float()).abs().max()) <= rounding(dtype) * float(norm(x).abs().max())


def test_a_norm_that_no_form_reproduces_is_refused():
    _LAST.clear()
    x = torch.randn(2, 5, 64)
    assert norm_form(RMS(64, torch.float32), x, torch.tanh(x)) is None


def test_a_small_write_read_back_from_a_large_stream_is_matched_element_by_element():
    """SmolLM2's bfloat16 stream reaches 764 in one dimension: measured against that size a norm's output
    passed for an MLP's write; element by element, the write matches and the norm's output does not."""
    g = torch.Generator().manual_seed(0)
    x_mid = torch.randn(1, 4, 64, generator=g)
    x_mid[..., 7] = 764.0
    write = 0.3 * torch.randn(1, 4, 64, generator=g)
    x_mid, write = x_mid.bfloat16(), write.bfloat16()
    x_out = x_mid + write  # rounded as the model rounds its residual add
    read_back = x_out - x_mid
    other = write + 0.2 * torch.randn(1, 4, 64, generator=g).bfloat16()  # a module whose output is close by
    assert _same(write, read_back, x_out.abs()) and not _same(other, read_back, x_out.abs())
    assert _same(other, read_back, float(x_out.abs().max()))  # the one size for all: the wrong module passes


def test_tolerances_are_stated_for_every_dtype_a_model_computes_in_and_refused_otherwise():
    for of in (rounding, split_tolerance):
        assert of(torch.float32) < of(torch.float16) < of(torch.bfloat16)
    assert rounding(torch.int64) == rounding(torch.float32)  # integers are exact
    with pytest.raises(ValueError, match="float8"):
        split_tolerance(torch.float8_e4m3fn)
