"""The battery: no false pass, no false alarm, one root cause named per broken implementation."""

import pytest
import torch

import attnroute as ar
from attnroute.check import CHECKS, Outcome, Unsupported

from . import broken

BROKEN = {  # implementation -> a check that must fail, and words its detail must contain
    broken.inverted_mask: ("causal", "inverted"),
    broken.causal_sees_next: ("causal", "also sees the next key"),
    broken.top_left_causal: ("decode_alignment", "top-left"),
    broken.ignores_padding: ("padding_right", "padding position"),
    broken.batch_coupled: ("batch_independence", "alone differs"),
    broken.window_plus_one: ("sliding_window", "W+1 window convention"),
    broken.ignores_documents: ("document", "another document"),
    broken.tiled_heads: ("grouped_heads", "tiling"),
    broken.no_scale: ("scale", "1/√d is missing"),
    broken.scale_after_softmax: ("scale", "after the softmax"),
    broken.softmax_over_queries: ("normalization_axis", "over queries"),
    broken.naive_softmax: ("empty_rows", "NaN"),
    broken.overflowing_sentinel: ("empty_rows_fp16", "NaN"),
    broken.crashes_in_fp16: ("causal_fp16", "raised RuntimeError"),
    broken.always_causal: ("padding_right", "ignores the mask it is given (always causal)"),
    broken.none_means_causal: ("normalization_axis", "None means causal"),
    broken.bool_mask_added: ("causal", "bool mask is added to the scores"),
    broken.divides_by_sqrt_dv: ("scale_dv", "divided by √Dv"),
    broken.finite_sentinel: ("sentinel_overrun", "finite sentinel"),
    broken.raises_on_masks: ("causal", "raised RuntimeError: masks are not supported"),
    broken.wrong_shape: ("causal", "returned shape"),
    broken.mutates_inputs: ("inputs_untouched", "changed its input 'q' in place"),
}


@pytest.mark.parametrize("fn", list(BROKEN), ids=lambda f: f.__name__)
def test_each_broken_implementation_is_caught_and_named(fn):
    name, words = BROKEN[fn]
    report = ar.check(fn)
    result = next(c for c in report.checks if c.name == name)
    assert result.outcome is Outcome.FAIL, report.summary()
    assert words in result.detail, result.detail
    assert not report.passed


def test_the_mask_is_judged_at_the_targets_own_temperature():
    """A target with no 1/√d fails `scale` once; its (correct) masks still pass."""
    report = ar.check(broken.no_scale)
    by = {c.name: c.outcome for c in report.checks}
    assert by["scale"] is Outcome.FAIL
    assert all(by[n] is Outcome.PASS for n in ("causal", "padding_right", "document", "sliding_window"))


def test_a_declared_scale_makes_a_scale_one_target_pass():
    report = ar.check(broken.no_scale, scale=1.0, skip=[n for n in CHECKS if n.startswith("scale_dv")])
    assert report.passed, report.summary()


def test_causal_only_code_fits_scale_over_visible_keys():
    """A causal-only target's structural zeros do not bend the fitted temperature."""
    report = ar.check(broken.always_causal, only=["scale"])
    assert report.checks[0].outcome is Outcome.FAIL or "1.0000" in report.checks[0].detail
    detail = ar.check(broken.none_means_causal, only=["scale"]).checks[0].detail
    assert "1.00" in detail, detail


def test_a_correct_implementation_raises_no_false_alarm():
    report = ar.check(broken.correct, strict=True)
    assert report.passed, report.summary()
    assert len(report.checks) == len(CHECKS) and report.count(Outcome.PASS) == len(CHECKS)


def test_torch_sdpa_passes_with_hazards_and_strict_fails():
    def sdpa(q, k, v, attn_mask=None):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, enable_gqa=q.shape[1] != k.shape[1]
        )

    report = ar.check(sdpa)
    assert report.passed and report.count(Outcome.FAIL) == 0, report.summary()
    hazards = {c.name for c in report.checks if c.outcome is Outcome.HAZARD}
    assert hazards == {f"masked_{w}{d}" for w in ("keys", "values") for d in ("", "_fp16", "_bf16")}
    assert not ar.check(sdpa, strict=True).passed


