"""A CPU bf16/fp16 Linear's input gradient computed column-major (models/gradient_layout.py): the forward is the
model's own bit for bit, every gradient autograd's within the dtype's rounding of a product, the weights'
gradients skipped where the pass does not read them, and the model as it was afterwards — dispatched by
accelerate or not, and inside a verb."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from attnroute.models import gradient_layout
from attnroute.models.gradient_layout import column_major_gradients, needs_layout
from tests.models.test_arithmetic import IDS, _as_it_was
from tests.read.zoo import build

# an input gradient against autograd's, relative to its largest |value|: both sum in float32 and round once,
# in another order; through two layers that is a few units of the dtype's last place
BOUND = {torch.bfloat16: 3e-2, torch.float16: 4e-3}


def _low(path, dtype, **where):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **where).eval()


def _pass(model, ids=IDS, weights: bool = False):
    """(logits, the gradient at the input embeddings, the parameters' gradients when ``weights``)."""
    emb = model.get_input_embeddings()(ids).detach().requires_grad_()
    logits = model(inputs_embeds=emb).logits
    metric = logits[0, -1].float().logsumexp(-1) + logits[0, :, 3].float().sum()
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear] if weights else []
    params = [p for m in linears for p in (m.weight, m.bias) if p is not None and p.requires_grad]
    grads = torch.autograd.grad(metric, [emb, *params])
    return logits.detach(), grads[0], grads[1:]


class _Products(TorchDispatchMode):
    """Every aten.mm: (its operands' shapes, whether the first is column-major)."""

    def __init__(self):
        super().__init__()
        self.seen: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.mm.default or func is torch.ops.aten.mm.out:
            a, b = args[0], args[1]
            self.seen.append((tuple(a.shape), tuple(b.shape), a.stride(0) == 1 and a.shape[1] > 1))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    "arch, dtype",
    [("llama", torch.bfloat16), ("qwen2", torch.bfloat16), ("gemma3_text", torch.bfloat16), ("llama", torch.float16)],
    ids=lambda x: str(x).removeprefix("torch."),
)
def test_the_forward_is_the_models_own_and_every_gradient_autograds(arch, dtype, tmp_path):
    """Qwen2's q, k and v have biases; every parameter wants a gradient here, as from_pretrained leaves it."""
    model = _low(build(arch, tmp_path), dtype)
    before = _as_it_was(model)
    want_logits, want_g, want_w = _pass(model, weights=True)
    with column_major_gradients(model) as wrapped:
        logits, g, w = _pass(model, weights=True)
    assert wrapped == sum(type(m) is torch.nn.Linear for m in model.modules()) > 0
    assert torch.equal(logits, want_logits)
    scale = want_g.abs().max().float()
    assert 0 < (g - want_g).abs().max().float() / scale <= BOUND[dtype] or torch.equal(g, want_g)
    for mine, theirs in zip(w, want_w, strict=True):
        torch.testing.assert_close(mine.float(), theirs.float(), rtol=0, atol=BOUND[dtype] * theirs.abs().max())
    assert _as_it_was(model) == before and torch.equal(model(IDS).logits, want_logits)


def test_the_backward_multiplies_column_major_and_skips_the_weights_it_does_not_read(tmp_path):
    """autograd.grad to the input only: no product makes a weight's gradient, though every weight wants one."""
    model = _low(build("llama", tmp_path), torch.bfloat16)
    shapes = {tuple(m.weight.shape) for m in model.modules() if type(m) is torch.nn.Linear}
    emb = model.get_input_embeddings()(IDS).detach().requires_grad_()
    with column_major_gradients(model):
        metric = model(inputs_embeds=emb).logits[0, -1].float().logsumexp(-1)
        with _Products() as products:
            torch.autograd.grad(metric, emb)
    linear = [(a, b) for a, b, col in products.seen if b in shapes]
    assert linear and all(col for a, b, col in products.seen if b in shapes)
    assert not [a for a, b, _ in products.seen if (a[0], b[1]) in shapes]  # [out, N] @ [N, in]: a weight's


