"""A bf16 or fp16 Linear's input gradient on the CPU, computed in the layout torch's CPU GEMM is fast in.

    with column_major_gradients(model):   # a verb's Study.load holds it for the verb's length
        loss.backward()                   # the same forward, bit for bit; each Linear's dL/dx some 10x faster

Why. Autograd computes a Linear's input gradient as g @ W, with g [N, out] and W [out, in] both row-major. On a
CPU without bf16 matrix instructions (AVX2; ``torch.ops.mkldnn._is_mkldnn_bf16_supported()`` is False), torch
2.13's bf16 GEMM is slow in that layout only. SmolLM2's output head: g @ W took 34 s for 564 positions, and 1.3 s
with g made column-major first (float32: 0.2 s). A forward and backward of SmolLM2 in bf16 spent 98 of its 116 s
in these products (torch.profiler, 2026-12-06, docs/precision.md). In fp16 the layout is 2-3x slower.

How. While the block runs, each ``nn.Linear`` whose weight is bf16 or fp16 on the CPU runs its forward through an
autograd Function (``_Linear``). Its forward is ``F.linear`` itself, the same kernel, so every output is
bit-identical. Its backward computes dL/dx from a column-major copy of g, a block of rows at a time, into one
output: at most BLOCK bytes of copies are alive, so a peak grows by 16 MB at most. dL/dW and dL/db are
autograd's own formulas. Both kernels sum in float32 and round the result to the dtype once; only the order of
the sums differs, so an input gradient moves by the dtype's rounding (tests/models/test_gradient_layout.py). It
saves what autograd saves for F.linear: W, and x only where the weight wants a gradient. Gradients are
estimates in attnroute: every number a verb prints from them is settled by an exact forward.

A module accelerate dispatched is wrapped where accelerate calls it (``_old_forward``), after its weights are
loaded. A module whose weight is not low precision when it is called (inside models/arithmetic's float32
arithmetic) runs its own forward. Nothing of the model changes: the forwards are given back on exit
(models/forwards.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from .forwards import attributes_replaced, called_forward

LOW = (torch.bfloat16, torch.float16)  # as models/arithmetic.LOW, which imports loaded.py (which imports this)
BLOCK = 16 << 20  # bytes of gradient rows copied at a time (SmolLM2's head: 1.7 s a pass; 1.5 s at 64 MB)


def needs_layout(model: torch.nn.Module) -> bool:
    """Whether any Linear of ``model`` holds a bf16 or fp16 weight on the CPU (or offloaded, to run there)."""
    return any(_runs_slow(m) for m in _linears(model))


@contextlib.contextmanager
def column_major_gradients(model: torch.nn.Module) -> Iterator[int]:
    """Inside the block each CPU bf16/fp16 Linear's input gradient is computed column-major; yields how many
    Linears were wrapped. Whatever ends the block, every forward is the model's own again."""
    wrapped = {}
    for m in _linears(model):
        if _runs_slow(m):
            attr = called_forward(m)
            wrapped[(m, attr)] = _forward_of(m, getattr(m, attr))
    with attributes_replaced(wrapped):
        yield len(wrapped)


def _linears(model: torch.nn.Module) -> Iterator[torch.nn.Linear]:
    return (m for m in model.modules() if type(m) is torch.nn.Linear)


def _slow(w: torch.Tensor) -> bool:
    return w.dtype in LOW and w.device.type == "cpu"


def _runs_slow(m: torch.nn.Linear) -> bool:
    """``m`` computes with a CPU bf16/fp16 weight: one held there, or one accelerate offloaded (to the meta device
    between calls) and loads onto the CPU to run it."""
    w, hook = m.weight, getattr(m, "_hf_hook", None)
    offloaded = w.device.type == "meta" and str(getattr(hook, "execution_device", None)).startswith("cpu")
    return _slow(w) or (w.dtype in LOW and offloaded)


def _forward_of(m: torch.nn.Linear, inner):
    def forward(x):
        w, b = m.weight, m.bias
        wants = torch.is_grad_enabled() and (x.requires_grad or w.requires_grad)
        if not wants or not _slow(w) or x.dtype != w.dtype:  # nothing to differentiate, or not this layout's case
            return inner(x)
        return _Linear.apply(x, w, b)

    return forward


class _Linear(torch.autograd.Function):
    """F.linear, with dL/dx computed from a column-major dL/dy: x [..., in], W [out, in], b [out] -> [..., out]."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x if ctx.needs_input_grad[1] else None, w)
        ctx.has_bias = b is not None
        return F.linear(x, w, b)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g2 = g.reshape(-1, g.shape[-1])  # [N, out]
        dx = _input_gradient(g2, w).view(*g.shape[:-1], w.shape[1]) if _wanted(ctx, 0) else None
        dw = g2.t() @ x.reshape(-1, x.shape[-1]) if _wanted(ctx, 1) else None
        db = g2.sum(0) if ctx.has_bias and _wanted(ctx, 2) else None
        return dx, dw, db


def _wanted(ctx, i: int) -> bool:
    """Whether this backward pass uses input ``i``'s gradient. ``needs_input_grad`` says only that the input
    requires one: a user's weights do, and autograd.grad to the activations (every verb's) never reads them, so
    autograd's own linear skips them (SmolLM2's output head: 4.1 s a pass). Asked the engine as
    torch.autograd.graph.register_multi_grad_hook does. The engine answers for a leaf only when autograd.grad
    does not ask for it; when it does (it raises), and where torch lacks the call, the gradient is computed."""
    if not ctx.needs_input_grad[i]:
        return False
    node = ctx.next_functions[i][0]
    will_run = getattr(torch._C, "_will_engine_execute_node", None)
    if node is None or will_run is None:
        return node is not None
    try:
        return bool(will_run(node))
    except RuntimeError:  # "a leaf node was passed … while running autograd.grad()": a leaf it asks for
        return True


def _input_gradient(g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """g @ w with g [N, out] copied column-major a block of rows at a time: [N, out] @ [out, in] -> [N, in]."""
    out = torch.empty(g.shape[0], w.shape[1], dtype=g.dtype, device=g.device)
    rows = max(1, BLOCK // max(1, g.shape[1] * g.element_size()))
    for i in range(0, g.shape[0], rows):
        block = g[i : i + rows]
        torch.mm(block.t().contiguous().t(), w, out=out[i : i + rows])
    return out


__all__ = ["BLOCK", "column_major_gradients", "needs_layout"]