def test_the_mha_convention_is_honoured():
    report = ar.check(broken.inverted_mask, convention="mha")
    assert report.passed, report.summary()


def test_unsupported_is_not_applicable_and_other_exceptions_fail():
    def no_gqa(q, k, v, attn_mask=None):
        if q.shape[1] != k.shape[1]:
            raise Unsupported("no grouped heads")
        return broken.correct(q, k, v, attn_mask)

    report = ar.check(no_gqa)
    gqa = next(c for c in report.checks if c.name == "grouped_heads")
    assert gqa.outcome is Outcome.NA and "no grouped heads" in gqa.detail and report.passed

    def gqa_value_error(q, k, v, attn_mask=None):
        if q.shape[1] != k.shape[1]:
            raise ValueError("no grouped heads")
        return broken.correct(q, k, v, attn_mask)

    report = ar.check(gqa_value_error)  # raised in every dtype, everything else passes: a capability it lacks
    gqa = next(c for c in report.checks if c.name == "grouped_heads")
    assert report.passed and gqa.outcome is Outcome.NA and "does not accept grouped heads" in gqa.detail
    assert not ar.check(gqa_value_error, strict=True).passed  # --strict: an unaccepted case fails


@pytest.mark.parametrize(
    "fn",
    [broken.raises_always, broken.raises_on_masks, broken.wrong_shape, broken.crashes_in_fp16],
    ids=lambda f: f.__name__,
)
def test_no_crash_counts_as_a_pass(fn):
    report = ar.check(fn)
    assert not report.passed
    skipped_real_failures = [c for c in report.checks if c.outcome is Outcome.FAIL]
    assert ar.check(fn, skip=[c.name for c in skipped_real_failures[:3]]).passed is False


def test_a_hanging_target_fails_after_the_timeout_and_is_not_called_again():
    report = ar.check(broken.hangs, only=["causal", "scale", "padding_right"], timeout=0.5)
    assert [c.outcome for c in report.checks] == [Outcome.FAIL] * 3
    assert "did not return within 0.5 s" in report.checks[0].detail
    assert "hung earlier" in report.checks[1].detail
    assert report.called_at_all and report.calls_reached == 1  # it took the call; only its answer never came


@pytest.mark.parametrize(
    "fn, reached",
    [(broken.raises_always, False), (broken.wrong_shape, True), (broken.raises_on_masks, True), (broken.correct, True)],
    ids=lambda x: getattr(x, "__name__", str(x)),
)
def test_called_at_all_counts_calls_that_reached_the_target(fn, reached):
    """A target that raises at every call was never reached (the CLI refuses it, exit 2); one that
    answered wrongly was reached (its failures are findings)."""
    report = ar.check(fn)
    assert report.called_at_all is reached
    assert (report.calls_reached > 0) is reached


def test_full_shape_only_targets_are_checked_with_full_masks_and_the_report_says_so():
    report = ar.check(broken.full_shape_masks_only)
    assert report.passed, report.summary()
    assert report.mask_shapes == ["full"]
    assert ar.check(broken.correct).mask_shapes == ["minimal"]


def test_mutation_is_caught_and_the_reference_uses_pristine_inputs():
    report = ar.check(broken.mutates_inputs, only=["scale", "causal"])
    by = {c.name: c for c in report.checks}
    assert by["scale"].outcome is Outcome.FAIL  # the doubled temperature is seen, not hidden
    assert by["inputs_untouched"].outcome is Outcome.FAIL


def test_window_hint_only_when_counts_are_off_by_one():
    def window_five(q, k, v, attn_mask=None):  # sees 5 keys at W = 3: a different bug, no convention hint
        Tq, Tk = q.shape[2], k.shape[2]
        if attn_mask is not None and Tq == Tk == 10 and not bool(attn_mask.all()):
            attn_mask = ar.sliding_window(5).materialize(1, 1, Tq, Tk)
        return broken.correct(q, k, v, attn_mask)

    detail = next(c for c in ar.check(window_five, only=["sliding_window"]).checks).detail
    assert "outside its window" in detail and "convention" not in detail


