"""Route a transformers model's attention through attnroute's engine, for the length of a `with`.

    with routed(loaded, probes=[...], interventions=[...], impl="blocked"):
        loaded.model(**batch)

transformers calls attention through its AttentionInterface; attnroute registers its own function
there together with a mask function (transformers drops the mask for an implementation it does
not know), switches the model to it, and on exit restores the model's implementation and removes
both registrations. transformers' sdpa_mask hands the function a bool mask [B, 1, Tq, Tk],
True = attend (attnroute's convention), or None when the mask is plain causal or absent.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field

import torch

from ..engine import attend, causal, from_additive

_counter = itertools.count()
_SESSIONS: dict[str, Session] = {}


@dataclass
class Session:
    layer_of: dict  # id(attention module) -> layer index
    probes: tuple = ()
    interventions: tuple = ()
    impl: str = "auto"
    calls: list = field(default_factory=list)  # (layer, Tq, Tk, mask kind) per call, for tests
    before_attend: list = field(default_factory=list)  # callables(layer, module, q, k, v)


def _make_attention_fn(name: str):
    def attnroute_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        s = _SESSIONS[name]
        layer = s.layer_of.get(id(module))
        if attention_mask is None:
            mask, kind = (causal(), "causal") if getattr(module, "is_causal", False) else (None, "none")
        elif attention_mask.dtype == torch.bool:
            mask, kind = attention_mask, "bool"
        else:  # eager-style additive masks, converted with their polarity checked
            mask, kind = from_additive(attention_mask), "additive"
        s.calls.append((layer, query.shape[2], key.shape[2], kind))
        for hook in s.before_attend:
            hook(layer, module, query, key, value)
        out = attend(
            query,
            key,
            value,
            mask,
            scale=scaling,
            impl=s.impl,
            probes=s.probes,
            interventions=s.interventions,
            layer=layer,
            softcap=kwargs.get("softcap"),
        )
        return out.transpose(1, 2).contiguous(), None  # (B, Tq, H, Dv), as transformers expects

    return attnroute_attention


@contextlib.contextmanager
def routed(loaded, probes=(), interventions=(), impl: str = "auto", before_attend=()):
    """Scoped routing: registers, switches, and always undoes both."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    name = f"attnroute_{next(_counter)}"
    model = loaded.model
    session = Session(
        {id(m): i for i, m in enumerate(loaded.attention_modules)},
        tuple(probes),
        tuple(interventions),
        impl,
        before_attend=list(before_attend),
    )
    previous = model.config._attn_implementation
    _SESSIONS[name] = session
    AttentionInterface.register(name, _make_attention_fn(name))
    AttentionMaskInterface.register(name, sdpa_mask)
    try:
        model.set_attn_implementation(name)
        yield session
    finally:
        model.set_attn_implementation(previous)
        AttentionInterface._global_mapping.pop(name, None)
        AttentionMaskInterface._global_mapping.pop(name, None)
        _SESSIONS.pop(name, None)


def registered_names() -> list[str]:
    """attnroute's registrations still present in transformers (empty outside a `routed` block)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    return [
        k
        for k in list(AttentionInterface._global_mapping) + list(AttentionMaskInterface._global_mapping)
        if k.startswith("attnroute_")
    ]
