"""KnockoutEdges: attention knockout renormalizes each row over what stays visible, touches nothing
else, and agrees between eager and blocked."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import attnroute as ar

from .helpers import qkv


def test_knocking_out_nothing_changes_nothing_bit_for_bit():
    q, k, v = qkv(2, 4, 2, 6, 6, 8)
    plain = ar.attend(q, k, v, ar.causal(), impl="eager")
    for iv in (ar.KnockoutEdges([], [1, 2]), ar.KnockoutEdges([3], []), ar.KnockoutEdges([1], [4])):  # 1 never sees 4
        assert torch.equal(ar.attend(q, k, v, ar.causal(), impl="eager", interventions=[iv]), plain)


def test_renormalization_matches_a_hand_computation():
    q, k, v = qkv(1, 2, 2, 5, 5, 4, seed=3)
    iv = ar.KnockoutEdges(queries=[4], keys=[0, 2], heads=[1])
    _, tr = ar.attend(q, k, v, ar.causal(), impl="eager", interventions=[iv], return_trace=True)
    s = (q[0, 1, 4] @ k[0, 1].T) / 2.0  # head 1, row 4, scale 1/√4
    keep = torch.tensor([False, True, False, True, True])
    hand = torch.zeros(5)
    hand[keep] = torch.softmax(s[keep], 0)
    assert torch.allclose(tr.weights[0, 1, 4], hand, atol=1e-6)
    _, clean = ar.attend(q, k, v, ar.causal(), impl="eager", return_trace=True)
    assert torch.equal(tr.weights[0, 0], clean.weights[0, 0])  # head 0 untouched
    assert torch.equal(tr.weights[0, 1, :4], clean.weights[0, 1, :4])  # other rows untouched


def test_a_row_that_loses_every_key_returns_zeros():
    q, k, v = qkv(1, 2, 2, 4, 4, 4)
    out = ar.attend(q, k, v, ar.causal(), impl="eager", interventions=[ar.KnockoutEdges([2], [0, 1, 2])])
    assert torch.equal(out[:, :, 2], torch.zeros_like(out[:, :, 2])) and torch.isfinite(out).all()


@given(
    Tq=st.integers(1, 9),
    extra=st.integers(0, 4),
    seed=st.integers(0, 999),
    n_q=st.integers(0, 4),
    n_k=st.integers(0, 4),
)
def test_blocked_equals_eager_under_knockout(Tq, extra, seed, n_q, n_k):
    Tk = Tq + extra
    q, k, v = qkv(1, 4, 2, Tq, Tk, 8, seed=seed)
    g = torch.Generator().manual_seed(seed)
    queries = torch.randint(0, Tk, (n_q,), generator=g).tolist()
    keys = torch.randint(0, Tk, (n_k,), generator=g).tolist()
    iv = ar.KnockoutEdges(queries, keys, heads=[0, 3])
    a = ar.attend(q, k, v, ar.causal(), impl="eager", interventions=[iv])
    b = ar.attend(q, k, v, ar.causal(), impl="blocked", interventions=[iv], block_size=2)
    assert torch.allclose(a, b, atol=1e-6) and torch.isfinite(a).all()


@given(
    Tq=st.integers(1, 12),
    extra=st.integers(-3, 8),
    G=st.integers(1, 3),
    seed=st.integers(0, 999),
    n_q=st.integers(0, 4),
    n_k=st.integers(0, 4),
    kind=st.sampled_from(["causal", "padding", "none"]),
    by_row=st.booleans(),
)
def test_auto_runs_sdpa_and_the_touched_rows_and_equals_eager(Tq, extra, G, seed, n_q, n_k, kind, by_row):
    """A knockout changes only its query rows: impl='auto' runs SDPA for the layer and the stages on those rows
    (backends/rows.py) — equal to eager on every row (fp32), Tq ≠ Tk both ways, grouped heads, padding, by_row."""
    Tk = max(1, Tq + extra)
    q, k, v = qkv(2, 2 * G, 2, Tq, Tk, 8, seed=seed)
    g = torch.Generator().manual_seed(seed)
    queries = torch.randint(0, max(Tq, Tk), (n_q,), generator=g).tolist()
    keys = torch.randint(0, Tk, (n_k,), generator=g).tolist()
    mask = {"causal": ar.causal(), "none": None, "padding": torch.rand(2, 1, 1, Tk, generator=g) < 0.7}[kind]
    iv = ar.KnockoutEdges(queries, keys, heads=[0, 2 * G - 1], by_row=by_row)
    want = ar.attend(q, k, v, mask, impl="eager", interventions=[iv])
    got, trace = ar.attend(q, k, v, mask, interventions=[iv], return_trace=True)
    assert trace.impl == "rows"
    torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)


@given(
    B=st.integers(2, 4),
    Tq=st.integers(1, 9),
    extra=st.integers(0, 5),
    seed=st.integers(0, 999),
    impl=st.sampled_from(["eager", "blocked", "auto"]),
)
def test_copies_in_one_batch_each_take_their_own_knockout(B, Tq, extra, seed, impl):
    """``batch``: copies of one input in one call, each item its own cut (or none), equal the cuts run one at a
    time — the other items untouched — on every backend; knockout.py batches a text's windows this way."""
    Tk = Tq + extra
    q, k, v = qkv(1, 4, 2, Tq, Tk, 8, seed=seed)
    g = torch.Generator().manual_seed(seed)
    cuts = [(torch.randint(0, Tk, (2,), generator=g).tolist(), torch.randint(0, Tk, (2,), generator=g).tolist())]
    cuts = [cuts[0]] + [(qs, ks) for qs, ks in [cuts[0][::-1]] * (B - 2)] + [([], [])]  # the last item: no cut
    made = [ar.KnockoutEdges(qs, ks, heads=[1, 2], batch=[b]) for b, (qs, ks) in enumerate(cuts)]
    kw = {"block_size": 2} if impl == "blocked" else {}
    together = ar.attend(q.repeat(B, 1, 1, 1), k.repeat(B, 1, 1, 1), v.repeat(B, 1, 1, 1), ar.causal(),
                         impl=impl, interventions=made, **kw)  # fmt: skip
    for b, (qs, ks) in enumerate(cuts):
        alone = ar.attend(q, k, v, ar.causal(), impl=impl, interventions=[ar.KnockoutEdges(qs, ks, heads=[1, 2])], **kw)
        torch.testing.assert_close(together[b : b + 1], alone, atol=2e-6, rtol=1e-5)
    assert torch.equal(
        ar.KnockoutEdges([0], [0], batch=[9]).edit_scores(torch.zeros(2, 1, 1, 1), _Block()), torch.zeros(2, 1, 1, 1)
    )