def test_report_says_when_most_checks_do_not_apply():
    def only_causal(q, k, v):
        return broken.correct(q, k, v, ar.causal().materialize(1, 1, q.shape[2], k.shape[2]))

    report = ar.check(only_causal, convention="causal")
    assert "not applicable" in report.summary().splitlines()[0]
    assert report.count(Outcome.NA) >= len(CHECKS) / 2 and report.count(Outcome.FAIL) == 0


# ------------------------------------------------------------------ capability versus bug


def _plain_sdpa(q, k, v, attn_mask=None):  # no enable_gqa: grouped heads raise, as in timm's fused path
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)


def _self_attention_only(q, k, v, attn_mask=None):
    assert q.shape[2] == k.shape[2], "self-attention: as many queries as keys"
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, enable_gqa=q.shape[1] != k.shape[1]
    )


def _raises_in_fp16_only(q, k, v, attn_mask=None):
    if q.dtype == torch.float16 and q.shape[1] != k.shape[1]:
        raise RuntimeError("no fp16 kernel for grouped heads")
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, enable_gqa=q.shape[1] != k.shape[1]
    )


def test_a_shape_the_target_cannot_take_is_na_and_named_strict_fails_it():
    r = ar.check(_plain_sdpa, "sdpa")
    by = {c.name: c for c in r.checks}
    for name in ("grouped_heads", "grouped_heads_fp16", "grouped_heads_bf16"):
        assert by[name].outcome.value == "n/a"
        assert by[name].detail.startswith("the target does not accept grouped heads (H = 6, Hkv = 2): RuntimeError")
    assert r.passed and r.count(Outcome.NA) == 3 and "3 n/a" in r.headline()
    strict = ar.check(_plain_sdpa, "sdpa", strict=True)
    assert (
        not strict.passed
        and "--strict: an unaccepted case fails" in {c.name: c for c in strict.checks}["grouped_heads"].detail
    )
    q = {c.name: c for c in ar.check(_self_attention_only, "sdpa").checks}
    assert q["q_longer_than_k"].outcome.value == "n/a" and "more queries than keys" in q["q_longer_than_k"].detail
    assert "AssertionError" in q["q_longer_than_k"].detail


def test_an_exception_in_one_dtype_only_stays_a_fail():
    by = {c.name: c for c in ar.check(_raises_in_fp16_only, "sdpa").checks}
    assert by["grouped_heads_fp16"].outcome.value == "fail" and by["grouped_heads"].outcome.value == "pass"


# ------------------------------------------------------------------ numerics: overflow named as overflow


def _naive_softmax(q, k, v, attn_mask=None):
    """exp then normalize, in the input dtype, without subtracting the row maximum (a shipped shortcut)."""
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf"))
    e = s.exp()
    return (e / e.sum(-1, keepdim=True)).nan_to_num(0.0) @ v


def _clamped_exp(q, k, v, attn_mask=None):
    """exp clamped below fp16's overflow (each term fits), still no maximum subtracted: the sum overflows."""
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf"))
    e = s.clamp(max=11.0).exp()
    return (e / e.sum(-1, keepdim=True)).nan_to_num(0.0) @ v


def test_a_softmax_without_its_maximum_is_named_overflow_in_its_dtype():
    by = {c.name: c for c in ar.check(_naive_softmax).checks}
    assert by["overflow_fp16"].outcome is Outcome.FAIL
    assert by["overflow_fp16"].detail.startswith("overflow in fp16: with visible logits near 50")
    assert "does not subtract the row maximum" in by["overflow_fp16"].detail
    assert by["causal_fp16"].outcome is Outcome.PASS  # ordinary logits: every mask check still passes
    assert by["overflow"].outcome is Outcome.FAIL and "exp(100) is beyond fp32" in by["overflow"].detail
    assert "a row of 64 keys at logit 10 sums past fp16's 65504 although each exp fits" in by["overflow_fp16"].detail
    long = {c.name: c for c in ar.check(_clamped_exp).checks}["overflow_fp16"]  # each exp fits: its sums do not
    assert long.outcome is Outcome.FAIL and "a row of 64 keys at logit 10 sums past fp16's 65504" in long.detail
    ok = {c.name: c for c in ar.check(broken.correct).checks}
    assert all(ok[f"overflow{d}"].outcome is Outcome.PASS for d in ("", "_fp16", "_bf16"))


