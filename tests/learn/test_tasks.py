"""The synthetic tasks say what they mean: repeats repeat, regions name the right rows, targets follow the rule."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnroute.learn.tasks import TASK_TOKENS, LookupTask, MixtureTask, RepeatTask


def _segments(batch, i):
    """(a, b, S) of example i recovered from its regions."""
    first = torch.nonzero(batch.regions["first"][i]).flatten()
    repeat = torch.nonzero(batch.regions["repeat"][i]).flatten()
    return int(first[0]), int(repeat[0]), len(first) + 1


@given(length=st.integers(20, 80), min_len=st.integers(2, 10), extra=st.integers(0, 6), seed=st.integers(0, 99))
def test_repeat_task_repeats_at_a_per_example_offset(length, min_len, extra, seed):
    max_len = min(min_len + extra, length // 2)
    if max_len < min_len:
        return
    task = RepeatTask(vocab=50, length=length, min_len=min_len, max_len=max_len)
    b = task.sample(16, torch.Generator().manual_seed(seed))
    assert b.inputs.shape == b.targets.shape == (16, length)
    assert torch.equal(b.inputs[:, 1:], b.targets[:, :-1])  # next-token targets
    for i in range(16):
        a, start, S = _segments(b, i)
        assert min_len <= S <= max_len and start >= a + S and start + S <= length
        assert torch.equal(b.inputs[i, start : start + S], b.inputs[i, a : a + S])
        rows = torch.nonzero(b.regions["repeat"][i]).flatten()
        # a repeat row's target is the token after the earlier copy: the induction answer
        assert torch.equal(b.targets[i, rows], b.inputs[i, rows - (start - a) + 1])


def test_fixed_offset_puts_every_copy_in_the_same_place():
    b = RepeatTask(length=48, min_len=8, max_len=24, fixed_offset=24).sample(64, torch.Generator().manual_seed(0))
    starts = {_segments(b, i)[:2] for i in range(64)}
    assert starts == {(0, 24)}


def test_offsets_vary_without_fixed_offset():
    b = RepeatTask(length=48, min_len=8, max_len=24).sample(64, torch.Generator().manual_seed(0))
    assert len({_segments(b, i)[1] - _segments(b, i)[0] for i in range(64)}) > 10


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(length=30, min_len=8, max_len=20), "does not fit"),
        (dict(min_len=1), "min_len"),
        (dict(length=48, max_len=24, fixed_offset=10), "overlap"),
    ],
)
def test_bad_repeat_settings_say_what_to_change(kw, words):
    with pytest.raises(ValueError, match=words):
        RepeatTask(**kw)


def test_lookup_targets_follow_the_rule():
    g = torch.Generator().manual_seed(0)
    perm = LookupTask(vocab=16, length=10, kind="permutation")
    b = perm.sample(8, g)
    assert torch.equal(b.targets[:, 1:], perm.rule()[b.inputs[:, :-1]]) and not b.loss_rows[:, 0].any()
    assert sorted(perm.rule().tolist()) == list(range(16))
    table = LookupTask(vocab=16, length=10, kind="table")
    b = table.sample(8, g)
    assert torch.equal(b.targets[:, 1:], table.rule()[b.inputs[:, :-1], b.inputs[:, 1:]])
    with pytest.raises(ValueError, match="permutation"):
        LookupTask(kind="xor")


def test_mixture_tasks_and_weights():
    task = MixtureTask(length=32)
    b = task.sample(60, torch.Generator().manual_seed(0))
    V = task.vocab - len(TASK_TOKENS)
    kind = b.inputs[:, 0] - V
    assert set(kind.tolist()) == {0, 1, 2} and (b.inputs[:, 1:] < V).all()
    assert torch.allclose(b.row_weights().sum(1), torch.ones(60))  # every example weighs the same
    for i in range(60):
        rows = torch.nonzero(b.loss_rows[i]).flatten()
        k = TASK_TOKENS[int(kind[i])]
        assert b.regions[k][i].sum() == len(rows) > 0
        if k == "previous":
            assert torch.equal(b.targets[i, rows], b.inputs[i, rows - 1])
        else:  # copy and induction: the next token, which repeats an earlier one
            assert torch.equal(b.targets[i, rows], b.inputs[i, rows + 1])
        if k == "copy":
            h = (task.length - 1) // 2
            assert torch.equal(b.inputs[i, 1 : 1 + h], b.inputs[i, 1 + h : 1 + 2 * h])
