"""Weights accelerate offloaded, read one module at a time. A model dispatched with a device map that sends
layers to the CPU or disk ("offloaded") holds those layers' parameters on the meta device between calls; its
AlignDevicesHook loads them for the length of the module's own forward. Forwards need nothing from attnroute.
What attnroute reads directly (a projection's weight, a norm's scale, the output head), it reads here: the
module's parameter as it is when it lives on a device, else loaded from the hook's weights map for the length
of one read (accelerate's ``align_module_device``) and kept only as long as the caller keeps it. So an
offloaded model costs, beyond its resident layers, what the verb reads at once (one layer's matrices for most;
docs/reading-any-model.md, "Models dispatched by accelerate").
"""

from __future__ import annotations

import torch


def param(module, name: str = "weight") -> torch.Tensor | None:
    """``module.<name>`` (detached) where it holds values, or None when it has none; an offloaded one loaded."""
    p = getattr(module, name, None)
    if p is None or not isinstance(p, torch.Tensor):
        return p
    if p.device.type != "meta":
        return p.detach()
    from accelerate.utils import align_module_device

    with align_module_device(module):
        p = getattr(module, name)
    if p.device.type == "meta":  # no hook holds its values: nothing can read them
        raise RuntimeError(f"{type(module).__name__}.{name} is on the meta device and no accelerate hook holds it")
    return p.detach()


def named_params(model: torch.nn.Module):
    """(name, tensor) for every parameter in the model's order, an offloaded one loaded while it is read."""
    for prefix, module in model.named_modules():
        for name, _ in module.named_parameters(recurse=False):
            yield (f"{prefix}.{name}" if prefix else name), param(module, name)


def unheld(model: torch.nn.Module) -> list[str]:
    """Parameters on the meta device that no accelerate hook can load (a model built on meta, never filled)."""
    names = []
    for prefix, module in model.named_modules():
        for name, p in module.named_parameters(recurse=False):
            if p.device.type == "meta" and not _offloads(module):
                names.append(f"{prefix}.{name}" if prefix else name)
    return names


def _offloads(module) -> bool:
    hook = getattr(module, "_hf_hook", None)
    hooks = getattr(hook, "hooks", None) or ([hook] if hook is not None else [])
    return any(getattr(h, "offload", False) and getattr(h, "weights_map", None) is not None for h in hooks)


__all__ = ["named_params", "param", "unheld"]