def _additive(sentinel):
    def fn(q, k, v, attn_mask=None):
        add = (
            None if attn_mask is None else torch.zeros(attn_mask.shape, dtype=q.dtype).masked_fill(~attn_mask, sentinel)
        )
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=add, enable_gqa=q.shape[1] != k.shape[1]
        )

    return fn


def test_a_finite_mask_says_the_magnitude_it_gives_way_at():
    for sentinel, said in ((-1e4, "~1e+04"), (-1e6, "~1e+06")):
        r = {c.name: c for c in ar.check(_additive(sentinel)).checks}["masked_keys"]
        assert r.outcome is Outcome.FAIL and f"masked keys leak once a masked key's logit exceeds {said}" in r.detail


# ------------------------------------------------------------------ one mechanism per finding


def _flat_scores(q, k):
    B, H, Tq, D = q.shape
    kk = k.repeat_interleave(H // k.shape[1], 1)
    return (q @ kk.transpose(-1, -2) * D**-0.5).reshape(B * H, Tq, k.shape[2])


def _tiled(order):
    def fn(q, k, v, attn_mask=None):
        B, H, Tq, _ = q.shape
        Tk = k.shape[2]
        if order == "repeat":  # scores b-major (b·H + h), the mask tiled with .repeat(H, 1, 1)
            s = _flat_scores(q, k)
            m = None if attn_mask is None else attn_mask.expand(B, 1, Tq, Tk)[:, 0].repeat(H, 1, 1)
        else:  # scores heads-first (h·B + b), the mask with repeat_interleave
            s = _flat_scores(q, k).view(B, H, Tq, Tk).transpose(0, 1).reshape(H * B, Tq, Tk)
            m = None if attn_mask is None else attn_mask.expand(B, 1, Tq, Tk)[:, 0].repeat_interleave(H, 0)
        if m is not None:
            s = s.masked_fill(~m, float("-inf"))
        w = torch.softmax(s, -1).nan_to_num(0.0)
        w = w.view(B, H, Tq, Tk) if order == "repeat" else w.view(H, B, Tq, Tk).transpose(0, 1)
        return w @ v.repeat_interleave(H // v.shape[1], 1)

    return fn


def _chunked(q, k, v, attn_mask=None):
    """Batch × heads processed two at a time; the last, partial chunk is skipped (range(n // 2))."""
    B, H, Tq, D = q.shape
    G = H // k.shape[1]
    qf, kf = q.reshape(B * H, Tq, D), k.repeat_interleave(G, 1).reshape(B * H, -1, D)
    vf = v.repeat_interleave(G, 1).reshape(B * H, -1, v.shape[-1])
    m = None if attn_mask is None else attn_mask.expand(B, H, Tq, k.shape[2]).reshape(B * H, Tq, -1)
    out = torch.zeros(B * H, Tq, v.shape[-1], dtype=q.dtype)
    for i in range(B * H // 2):
        c = slice(2 * i, 2 * i + 2)
        out[c] = torch.nn.functional.scaled_dot_product_attention(
            qf[c], kf[c], vf[c], attn_mask=None if m is None else m[c]
        )
    return out.view(B, H, Tq, -1)


def _soft_capped_ignoring_the_mask(q, k, v, attn_mask=None):
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    s = 30.0 * torch.tanh(s / 30.0)  # a soft cap (Gemma 2 style), and no mask applied at all
    return torch.softmax(s, -1) @ v


def test_a_mask_tiled_over_batch_times_heads_is_named_in_both_orders():
    for order in ("repeat", "repeat_interleave"):
        r = {c.name: c for c in ar.check(_tiled(order)).checks}["padding_right"]
        assert r.outcome is Outcome.FAIL and "tiled over batch × heads" in r.detail, r.detail
        assert (".repeat" in r.detail) == (order == "repeat")


def test_a_chunked_loop_that_drops_the_last_chunk_is_caught_on_odd_batch_times_heads():
    r = {c.name: c for c in ar.check(_chunked).checks}["causal"]
    assert r.outcome is Outcome.FAIL and r.detail.startswith("1×3×7×7: ")
    assert "skips the last partial chunk" in r.detail and "B·H = 3" in r.detail


def _batch1_fast_path(q, k, v, attn_mask=None):
    """transformers' sdpa path in shape: at batch 1 (no padding) the mask is dropped and causality is left
    to SDPA's is_causal whenever Tq > 1 — top-left, wrong once keys are cached (Tq < Tk)."""
    if q.shape[0] == 1:
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=q.shape[2] > 1, enable_gqa=q.shape[1] != k.shape[1]
        )
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, enable_gqa=q.shape[1] != k.shape[1]
    )


def test_ties_are_broken_by_the_rows_that_separate_them():
    def top_left(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1]
        )

    r = {c.name: c for c in ar.check(top_left, "causal").checks}
    assert "aligned top-left" in r["q_longer_than_k"].detail and "never masked" not in r["q_longer_than_k"].detail
    fast = {c.name: c for c in ar.check(_batch1_fast_path).checks}["decode_alignment"]
    assert fast.detail.startswith("Tq=3, Tk=8, B=1, H=3: ") and "aligned top-left" in fast.detail, fast.detail


