"""What can be checked: a user's `module:function`, torch's attention, attnroute's backends, and the
attention function plus mask construction a transformers model really uses.

Each target resolves to one or more (name, fn, convention) triples; `hf:` targets give one per
attention implementation the model supports on CPU (eager, sdpa).
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass

import torch

from ..engine import InputError


class TargetError(InputError):
    """The target cannot be loaded or called: exit status 2."""


@dataclass
class Target:
    name: str
    fn: object
    convention: str


def resolve(spec: str, convention: str = "sdpa") -> list[Target]:
    if spec in BUILTINS:
        return [BUILTINS[spec]()]
    if spec.startswith("hf:"):
        return hf_targets(spec[3:])
    if ":" in spec:
        return [Target(spec, _import_function(spec), convention)]
    raise TargetError(
        f"unknown target {spec!r}: give module:function or one of {', '.join(sorted(BUILTINS))}, "
        "hf:smollm2, hf:minilm, hf:PATH"
    )


def _import_function(spec: str):
    module_name, _, attr = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # the user's module may fail in any way while importing
        raise TargetError(f"cannot import {module_name!r}: {type(e).__name__}: {e}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise TargetError(f"{module_name!r} has no callable {attr!r}")
    return fn


# ------------------------------------------------------------------------------------ built-ins


def _torch_sdpa():
    def sdpa(q, k, v, attn_mask=None):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, enable_gqa=q.shape[1] != k.shape[1]
        )

    return Target("torch.sdpa", sdpa, "sdpa")


def _torch_mha():
    """nn.MultiheadAttention with identity in/out projections, so its attention core is what runs.
    The mask goes in as its attn_mask (True = masked out, [B·H, Tq, Tk]) and, where a key is
    masked for every query, also as key_padding_mask — how users pass padding."""

    def mha(q, k, v, attn_mask=None):
        B, H, Tq, D = q.shape
        if k.shape[1] != H:
            raise ValueError("nn.MultiheadAttention has no grouped-query heads")
        E = H * D
        m = torch.nn.MultiheadAttention(E, H, bias=False, batch_first=True, dtype=q.dtype)
        with torch.no_grad():
            m.in_proj_weight.copy_(torch.eye(E, dtype=q.dtype).repeat(3, 1))
            m.out_proj.weight.copy_(torch.eye(E, dtype=q.dtype))
        m.eval()
        merge = lambda t: t.transpose(1, 2).reshape(B, t.shape[2], E)  # noqa: E731  (B, T, H·D)
        kpm = None
        if attn_mask is not None:
            full = attn_mask.expand(B, H, Tq, k.shape[2])
            kpm = full.all(dim=2).all(dim=1)  # (B, Tk): keys masked for every query and head
            attn_mask = full.reshape(B * H, Tq, k.shape[2])
        with torch.no_grad():
            out, _ = m(merge(q), merge(k), merge(v), attn_mask=attn_mask, key_padding_mask=kpm)
        return out.view(B, Tq, H, D).transpose(1, 2)

    return Target("torch.mha", mha, "mha")


def _attnroute(impl):
    from ..engine import attend

    def fn(q, k, v, attn_mask=None):
        return attend(q, k, v, attn_mask, impl=impl, memory_budget=1 << 34)

    return lambda: Target(f"attnroute.{impl}", fn, "sdpa")


def _probsparse():
    from ..engine import causal, probsparse_attend

    def fn(q, k, v, attn_mask=None):
        is_causal = False
        if attn_mask is not None:
            Tq, Tk = q.shape[2], k.shape[2]
            full = causal().materialize(1, 1, Tq, Tk)
            if Tq != Tk or not bool((attn_mask == full).all()):
                raise ValueError("ProbSparse takes no arbitrary mask, only its causal flag (Tq = Tk)")
            is_causal = True
        return probsparse_attend(q, k, v, factor=q.shape[2] + k.shape[2], causal=is_causal)  # every query active

    return Target("attnroute.probsparse", fn, "sdpa")


BUILTINS = {
    "torch.sdpa": _torch_sdpa,
    "torch.mha": _torch_mha,
    "attnroute.eager": _attnroute("eager"),
    "attnroute.blocked": _attnroute("blocked"),
    "attnroute.sdpa": _attnroute("sdpa"),
    "attnroute.probsparse": _probsparse,
}


# ------------------------------------------------------------------------------------ transformers


def hf_targets(name: str) -> list[Target]:
    """transformers' own mask construction (sdpa_mask / eager_mask from its mask interface, fed the
    logical mask as a mask function) and its own attention function (sdpa_attention_forward, or the
    model's eager_attention_forward), called with a stub of the model's attention module."""
    from ..read.models import ModelLoadError, load

    try:
        lm = load(name)
    except ModelLoadError as e:
        raise TargetError(str(e)) from None
    module = lm.attention_modules[0]
    eager_fn = _eager_function(module)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    targets = []
    for impl, attn_fn in (("eager", eager_fn), ("sdpa", sdpa_attention_forward)):
        targets.append(
            Target(f"hf:{name}[{impl}]", _hf_call(module, attn_fn, ALL_MASK_ATTENTION_FUNCTIONS[impl], impl), "sdpa")
        )
    return targets


def _eager_function(module):
    mod = sys.modules[type(module).__module__]
    fn = getattr(mod, "eager_attention_forward", None)
    if fn is None:
        raise TargetError(f"{type(module).__name__}'s module has no eager_attention_forward")
    return fn


class _Stub(torch.nn.Module):
    def __init__(self, real, H, Hkv):
        super().__init__()
        self.is_causal = getattr(real, "is_causal", False)
        self.num_key_value_groups = H // Hkv
        self.layer_idx = 0
        self.training = False
        self.config = real.config


def _hf_call(real_module, attn_fn, mask_fn, impl):
    def fn(q, k, v, attn_mask=None):
        B, H, Tq, D = q.shape
        Tk = k.shape[2]
        stub = _Stub(real_module, H, k.shape[1])
        # "no mask" becomes an all-True mask: a causal module given None would apply is_causal itself
        keep = torch.ones(1, 1, Tq, Tk, dtype=torch.bool) if attn_mask is None else attn_mask
        keep = keep.expand(B, 1, Tq, Tk)
        offset = Tk - Tq  # queries sit bottom-right, as a cache position would put them
        mask = mask_fn(
            batch_size=B,
            q_length=Tq,
            kv_length=Tk,
            q_offset=offset,
            mask_function=lambda b, h, qi, kv: keep[b, 0, qi - offset, kv],
            attention_mask=None,
            dtype=q.dtype,
            device=q.device,
            allow_is_causal_skip=False,
        )
        out, _ = attn_fn(stub, q, k, v, mask, scaling=D**-0.5, dropout=0.0)
        return out.transpose(1, 2)  # (B, H, Tq, D)

    return fn
