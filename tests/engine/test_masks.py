"""Masks: golden grids, alignment, windows, padding, documents, composition, length checks."""

import pytest
import torch

import attnroute as ar

from .helpers import qkv


def rows(grid: str) -> list[str]:
    return ["".join("1" if c == "■" else "0" for c in line.split()) for line in grid.splitlines()]


def test_causal_alignment_matches_flash_attn_readme_and_pytorch_108108():
    # docs/pitfalls.md: exact keep-matrices for (q=2, k=5) and (q=5, k=2), both alignments.
    assert rows(ar.causal().grid(2, 5)) == ["11110", "11111"]
    assert rows(ar.causal().grid(5, 2)) == ["00", "00", "00", "10", "11"]
    assert rows(ar.causal("top_left").grid(2, 5)) == ["10000", "11000"]
    assert rows(ar.causal("top_left").grid(5, 2)) == ["10", "11", "11", "11", "11"]


def test_docstring_grids_are_the_masks():
    assert ar.sliding_window(2).grid(4, 4) == "■ ⬚ ⬚ ⬚\n■ ■ ⬚ ⬚\n⬚ ■ ■ ⬚\n⬚ ⬚ ■ ■"
    assert ar.prefix_lm(2).grid(4, 4) == "■ ■ ⬚ ⬚\n■ ■ ⬚ ⬚\n■ ■ ■ ⬚\n■ ■ ■ ■"
    assert ar.document(torch.tensor([0, 0, 1, 1])).grid(4, 4) == "■ ■ ⬚ ⬚\n■ ■ ⬚ ⬚\n⬚ ⬚ ■ ■\n⬚ ⬚ ■ ■"
    assert ar.padding([3], Tk=5).grid(1, 5) == "■ ■ ■ ⬚ ⬚"
    assert ar.padding([3], Tk=5, side="left").grid(1, 5) == "⬚ ⬚ ■ ■ ■"


@pytest.mark.parametrize("W", [1, 2, 5, 8])
def test_sliding_window_counts_w_keys_including_self(W):
    # docs/pitfalls.md: far from the start every row sees exactly W keys.
    m = ar.sliding_window(W).materialize(1, 1, 20, 20)[0, 0]
    assert (m[W:].sum(-1) == W).all()
    assert m.diagonal().all()


def test_window_adapters_between_conventions():
    # flash-attn window_size=(left, 0) sees left+1 keys; attention-gym `q - kv <= W` sees W+1.
    assert ar.window_from(3, "flash_attn") == 4 and ar.window_from(3, "flex") == 4
    assert ar.window_from(4, "transformers") == 4
    for conv in ("flash_attn", "flex", "transformers"):
        assert ar.window_to(ar.window_from(6, conv), conv) == 6
    flex = ar.predicate(lambda b, h, q, kv: (kv <= q) & (q - kv <= 3))
    assert torch.equal(
        flex.materialize(1, 1, 9, 9), ar.sliding_window(ar.window_from(3, "flex")).materialize(1, 1, 9, 9)
    )
    with pytest.raises(ValueError, match="unknown window convention"):
        ar.window_from(3, "xformers?")


def test_window_wider_than_sequence_is_causal_and_zero_window_refused():
    assert torch.equal(ar.sliding_window(50).materialize(1, 1, 9, 9), ar.causal().materialize(1, 1, 9, 9))
    with pytest.raises(ValueError, match=">= 1 key"):
        ar.sliding_window(0)


def test_hf_mask_left_and_right_padding():
    am = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1]])
    m = ar.from_hf(am).materialize(2, 1, 1, 5)
    assert m[0, 0, 0].tolist() == [True, True, True, False, False]
    assert m[1, 0, 0].tolist() == [False, False, True, True, True]
    assert torch.equal(m[:1], ar.padding([3], Tk=5, side="right").materialize(1, 1, 1, 5))
    assert torch.equal(m[1:], ar.padding([3], Tk=5, side="left").materialize(1, 1, 1, 5))
    with pytest.raises(ValueError, match="only 0 and 1"):
        ar.from_hf(torch.tensor([[1, 2]]))


def test_composition_and_or_not():
    c, w, p = ar.causal(), ar.sliding_window(2), ar.padding([4], Tk=6)
    # expected grids written out by position, independently of the mask code
    both = torch.tensor([[j <= i and j > i - 2 and j < 4 for j in range(6)] for i in range(6)])
    assert torch.equal((c & w & p).materialize(1, 1, 6, 6)[0, 0], both)
    either = torch.tensor([[j <= i or j >= 4 for j in range(6)] for i in range(6)])
    assert torch.equal((c | ~p).materialize(1, 1, 6, 6)[0, 0], either)
    assert "causal" in repr(c & w)


def test_predicate_sees_absolute_positions_and_heads():
    # a mask that differs per head: head h sees keys with kv_idx % 2 == h % 2
    m = ar.predicate(lambda b, h, q, kv: kv % 2 == h % 2).materialize(1, 2, 3, 4)
    assert m[0, 0, 0].tolist() == [True, False, True, False]
    assert m[0, 1, 0].tolist() == [False, True, False, True]


def test_mask_built_for_one_length_refuses_another():
    # docs/pitfalls.md (xformers #1122): a mask for Tk=20 with 1..17 keys must error, not broadcast.
    q, k, v = qkv(2, 2, 2, 3, 17, 8)
    for mask in (
        ar.padding([20, 10], Tk=20),
        ar.from_hf(torch.ones(2, 20, dtype=torch.long)),
        ar.document(torch.zeros(20, dtype=torch.long)),
        torch.ones(1, 1, 3, 20, dtype=torch.bool),
    ):
        for impl in ("eager", "blocked", "sdpa"):
            with pytest.raises(ValueError, match="20"):
                ar.attend(q, k, v, mask, impl=impl)
    with pytest.raises(ValueError, match="B=3"):
        ar.padding([1, 2, 3], Tk=17).materialize(2, 1, 3, 17)


def test_packed_documents_do_not_see_each_other():
    # docs/pitfalls.md: pack A|B; outputs equal separate runs and d out_B / d x_A = 0.
    q, k, v = qkv(1, 2, 2, 10, 10, 8, seed=4)
    ids = torch.tensor([0] * 4 + [1] * 6)
    k.requires_grad_(True)
    mask = ar.document(ids) & ar.causal()
    for impl in ("eager", "blocked", "sdpa"):
        out = ar.attend(q, k, v, mask, impl=impl)
        a = ar.attend(q[:, :, :4], k[:, :, :4], v[:, :, :4], ar.causal(), impl="eager")
        b = ar.attend(q[:, :, 4:], k[:, :, 4:], v[:, :, 4:], ar.causal(), impl="eager")
        torch.testing.assert_close(out, torch.cat([a, b], 2), atol=2e-6, rtol=0)
        (g,) = torch.autograd.grad(out[:, :, 4:].sum(), k)
        assert g[:, :, :4].abs().max() == 0


def test_bool_tensor_masks_must_be_bool():
    q, k, v = qkv(1, 2, 2, 3, 3, 4)
    with pytest.raises(TypeError, match="polarity"):
        ar.attend(q, k, v, torch.ones(3, 3))
    with pytest.raises(TypeError, match="polarity"):
        ar.attend(q, k, v, torch.ones(3, 3, dtype=torch.uint8))