def test_no_exact_fit_still_names_the_closest_with_how_close():
    r = {c.name: c for c in ar.check(_soft_capped_ignoring_the_mask, skip=["scale"]).checks}["causal"]
    assert r.outcome is Outcome.FAIL and "most likely ignores the mask it is given (never masked)" in r.detail, r.detail
    assert "the tolerance is 1e-04" in r.detail


def test_sentinel_wording_only_when_a_sentinel_gives_way():
    def bool_added(q, k, v, attn_mask=None):
        s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
        s = s if attn_mask is None else s + attn_mask.to(s.dtype)
        return torch.softmax(s, -1) @ v

    added = {c.name: c for c in ar.check(bool_added).checks}
    assert (
        "not a sentinel" in added["sentinel_overrun"].detail
        and "finite sentinel" not in added["sentinel_overrun"].detail
    )
    assert "bool mask is added to the scores" in added["padding_right"].detail

    def filled(q, k, v, attn_mask=None):  # GPT-2's torch.where(mask, s, -1e4): the sentinel replaces the score
        s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
        s = s if attn_mask is None else s.masked_fill(~attn_mask, -1e4)
        return torch.softmax(s, -1) @ v

    sentinel = {c.name: c for c in ar.check(filled).checks}["sentinel_overrun"]
    assert "finite sentinel" in sentinel.detail and "at ordinary logits none" in sentinel.detail


# ------------------------------------------------------------------ soft caps, underflow, shapes that crash


def _capped(cap, after_mask=False):
    """cap·tanh(s/cap) on the scaled logits, before the mask (Gemma 2) or, the bug, after it."""

    def fn(q, k, v, attn_mask=None):
        k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], 1) for t in (k, v))
        s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
        if not after_mask:
            s = cap * torch.tanh(s / cap)
        if attn_mask is not None:
            s = s.masked_fill(~attn_mask, float("-inf"))
        if after_mask:
            s = cap * torch.tanh(s / cap)
        w = torch.softmax(s.float(), -1).nan_to_num(0.0).to(q.dtype)
        return w @ v

    return fn


@pytest.mark.parametrize("cap", [50.0, 2.0])  # 2: tanh far from linear, the fitted temperature must still hold
def test_a_declared_soft_cap_is_judged_exactly(cap):
    report = ar.check(_capped(cap), softcap=cap)
    assert report.count(Outcome.FAIL) == 0, report.summary()
    assert {c.name: c for c in report.checks}["scale"].outcome is Outcome.PASS
    undeclared = ar.check(_capped(2.0), only=["causal"])  # the cap is a real difference from plain softmax
    assert undeclared.count(Outcome.FAIL) == 1


