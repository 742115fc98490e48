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
import functools
import itertools
from dataclasses import dataclass, field

import torch

from ..engine import InputError, attend, causal, from_additive
from ..progress import checkpoint

# Keyword arguments transformers' attention interface passes that say nothing about the attention
# itself (bookkeeping for caches, outputs and positions already applied to q and k).
BOOKKEEPING = frozenset(
    {
        "position_ids",
        "cache_position",
        "output_attentions",
        "output_hidden_states",
        "use_cache",
        "past_key_values",
        "past_key_value",
        "return_dict",
        "layer_idx",
        "query_length",
    }
)
# What attnroute implements, and how (see _engine_arguments).
IMPLEMENTED = frozenset({"scaling", "dropout", "softcap", "sliding_window", "s_aux", "position_bias", "is_causal"})
# What the arguments attnroute does not implement mean, for the refusal message.
KNOWN_UNSUPPORTED = {
    "head_mask": "a per-head mask on the weights",
    "layer_head_mask": "a per-head mask on the weights",
    "alibi": "ALiBi position slopes",
    "sinks": "attention sinks",
    "attention_chunk_size": "chunked attention",
    "use_top_left_mask": "top-left causal alignment",
}


class UnsupportedModel(InputError):
    """The model asks its attention for something attnroute does not implement; refused by name."""


def _engine_arguments(module, Tk: int, kwargs: dict) -> dict:
    """Map the interface's keyword arguments onto attend(): implemented ones are translated, pure
    bookkeeping is ignored, and any other argument that is not None is refused by name — dropping
    an argument silently gave wrong numbers (gpt-oss's sinks, T5's position bias)."""
    for name, value in kwargs.items():
        if name in IMPLEMENTED or name in BOOKKEEPING or value is None or value is False:
            continue
        what = KNOWN_UNSUPPORTED.get(name, "an argument")
        raise UnsupportedModel(
            f"this model passes `{name}` ({what}) to its attention, which attnroute does not implement; "
            "it cannot be read without changing its numbers"
        )
    dropout = kwargs.get("dropout") or 0.0
    if dropout and module.training:
        raise UnsupportedModel(f"the model is in training mode with attention dropout {dropout}; call model.eval()")
    window = kwargs.get("sliding_window")
    return {
        "scale": kwargs.get("scaling"),
        "softcap": kwargs.get("softcap"),
        "sinks": kwargs.get("s_aux"),
        "bias": kwargs.get("position_bias"),
        "_window": window if window and Tk > window else None,
    }


_counter = itertools.count()
_SESSIONS: dict[str, Session] = {}
_REPLAYS: list[dict] = []  # replay(): the boxes waiting for an attention call's q, k, v (innermost last)


CACHES = frozenset({"cache", "past_key_values", "past_key_value", "layer_past"})


class _Captured(Exception):
    """Ends a replayed attention forward at its attention call (replay())."""


