"""Activations recomputed in the backward instead of stored (torch.utils.checkpoint), block by block.

A backward over a long text holds every layer's intermediate tensors: MLP activations, attention's saved
inputs — several times the residual stream. With each block of the layer stack checkpointed, only the
blocks' inputs are held and each block is run again when the backward reaches it: one more forward for a
fraction of the memory (`routes` and the circuits' gradient pass use it past their token thresholds).
Hooks inside a block run twice — once in the forward, once in the recomputation — so a hook that keeps
something must let the first call count.
"""

from __future__ import annotations

import contextlib

from torch.utils.checkpoint import checkpoint

from ..effects import layer_stack
from ..hooks import forwards_replaced


@contextlib.contextmanager
def checkpointed(loaded, on: bool):
    """Each block of the layer stack recomputed in the backward instead of stored (torch.utils.checkpoint):
    the backward holds the blocks' inputs, not every intermediate, at the cost of one more forward."""
    blocks = layer_stack(loaded) if on else None
    if not blocks:
        yield False
        return
    steps = {b: lambda *a, _f=b.forward, **k: checkpoint(_f, *a, use_reentrant=False, **k) for b in blocks}
    with forwards_replaced(steps):  # _f: the block's own forward, accelerate's wrapper included
        yield True


__all__ = ["checkpointed"]