def test_float32_and_a_model_on_no_cpu_are_left_alone(tmp_path):
    path = build("llama", tmp_path)
    f32 = _low(path, torch.float32)
    assert not needs_layout(f32)
    with column_major_gradients(f32) as wrapped:
        assert wrapped == 0
    assert needs_layout(_low(path, torch.bfloat16))


def test_a_dispatched_model_with_a_layer_on_disk_is_wrapped_where_accelerate_calls_it(tmp_path):
    """The layer on disk is on the meta device between its calls, and accelerate loads it onto the CPU to run."""
    path = build("llama", tmp_path)
    where = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk", "model.norm": "cpu"}
    where |= {"model.rotary_emb": "cpu", "lm_head": "cpu"}
    moved = _low(path, torch.bfloat16, device_map=where, offload_folder=tmp_path / "offload")
    plain = _low(path, torch.bfloat16)
    before = _as_it_was(moved, False)
    want_logits, want_g, _ = _pass(plain)
    with column_major_gradients(moved) as wrapped:
        logits, g, _ = _pass(moved)
    assert wrapped == sum(type(m) is torch.nn.Linear for m in moved.modules())  # the layer on disk's too
    assert torch.equal(logits, want_logits)
    assert (g - want_g).abs().max().float() <= BOUND[torch.bfloat16] * want_g.abs().max().float()
    assert _as_it_was(moved, False) == before


def test_a_verb_reads_a_bf16_model_through_it_and_gives_it_back(tmp_path, monkeypatch):
    """patch's estimate is a gradient pass: inside the verb the products are column-major, after it the model's
    forwards are its own; the exact effects are forwards, and equal those read without the layout."""
    import attnroute as ar
    from tests.read.test_low_precision import PAIRS

    model = _low(build("llama", tmp_path), torch.bfloat16)
    before = _as_it_was(model)
    calls, original = [], gradient_layout._input_gradient
    monkeypatch.setattr(gradient_layout, "_input_gradient", lambda g, w: calls.append(1) or original(g, w))
    got = ar.patch(model, PAIRS, exact="all", progress=False)
    assert calls and _as_it_was(model) == before
    monkeypatch.setattr("attnroute.models.loaded.needs_layout", lambda m: False)
    calls.clear()
    want = ar.patch(model, PAIRS, exact="all", progress=False)
    assert not calls
    assert [r["delta"] for r in got.rows] == [r["delta"] for r in want.rows]
    e, e0 = (torch.tensor([r["estimate"] for r in x.rows]) for x in (got, want))
    assert (e - e0).abs().max() <= BOUND[torch.bfloat16] * max(1.0, e0.abs().max())


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(1, 40),
    lead=st.sampled_from([(), (2,), (3, 1)]),
    sizes=st.tuples(st.integers(1, 48), st.integers(1, 48)),
    bias=st.booleans(),
    dtype=st.sampled_from([torch.bfloat16, torch.float16]),
    block=st.sampled_from([2, 64, 16 << 20]),  # bytes: one row, a few rows, all rows in one copy
)
def test_one_linear_against_autograds_on_awkward_shapes(rows, lead, sizes, bias, dtype, block):
    """Odd row counts, 2-D and 3-D inputs, with and without a bias, blocks of one row up to all: the forward
    equal bit for bit, dL/dx, dL/dW and dL/db within the dtype's rounding of one product."""
    torch.manual_seed(rows)
    n_in, n_out = sizes
    layer = torch.nn.Linear(n_in, n_out, bias=bias).to(dtype)
    x = torch.randn(*lead, rows, n_in).to(dtype).requires_grad_()
    g = torch.randn(*lead, rows, n_out).to(dtype)
    inputs = [x, *layer.parameters()]
    want_y = layer(x)
    want = torch.autograd.grad(want_y, inputs, g)
    old, gradient_layout.BLOCK = gradient_layout.BLOCK, block
    try:
        with column_major_gradients(layer) as wrapped:
            y = layer(x)
            got = torch.autograd.grad(y, inputs, g)
    finally:
        gradient_layout.BLOCK = old
    assert wrapped == 1 and torch.equal(y, want_y)
    eps = torch.finfo(dtype).eps
    for a, b in zip(got, want, strict=True):
        scale = float(b.abs().max()) + 1
        assert float((a.float() - b.float()).abs().max()) <= 2 * eps * scale