def replay(module, args: tuple, kwargs: dict, **replace) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The q [B, H, T, D], k, v [B, Hkv, Tk, D(v)] an attention module would attend with, were its call's
    keyword arguments ``replace``d (hidden_states, key_value_states): its own forward — projections, norms of
    q and k, rotary embeddings, whatever the architecture does — run up to the attention call and stopped
    there. ``args``/``kwargs``: a call of the module (recorded by a forward pre-hook). Only inside routed()."""
    box: dict = {}
    kwargs = {k: (None if k in CACHES else v) for k, v in kwargs.items()}  # a replay must not append to a cache
    if "hidden_states" in replace and args and "hidden_states" not in kwargs:
        args = (replace.pop("hidden_states"), *args[1:])
    _REPLAYS.append(box)
    try:
        module.forward(*args, **{**kwargs, **replace})
    except _Captured:
        pass
    finally:
        _REPLAYS.pop()
    if "q" not in box:
        raise InputError(f"{type(module).__name__} did not reach its attention call when replayed")
    return box["q"], box["k"], box["v"]


@dataclass
class Session:
    layer_of: dict  # id(attention module) -> layer index
    probes: tuple = ()
    interventions: tuple = ()
    impl: str = "auto"
    calls: list = field(default_factory=list)  # (layer, Tq, Tk, mask kind) per call, for tests
    before_attend: list = field(default_factory=list)  # callables(layer, module, q, k, v)
    after_attend: list = field(default_factory=list)  # callables(layer, out [B, H, Tq, Dv]) -> out
    on_attend: list = field(default_factory=list)  # callables(layer, mask, engine arguments): what attend got
    drawn: tuple = ()  # (mask, Tq, Tk, draws causal?): the last bool mask checked, held so no other takes its id


def _draws_causal(mask: torch.Tensor, Tq: int, Tk: int) -> bool:
    """True when a bool mask [B, 1, Tq, Tk] is bottom-right causal in every row, checked cell by cell (no
    guess): what transformers builds for queries after a KV cache. The engine then knows the grid it is
    (`causal()`), and its kernels may skip the future instead of reading a mask."""
    if mask.dim() != 4 or mask.shape[1] != 1 or tuple(mask.shape[-2:]) != (Tq, Tk) or Tq > Tk:
        return False
    return bool(torch.equal(mask, _causal_grid(Tq, Tk, mask.device).expand_as(mask)))


def _seen_causal(s: Session, mask: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> bool:
    """_draws_causal, checked once per mask: transformers hands every layer of a forward the same tensor."""
    shape = (query.shape[2], key.shape[2])
    if not s.drawn or s.drawn[0] is not mask or s.drawn[1:3] != shape:
        s.drawn = (mask, *shape, _draws_causal(mask, *shape))
    return s.drawn[3]


@functools.lru_cache(maxsize=4)
def _causal_grid(Tq: int, Tk: int, device) -> torch.Tensor:
    """[Tq, Tk] bottom-right causal, kept: every layer of a rerun compares its mask with the same grid."""
    return torch.ones(Tq, Tk, dtype=torch.bool, device=device).tril(Tk - Tq)


def _make_attention_fn(name: str):
    def attnroute_attention(module, query, key, value, attention_mask, **kwargs):
        if _REPLAYS and not _REPLAYS[-1]:  # a replay(): hand back what would be attended, attend nothing
            _REPLAYS[-1].update(q=query, k=key, v=value)
            raise _Captured
        checkpoint()  # a cancelled request (the explorer's) stops here, within one layer
        s = _SESSIONS[name]
        layer = s.layer_of.get(id(module))
        args = _engine_arguments(module, key.shape[2], kwargs)
        if attention_mask is None:
            if args.pop("_window") is not None:  # transformers builds the window into the mask; never absent
                raise UnsupportedModel(
                    f"layer {layer} has a sliding window of {kwargs['sliding_window']} but received no mask "
                    f"for {key.shape[2]} keys; attnroute will not guess the window's alignment"
                )
            is_causal = kwargs.get("is_causal", getattr(module, "is_causal", False))
            mask, kind = (causal(), "causal") if is_causal else (None, "none")
        elif attention_mask.dtype == torch.bool:
            drawn = _seen_causal(s, attention_mask, query, key)
            mask, kind = (causal(), "causal") if drawn else (attention_mask, "bool")
        else:  # eager-style additive masks, converted with their polarity checked
            mask, kind = from_additive(attention_mask), "additive"
        args.pop("_window", None)
        s.calls.append((layer, query.shape[2], key.shape[2], kind))
        for hook in s.before_attend:
            hook(layer, module, query, key, value)
        for hook in s.on_attend:
            hook(layer, mask, args)
        out = attend(
            query,
            key,
            value,
            mask,
            impl=s.impl,
            probes=s.probes,
            interventions=s.interventions,
            layer=layer,
            **args,
        )
        for hook in s.after_attend:
            out = hook(layer, out)
        return out.transpose(1, 2).contiguous(), None  # (B, Tq, H, Dv), as transformers expects

    return attnroute_attention


@contextlib.contextmanager
def routed(loaded, probes=(), interventions=(), impl: str = "auto", before_attend=(), after_attend=(), on_attend=()):
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
        after_attend=list(after_attend),
        on_attend=list(on_attend),
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


__all__ = ["BOOKKEEPING", "Session", "UnsupportedModel", "registered_names", "replay", "routed"]