@pytest.mark.parametrize("cap", [50.0, 2.0])
def test_an_undeclared_soft_cap_is_found_and_said_once(cap):
    """Like an off temperature: the scale check fits the cap, says it (with the flag to declare it), and
    every mask check is judged at the fitted cap — so the one finding is the cap, not 30 rows that differ."""
    by = {c.name: c for c in ar.check(_capped(cap)).checks}
    assert by["scale"].outcome is Outcome.FAIL and f"cap ≈ {cap:.3g} fits every weight" in by["scale"].detail
    assert f"--softcap {cap:.3g}" in by["scale"].detail
    fails = {n for n, c in by.items() if c.outcome is Outcome.FAIL}
    assert fails <= {"scale", "scale_fp16", "scale_bf16"}, {n: by[n].detail for n in fails}


def test_a_declared_soft_cap_the_target_does_not_apply_is_said_once():
    """--softcap 30 on a target capped at 50, and --softcap 50 on one not capped at all: the scale check
    says which cap fits (or that none does), and the mask checks are judged at the target's own."""
    for fn, declared, words in [
        (_capped(50.0), 30.0, "fit a soft cap ≈ 50, not the declared 30"),
        (broken.correct, 50.0, "the declared soft cap 50 does not fit"),
    ]:
        by = {c.name: c for c in ar.check(fn, softcap=declared).checks}
        assert by["scale"].outcome is Outcome.FAIL and words in by["scale"].detail, by["scale"].detail
        fails = {n for n, c in by.items() if c.outcome is Outcome.FAIL}
        assert fails <= {"scale", "scale_fp16", "scale_bf16"}, {n: by[n].detail for n in fails}


def test_a_soft_cap_after_the_mask_is_named():
    by = {c.name: c for c in ar.check(_capped(50.0, after_mask=True), softcap=50.0).checks}
    r = by["sentinel_overrun"]
    assert r.outcome is Outcome.FAIL and "the soft cap is applied after the mask" in r.detail, r.detail
    assert "finite sentinel" not in r.detail
    assert by["causal"].outcome is Outcome.PASS  # e^-50 leaks nothing at ordinary logits


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_a_soft_cap_must_be_positive_and_finite(bad):
    with pytest.raises(ar.InputError, match="softcap must be a positive finite number"):
        ar.check(broken.correct, softcap=bad)


def test_a_softmax_that_underflows_is_not_called_a_sentinel():
    r = {c.name: c for c in ar.check(_naive_softmax, only=["sentinel_overrun"]).checks}["sentinel_overrun"]
    assert r.outcome is Outcome.FAIL and "underflow" in r.detail and "sentinel (e.g." not in r.detail, r.detail
    assert "does not subtract the row maximum" in r.detail


def _crashes_at_batch_2_and_top_left_at_batch_1(q, k, v, attn_mask=None):
    if q.shape[0] > 1 and q.shape[2] < k.shape[2]:
        raise ValueError("non-broadcastable output operand")
    return (
        torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=q.shape[2] > 1 or k.shape[2] > 1, enable_gqa=q.shape[1] != k.shape[1]
        )
        if attn_mask is not None and not bool(attn_mask.all())
        else torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, enable_gqa=q.shape[1] != k.shape[1]
        )
    )


def test_a_shape_that_raises_does_not_hide_what_another_computes_wrong():
    r = {c.name: c for c in ar.check(_crashes_at_batch_2_and_top_left_at_batch_1).checks}["decode_alignment"]
    assert r.outcome is Outcome.FAIL and r.detail.startswith("Tq=3, Tk=8, B=1, H=3: "), r.detail
    assert "aligned top-left" in r.detail and "at Tq=1, Tk=8, B=2, H=2 the target raised ValueError" in r.detail


def test_near_ties_in_the_closest_fit_are_broken_by_every_row():
    """Without an exact fit (an undeclared soft cap, its scale check not run), top-left is_causal and 'never
    masked' fit the judged rows of Tq > Tk about as well; the rows that separate them name top-left."""

    def capped_top_left(q, k, v, attn_mask=None):
        s = 30.0 * torch.tanh(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 / 30.0)
        top_left = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
        return torch.softmax(s.masked_fill(~top_left, float("-inf")), -1) @ v

    r = {c.name: c for c in ar.check(capped_top_left, only=["q_longer_than_k"]).checks}["q_longer_than_k"]
    assert r.outcome is Outcome.FAIL and "most likely causal is aligned top-left" in r.detail, r.detail
