"""Hook lifetime in one home: every module hook attnroute puts on a model is added through a Hooks and removed
with it, on every exit of its block — success, a refusal, the user's metric raising, Ctrl-C. A user's model is
left with exactly the hooks it had (tests/read/test_hooks.py walks read/ for any other register_*_hook).

    with Hooks() as hooks:
        hooks.after(block, lambda m, args, out: ...)               # a forward hook: taps or edits the output
        hooks.before(attn, lambda m, args, kwargs: ..., kwargs=True)  # a pre-hook: taps or edits the input
        model(**batch)

    with recorded(blocks) as outputs, routed(loaded):              # each block's output, by index
        model(**batch)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch

from ..models.forwards import forwards_replaced  # re-exported: read/'s callers import it here


class Hooks:
    """Module hooks added together and removed together (last first), once, whatever ends the block. Usable
    without ``with`` by an object that owns a model's hooks for a while (call remove() in its own exit)."""

    def __init__(self):
        self._handles: list = []

    def after(self, module: torch.nn.Module, fn, *, kwargs: bool = False) -> None:
        """``fn(module, args, output)`` (with ``kwargs``: ``fn(module, args, kwargs, output)``) after each call;
        what it returns other than None replaces the output."""
        self._handles.append(module.register_forward_hook(fn, with_kwargs=kwargs))

    def before(self, module: torch.nn.Module, fn, *, kwargs: bool = False) -> None:
        """``fn(module, args)`` (with ``kwargs``: ``fn(module, args, kwargs)``) before each call; what it returns
        other than None replaces the inputs."""
        self._handles.append(module.register_forward_pre_hook(fn, with_kwargs=kwargs))

    def remove(self) -> None:
        while self._handles:
            self._handles.pop().remove()

    def __len__(self) -> int:
        return len(self._handles)

    def __enter__(self) -> Hooks:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


@contextlib.contextmanager
def recorded(modules: Sequence[torch.nn.Module], first: bool = False) -> Iterator[dict[int, object]]:
    """Each module's output of the forwards run inside the block, by its index in ``modules`` (the last call's
    when a module runs twice); ``first``: a tuple output's first element (an attention layer's hidden states)."""
    outputs: dict[int, object] = {}

    def keep(i: int):
        return lambda m, args, out: outputs.__setitem__(i, out[0] if first and isinstance(out, tuple) else out)

    with Hooks() as hooks:
        for i, m in enumerate(modules):
            hooks.after(m, keep(i))
        yield outputs


__all__ = ["Hooks", "forwards_replaced", "recorded"]
