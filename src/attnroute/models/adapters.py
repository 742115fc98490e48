"""What wraps a transformers model: a PEFT model is read through its base model with its adapters applied; a
model compiled by torch.compile or quantized (bitsandbytes, GPTQ, AWQ, …) is refused by name, with what to
pass instead. docs/models.md, "Models you hold".

Why a PEFT model needs a view. LoRA wraps a Linear in a tuner layer whose forward adds s·B(A x) to the base
layer's W x, while the tuner layer's ``.weight`` is the base layer's W alone. attnroute reads some weights
directly (the head columns of q/k/v and o, the output head), so read as it is, a LoRA model would mix adapted
forwards with unadapted weights — wrong numbers, not an error. While a verb reads it (``LoadedModel.reading``,
entered by read/study.Study), each active, unmerged adapter is merged with PEFT's own ``merge(safe_merge=True)``,
which computes W + ΔW into a new tensor (it checks it for NaNs) and leaves W's tensor as it was; when the
reading ends, every base layer gets its own tensors back and its merged list, bit for bit. What attnroute reads
is therefore the model ``merge_and_unload()`` would give: its logits equal the adapter forward's within the
dtype's rounding. It costs one copy of each adapted weight while the verb runs (LoRA on q and v of a 7B model
in bf16: about 2 GB). A tuner layer without ``merge`` (prompt learning has no tuner layers and is refused
before) is refused naming its type.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ..errors import InputError
from .loaded import ModelLoadError


def is_peft(obj) -> bool:
    """A PEFT wrapper (PeftModel and its task classes), told without importing peft."""
    return type(obj).__module__.startswith("peft.") and callable(getattr(obj, "get_base_model", None))


def unwrap_peft(model) -> tuple[object, Callable]:
    """(the base transformers model with the tuner layers in it, the view that applies the adapters)."""
    config = getattr(model, "active_peft_config", None)
    if config is not None and getattr(config, "is_prompt_learning", False):
        raise ModelLoadError(
            f"a PEFT model with a prompt-learning adapter ({config.peft_type}): its virtual tokens are not "
            "weights attnroute can read; read the base model (model.get_base_model()) or a LoRA adapter"
        )
    base = model.get_base_model()
    layers = [m for m in base.modules() if _is_tuner(m)]
    for m in layers:
        if not callable(getattr(m, "merge", None)):
            raise ModelLoadError(
                f"a PEFT adapter layer of type {type(m).__name__} cannot be merged, and attnroute reads the "
                "adapted weights directly; read a merged copy (copy.deepcopy(model).merge_and_unload())"
            )
    return base, lambda: merged(layers)


def _is_tuner(module) -> bool:
    return type(module).__module__.startswith("peft.") and callable(getattr(module, "get_base_layer", None))


@contextlib.contextmanager
def merged(layers: list):
    """Each layer's active adapters merged into new tensors; on exit the base tensors and merged lists back."""
    saved = []
    try:
        for m in layers:
            base = m.get_base_layer()
            bias = getattr(base, "bias", None)
            saved.append((m, base.weight.data, None if bias is None else bias.data, list(m.merged_adapters)))
            if not m.disable_adapters:  # adapters switched off compute the base layer alone: nothing to apply
                m.merge(safe_merge=True)
        yield
    finally:
        for m, weight, bias, was in reversed(saved):
            base = m.get_base_layer()
            base.weight.data = weight
            if bias is not None:
                base.bias.data = bias
            m.merged_adapters = was


def refuse_compiled(model) -> None:
    """A model compiled by torch.compile, refused by name before any work, with what to pass instead."""
    if type(model).__name__ == "OptimizedModule" and hasattr(model, "_orig_mod"):
        raise InputError(
            "model is compiled by torch.compile: attnroute swaps the attention implementation and hooks modules, "
            "which the compiled graph would not see; pass model._orig_mod (the same weights, uncompiled)",
            field="model",
        )


def refuse_quantized(model) -> None:
    """A transformers model holding quantized weights (a QLoRA's base too), refused by name before any work."""
    method = _quantization(model)
    if method is not None:
        raise ModelLoadError(
            f"model is quantized ({method}): attnroute reads weights directly and would read packed integers; "
            "load it unquantized (e.g. dtype=torch.bfloat16) to read it"
        )


def _quantization(model) -> str | None:
    """The quantization method a transformers model was loaded with, or None (a GGUF that transformers
    dequantized on load holds floating-point weights, and is read)."""
    marked = getattr(model, "hf_quantizer", None) is not None or getattr(model, "is_quantized", False)
    if not marked and all(p.is_floating_point() for p in model.parameters()):
        return None
    config = getattr(getattr(model, "config", None), "quantization_config", None)
    method = config.get("quant_method") if isinstance(config, dict) else getattr(config, "quant_method", None)
    return str(getattr(method, "value", method) or "integer weights")


def refuse_random(model) -> None:
    """A model in training mode with a dropout (or LayerDrop) that is on gives a different forward every call: no
    reading of it is exact, and its routing check fails for no reason of its own. Refused by name, naming the
    first such module; attnroute does not switch the mode for the user. Training mode with every dropout at 0
    (Llama's default) is deterministic and is read."""
    import torch

    for name, module in model.named_modules():
        if not module.training:
            continue
        p = module.p if isinstance(module, torch.nn.modules.dropout._DropoutNd) else _drop_rate(module)
        if p:
            raise InputError(
                f"model is in training mode with dropout {p:g} in {name or type(module).__name__}: its forward is "
                "random, so no reading of it is exact; call model.eval() first (attnroute leaves the mode to you)",
                field="model",
            )


def _drop_rate(module) -> float:
    """A rate a module applies itself in training mode (transformers' attention_dropout, BART's and Whisper's
    functional dropout and layerdrop), or 0."""
    rates = [v for k, v in vars(module).items() if "drop" in k and isinstance(v, float) and 0 < v <= 1]
    return max(rates, default=0.0)


def refuse_checkpointing(model) -> None:
    """Gradient checkpointing, where it is on (training mode): each checkpointed layer runs its forward again
    during the backward pass, so the activations attnroute hooks are recorded twice and the gradients of the ones
    it kept never arrive (Gemma 3's patch and circuit crashed on it). Refused by name, before any work."""
    on = [n for n, m in model.named_modules() if m.training and getattr(m, "gradient_checkpointing", False) is True]
    if on:
        raise InputError(
            f"model has gradient checkpointing on in training mode ({on[0] or type(model).__name__}): its layers "
            "rerun their forward in the backward pass, which attnroute's gradients cannot follow; call "
            "model.eval() (or model.gradient_checkpointing_disable()) first",
            field="model",
        )
