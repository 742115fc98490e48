"""A module's forward replaced for a block and given back exactly, whatever ends the block: the instance attribute
it held (accelerate's hook wrapper: deleting it would leave an offloaded layer unloaded on its next call) or
none, the class's. The one place attnroute replaces a forward (tests/read/test_hooks.py walks src/ for others).

    with forwards_replaced({block: lambda *a, **k: stored}):          # read/: a block answers with its output
        model(**batch)
    with attributes_replaced({(layer, "_old_forward"): wrapped}):     # models/arithmetic: inside accelerate's
        model(**batch)                                                # wrapper, after it loaded the weights

A replacement that wants the module's own forward takes ``module.forward`` before the block, never
``type(module).forward``, which would bypass such a wrapper.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

_MISSING = object()


@contextlib.contextmanager
def attributes_replaced(replacements: dict[tuple[torch.nn.Module, str], Callable]) -> Iterator[None]:
    """Each (module, attribute) set to its function for the block; on any exit each gets back what it held."""
    saved = []
    try:
        for (module, attr), fn in replacements.items():
            saved.append((module, attr, module.__dict__.get(attr, _MISSING)))
            module.__dict__[attr] = fn
        yield
    finally:
        for module, attr, was in reversed(saved):
            if was is _MISSING:
                module.__dict__.pop(attr, None)
            else:
                module.__dict__[attr] = was


def called_forward(module: torch.nn.Module) -> str:
    """The attribute a module's forward is run through: accelerate's dispatched module calls ``_old_forward``
    inside its hook, after it has loaded offloaded weights; any other module, ``forward``."""
    return "_old_forward" if hasattr(module, "_hf_hook") and hasattr(module, "_old_forward") else "forward"


def forwards_replaced(replacements: dict[torch.nn.Module, Callable]):
    """Each module's ``forward`` replaced by its function for the block (attributes_replaced)."""
    return attributes_replaced({(module, "forward"): fn for module, fn in replacements.items()})


__all__ = ["attributes_replaced", "called_forward", "forwards_replaced"]