class _Block:
    """A [1, 1] block at the origin: a batch item past the batch cuts nothing."""

    q0, q1, kv0, kv1 = 0, 1, 0, 1

    def q_positions(self, device):
        return torch.zeros(1, dtype=torch.long, device=device)


def test_rows_in_half_precision_stay_within_twice_plain_error():
    """fp16 / bf16: the touched rows through the stages, the rest through SDPA, against float64 eager."""
    for dtype in (torch.float16, torch.bfloat16):
        q, k, v = qkv(1, 9, 3, 37, 64, 64, dtype=dtype, seed=5)
        iv = ar.KnockoutEdges([30, 40, 63], [0, 5], heads=[2, 7])
        got, trace = ar.attend(q, k, v, ar.causal(), interventions=[iv], return_trace=True)
        ref = ar.attend(q.double(), k.double(), v.double(), ar.causal(), impl="eager", interventions=[iv])
        plain = ar.attend(q, k, v, ar.causal(), impl="eager", interventions=[iv])
        assert trace.impl == "rows" and got.dtype == dtype
        ar.assert_close_to_reference(got, plain, ref, what=f"rows {dtype}")


def test_impl_rows_refuses_what_it_cannot_take():
    q, k, v = qkv(1, 2, 2, 5, 5, 4)
    with pytest.raises(ar.UnsupportedRequest, match="name the rows"):
        ar.attend(q, k, v, ar.causal(), impl="rows", interventions=[ar.ZeroHead([0])])
    with pytest.raises(ar.UnsupportedRequest, match="name the rows"):
        ar.attend(q, k, v, ar.causal(), impl="rows")


@given(rows=st.lists(st.integers(0, 60), max_size=30, unique=True), most=st.integers(1, 7))
def test_touched_rows_are_cut_into_runs_that_recompute_nothing_else(rows, most):
    from attnroute.engine.backends.rows import spans

    got = spans(sorted(rows), most)
    covered = [r for q0, q1 in got for r in range(q0, q1)]
    assert covered == sorted(rows)  # every touched row once, and no row between them
    assert all(0 < q1 - q0 <= most for q0, q1 in got)
