"""kv_decode: a decoder judged as it generates (prefill, steps of one query, a chunk after a cache), each
call given every cached key. Code that builds its own mask (the causal convention) declares its window and
sinks; a window or sinks forgotten for the cached keys fails, named."""

import math

import pytest
import torch

import attnroute as ar
from attnroute.check import Outcome, Unsupported
from attnroute.errors import InputError

W, S = 3, 2


def _own_mask(Tq, Tk, window, sinks, cached_too=True):
    """A decoder's own bottom-right mask; cached_too=False forgets the window for cached keys (the bug)."""
    qpos = torch.arange(Tq)[:, None] + (Tk - Tq)
    kpos = torch.arange(Tk)[None, :]
    keep = kpos <= qpos
    if window is not None:
        inside = (kpos > qpos - window) | (kpos < sinks)
        if not cached_too:
            inside = inside | (kpos < Tk - Tq)  # every cached key stays visible
        keep = keep & inside
    return keep


def decoder(window=None, sinks=0, cached_too=True):
    """Attention that takes no mask and applies its own causal window (the causal convention)."""

    def fn(q, k, v):
        if q.shape[2] > k.shape[2]:
            raise Unsupported("a decoder's queries are the last of its keys")
        G = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        keep = _own_mask(q.shape[2], k.shape[2], window, sinks, cached_too)
        return torch.softmax(s.float().masked_fill(~keep, float("-inf")), -1).to(q.dtype) @ v

    return fn


def outcome(report, name):
    return next(c for c in report.checks if c.name == name)


@pytest.mark.parametrize("sinks", [0, S])
def test_a_decoder_that_windows_its_cached_keys_passes(sinks):
    report = ar.check(decoder(W, sinks), convention="causal", window=W, sinks=sinks)
    c = outcome(report, "kv_decode")
    assert c.outcome is Outcome.PASS and f"window of {W} keys" in c.detail and "chunk Tq=3, Tk=12" in c.detail
    assert report.passed, report.summary()


@pytest.mark.parametrize("sinks", [0, S])
def test_a_window_forgotten_for_cached_keys_fails_named(sinks):
    report = ar.check(decoder(W, sinks, cached_too=False), convention="causal", window=W, sinks=sinks)
    c = outcome(report, "kv_decode")
    assert c.outcome is Outcome.FAIL and c.detail.startswith("step Tq=1, Tk=7")
    if not sinks:  # with sinks the unwindowed mask is not the whole story, but the leaked key is still named
        assert "the window is not applied to cached keys" in c.detail
    assert "outside its window" in c.detail
    assert not report.passed


def test_sinks_forgotten_are_caught():
    report = ar.check(decoder(W, 0), convention="causal", window=W, sinks=S)
    assert outcome(report, "kv_decode").outcome is Outcome.FAIL


def test_a_causal_decoder_without_a_window_decodes_causal_and_a_top_left_one_fails():
    ok = ar.check(decoder(), convention="causal")
    assert outcome(ok, "kv_decode").outcome is Outcome.PASS and "(causal)" in outcome(ok, "kv_decode").detail

    def top_left(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    bad = outcome(ar.check(top_left, convention="causal"), "kv_decode")
    assert bad.outcome is Outcome.FAIL and "top-left" in bad.detail


def test_a_mask_taking_target_decodes_with_the_battery_window():
    from tests.check import broken

    c = outcome(ar.check(broken.correct), "kv_decode")
    assert c.outcome is Outcome.PASS and "window of 3 keys" in c.detail


def test_an_encoder_does_not_decode():
    c = outcome(ar.check(_encoder(), mask_family="bidirectional"), "kv_decode")
    assert c.outcome is Outcome.NA and "encoder" in c.detail


def _encoder():
    from tests.check import broken

    return broken.correct


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"sinks": 2}, "sinks"),
        ({"window": 0}, "window"),
        ({"window": True}, "window"),
        ({"window": 3, "sinks": -1}, "sinks"),
    ],
)
def test_window_and_sinks_are_validated(fields, field):
    with pytest.raises(InputError) as e:
        ar.CheckSettings(target="torch.sdpa", **fields)
    assert e.value.field == field


def test_the_command_line_takes_window_and_sinks(tmp_path, capsys):
    from attnroute.cli import main

    code = main(["check", "torch.sdpa", "--sinks", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "give --window W too" in err and "Traceback" not in err
