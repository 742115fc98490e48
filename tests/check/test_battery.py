"""The battery catches each deliberately broken implementation and raises no false alarm."""

import pytest

import attnroute as ar
from attnroute.check.battery import CHECKS

from . import broken

BROKEN = {  # implementation -> a check that must fail, and words its detail must contain
    broken.inverted_mask: ("causal", "inverted"),
    broken.causal_sees_next: ("causal", "also sees the next key"),
    broken.top_left_causal: ("decode_alignment", "top-left"),
    broken.ignores_padding: ("padding_right", "padding position"),
    broken.batch_coupled: ("batch_independence", "alone differs"),
    broken.window_plus_one: ("sliding_window", "outside its window"),
    broken.ignores_documents: ("document", "another document"),
    broken.tiled_heads: ("grouped_heads", "tiling"),
    broken.no_scale: ("scale", "1/√d is missing"),
    broken.scale_after_softmax: ("scale", "after the softmax"),
    broken.softmax_over_queries: ("normalization_axis", "over queries"),
    broken.naive_softmax: ("empty_rows", "NaN"),
    broken.leaks_masked_values: ("masked_garbage", "reached its real rows"),
    broken.overflowing_sentinel: ("empty_rows_fp16", "NaN"),
    broken.mha_convention_in_sdpa_slot: ("causal", "inverted"),
}


@pytest.mark.parametrize("fn", list(BROKEN), ids=lambda f: f.__name__)
def test_each_broken_implementation_is_caught_and_named(fn):
    name, words = BROKEN[fn]
    report = ar.check(fn)
    result = next(c for c in report.checks if c.name == name)
    assert not result.passed and not result.skipped, report.summary()
    assert words in result.detail, result.detail
    assert not report.passed


def test_causal_failure_names_the_row_and_the_future_key():
    report = ar.check(broken.causal_sees_next, only=["causal"])
    assert "query" in report.checks[0].detail and "a future position" in report.checks[0].detail


@pytest.mark.parametrize("fn", [broken.correct], ids=["correct"])
def test_a_correct_implementation_raises_no_false_alarm(fn):
    report = ar.check(fn)
    assert report.passed, report.summary()
    assert len(report.checks) == len(CHECKS)


def test_the_mha_convention_is_honoured():
    # the same MHA-style function passes when it declares its convention
    report = ar.check(
        lambda q, k, v, attn_mask=None: broken.correct(q, k, v, None if attn_mask is None else ~attn_mask),
        convention="mha",
    )
    assert report.passed, report.summary()


def test_rejected_shapes_are_skipped_not_failed():
    def no_gqa(q, k, v, attn_mask=None):
        if q.shape[1] != k.shape[1]:
            raise ValueError("no grouped heads")
        return broken.correct(q, k, v, attn_mask)

    report = ar.check(no_gqa)
    gqa = next(c for c in report.checks if c.name == "grouped_heads")
    assert gqa.skipped and "no grouped heads" in gqa.detail and report.passed


def test_attnroute_backends_pass_and_torch_sdpa_is_checked():
    for impl in ("eager", "blocked", "sdpa"):
        report = ar.check(lambda q, k, v, attn_mask=None, impl=impl: ar.attend(q, k, v, attn_mask, impl=impl))
        assert report.passed, report.summary()
    import torch

    report = ar.check(
        lambda q, k, v, attn_mask=None: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, enable_gqa=q.shape[1] != k.shape[1]
        )
    )
    # a real finding about torch (pytorch #101967): NaN in masked values leaks through SDPA's matmul
    assert [c.name for c in report.failed] == ["masked_garbage", "masked_garbage_fp16", "masked_garbage_bf16"]
