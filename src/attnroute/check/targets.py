"""What can be checked: a user's `module:function`, torch's attention, attnroute's backends, and the
attention function plus mask construction a transformers model really uses.

Each target resolves to one or more (name, fn, convention) triples; `hf:` targets give one per
attention implementation the model supports on CPU (eager, sdpa).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..engine import InputError, causal
from .outcome import CheckResult, Unsupported


class TargetError(InputError):
    """The target cannot be loaded or called: exit status 2."""


@dataclass
class Target:
    name: str
    fn: object
    convention: str
    head_dim: int | None = None  # the D the battery uses (a model's own head dim)
    mask_family: str = "any"  # the masks it can express: any, causal (its nature), bidirectional (an encoder)
    mask_source: str = ""  # who built the masks, named in a failing mask check
    extras: dict = field(default_factory=dict)  # name -> () -> CheckResult, checks beyond the battery
    scale: float | None = None  # the temperature the target means to use (a model's own `scaling`)
    softcap: float | None = None  # its soft cap before the mask (a model's `attn_logit_softcapping`)
    window: int | None = None  # a decoder's sliding window of W keys (its own mask in the causal convention)
    sinks: int = 0  # leading keys such a decoder keeps visible to every query


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
    """``module:function`` (importable from the working directory), or ``path/to/file.py:function``."""
    module_name, _, attr = spec.rpartition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = _module_from_file(module_name) if module_name.endswith(".py") else importlib.import_module(module_name)
    except TargetError:
        raise
    except Exception as e:  # the user's module may fail in any way while importing
        raise TargetError(f"cannot import {module_name!r}: {type(e).__name__}: {e}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise TargetError(f"{module_name!r} has no callable {attr!r}")
    return fn


def _module_from_file(path: str):
    """A module loaded from a .py file the user named (its folder on sys.path, for its own imports)."""
    import importlib.util

    p = Path(path)
    if not p.is_file():
        raise TargetError(f"no such file {path!r}: give path/to/file.py:function or module:function")
    sys.path.insert(0, str(p.resolve().parent))
    spec = importlib.util.spec_from_file_location(p.stem, p)
    module = importlib.util.module_from_spec(spec)
    sys.modules[p.stem] = module
    spec.loader.exec_module(module)
    return module


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
            raise Unsupported("nn.MultiheadAttention has no grouped-query heads")
        if v.shape[-1] != D:
            raise Unsupported("nn.MultiheadAttention's heads share one size for q, k and v")
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
                raise Unsupported("ProbSparse takes no arbitrary mask, only its causal flag (Tq = Tk)")
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
    """transformers' own code end to end, once per attention implementation (eager, sdpa): the mask
    comes from the model's own mask construction (create_causal_mask / create_bidirectional_mask with
    the model's config, a 2-D padding mask and, for decoding, a DynamicCache), the attention from the
    implementation's own function (the model's eager_attention_forward, sdpa_attention_forward),
    called with the model's own ``scaling`` read from its attention module at call time."""
    from ..models import load

    lm = load(name)
    layer = _full_attention_layer(lm.model.config)  # the layer the battery's calls stand for
    module = lm.attention_modules[layer]
    eager_fn = _eager_function(module)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    beyond = _beyond_the_battery(module)
    causal_model = bool(getattr(module, "is_causal", False))
    head_dim = int(getattr(module, "head_dim", 0) or lm.model.config.hidden_size // lm.n_heads)
    builder = "create_causal_mask" if causal_model else "create_bidirectional_mask"
    targets = []
    for impl, attn_fn in (("eager", eager_fn), ("sdpa", sdpa_attention_forward)):
        mask_fn = f"{builder} → {impl}_mask"
        why_not = beyond or _implementation_refused(lm.model, impl)
        fn = _hf_call(lm, module, attn_fn, impl, causal_model, layer) if why_not is None else _not_checkable(why_not)
        extras = {"cached_decode": _cached_decode(lm, impl)} if causal_model and why_not is None else {}
        targets.append(
            Target(
                f"hf:{name}[{impl}]",
                fn,
                "sdpa",
                head_dim=head_dim,
                mask_family="causal" if causal_model else "bidirectional",
                mask_source=mask_fn,
                extras=extras,
                scale=float(module.scaling),
                softcap=_softcap_of(module),
            )
        )
    return targets


def _softcap_of(module) -> float | None:
    """The attention soft cap a transformers module applies (Gemma 2's attn_logit_softcapping), or None."""
    cap = getattr(module, "attn_logit_softcapping", None)
    cap = cap or getattr(getattr(module, "config", None), "attn_logit_softcapping", None)
    return float(cap) if cap else None


def _beyond_the_battery(module) -> str | None:
    """What a model's attention adds that the battery's reference does not model (every check would
    fail for the battery's reason, not the model's)."""
    if getattr(module, "sinks", None) is not None:
        return (
            f"{type(module).__name__} adds per-head sink logits to its softmax, which the battery's reference "
            "does not model; `attnroute heads` compares attnroute's sinks with the model's own"
        )
    return None


def _implementation_refused(model, impl: str) -> str | None:
    """transformers refuses some implementations for some models (gemma2, gpt-oss: no sdpa)."""
    previous = model.config._attn_implementation
    try:
        model.set_attn_implementation(impl)
    except (ValueError, ImportError) as e:
        return f"transformers refuses {impl} for this model: {' '.join(str(e).split())[:160]}"
    finally:
        model.set_attn_implementation(previous)
    return None


def _not_checkable(reason: str):
    def fn(q, k, v, attn_mask=None):
        raise Unsupported(reason)

    return fn


def _full_attention_layer(config) -> int:
    """The first layer without a sliding window (gemma2/3, gpt-oss alternate), else 0."""
    types = getattr(config, "layer_types", None) or []
    return next((i for i, t in enumerate(types) if t != "sliding_attention"), 0)


def _sliding_window(config, layer: int) -> int | None:
    """The window of ``layer`` (the one the battery's calls stand for), or None."""
    window = getattr(config, "sliding_window", None)
    if not window or getattr(config, "use_sliding_window", True) is False:
        return None
    types = getattr(config, "layer_types", None)
    if types and types[layer] != "sliding_attention":
        return None
    return int(window)


def _eager_function(module):
    mod = sys.modules[type(module).__module__]
    fn = getattr(mod, "eager_attention_forward", None)
    if fn is None:
        raise TargetError(f"{type(module).__name__}'s module has no eager_attention_forward")
    return fn


class _Stub(torch.nn.Module):
    """The model's attention module as the attention function sees it, with the battery's head
    grouping; ``scaling`` is read from the real module on every call (so a wrong one is caught)."""

    def __init__(self, real, H, Hkv, layer: int = 0):
        super().__init__()
        self.real = [real]  # a list: not registered as a submodule
        self.is_causal = getattr(real, "is_causal", False)
        self.num_key_value_groups = H // Hkv
        self.layer_idx = layer
        self.training = False
        self.config = real.config

    @property
    def scaling(self):
        return self.real[0].scaling


def _padding_of(keep: torch.Tensor) -> torch.Tensor:
    """transformers' 2-D attention_mask [B, Tk]: a key is real when some query of its example sees it."""
    return keep.any(dim=2).any(dim=1).long()


def _expressible(config, keep: torch.Tensor, layer: int, causal_model: bool, name: str) -> torch.Tensor:
    """The 2-D padding mask [B, Tk] transformers would build ``keep`` from, or Unsupported when it cannot
    (a window it would impose, Tq > Tk in a decoder, a mask that is not padding (and causal order))."""
    B, _, Tq, Tk = keep.shape
    am = _padding_of(keep)
    expressible = am[:, None, None, :].bool().expand(B, 1, Tq, Tk)
    window = _sliding_window(config, layer)
    if window is not None and Tk > window:
        raise Unsupported(
            f"this model's layer {layer} attends within a sliding window of {window} tokens, so transformers "
            f"builds a windowed mask (and cache) for {Tk} keys; the battery's masks are not windowed"
        )
    if causal_model:
        if Tq > Tk:
            raise Unsupported("a transformers decoder's queries are a suffix of its keys (Tq <= Tk)")
        expressible = expressible & causal().materialize(1, 1, Tq, Tk)
    if not bool((expressible == keep).all()):
        raise Unsupported(
            "transformers builds this model's masks from a 2-D padding mask"
            + (" and causal order" if causal_model else "")
            + "; this mask is not one of them"
        )
    return am


def _model_mask(lm, config, am: torch.Tensor, q: torch.Tensor, Tk: int, causal_model: bool):
    """The mask the model's own code builds for a padding mask ``am`` [B, Tk] and queries q [B, H, Tq, D]:
    a decoder's after Tk − Tq cached keys (transformers' is_causal skip allowed, as the model calls it)."""
    from transformers import DynamicCache
    from transformers.masking_utils import create_bidirectional_mask, create_causal_mask

    B, _, Tq, D = q.shape
    embeds = torch.zeros(B, Tq, config.hidden_size, dtype=q.dtype)
    if not causal_model:
        return create_bidirectional_mask(
            config=config, inputs_embeds=embeds, attention_mask=am, allow_is_bidirectional_skip=True
        )
    cache = DynamicCache(config=config)
    past = Tk - Tq
    if past:
        filler = torch.zeros(B, lm.n_kv_heads, past, D, dtype=q.dtype)
        for i in range(config.num_hidden_layers):
            cache.update(filler, filler, i)
    positions = torch.arange(past, Tk)[None].expand(B, -1)
    return create_causal_mask(
        config=config,
        inputs_embeds=embeds,
        attention_mask=am,
        cache=cache,
        position_ids=positions,
        allow_is_causal_skip=True,
    )


def _hf_call(lm, real_module, attn_fn, impl: str, causal_model: bool, layer: int = 0):
    import copy

    config = copy.deepcopy(lm.model.config)
    config._attn_implementation = impl

    def fn(q, k, v, attn_mask=None):
        B, H, Tq, D = q.shape
        Tk = k.shape[2]
        if k.shape[1] != H and getattr(config, "num_key_value_heads", None) is None:
            raise Unsupported(f"{type(real_module).__name__} has no grouped-query heads")
        keep = torch.ones(B, 1, Tq, Tk, dtype=torch.bool) if attn_mask is None else attn_mask.expand(B, 1, Tq, Tk)
        am = _expressible(config, keep, layer, causal_model, type(real_module).__name__)
        mask = _model_mask(lm, config, am, q, Tk, causal_model)
        cap = _softcap_of(real_module)
        stub = _Stub(real_module, H, k.shape[1], layer)
        extra = {"softcap": cap} if cap else {}
        out, _ = attn_fn(stub, q, k, v, mask, scaling=real_module.scaling, dropout=0.0, **extra)
        return out.transpose(1, 2)  # (B, H, Tq, Dv)

    return fn


HF_DECODE_WINDOW = 3  # a windowed model decodes with this window here, so that 9 tokens cross it


def _cached_decode(lm, impl: str):
    """Prefill then decode token by token with the model's own cache, against recomputing the whole
    sequence each step: the last logits must agree (the model end to end, not one attention call). A
    model with sliding windows decodes with them narrowed to 3 keys (restored after), so that its cached
    keys cross the window — a window its cache or mask forgets for cached keys shows here."""

    def run() -> CheckResult:
        with _narrowed_window(lm.model.config) as window:
            worst = _decode_gap(lm.model, impl)
        tol = 1e-3
        said = f", with its sliding window narrowed to {window} keys" if window else ""
        if worst <= tol:
            return CheckResult.ok(
                "cached_decode",
                f"3 cached decoding steps and a 3-token chunk after a 6-token prefill equal full recomputation{said} "
                f"(max |Δlogit| {worst:.1e})",
            )
        cause = "; the window is not applied to the cached keys as it is to a whole sequence" if window else ""
        return CheckResult.fail(
            "cached_decode",
            f"cached decoding differs from recomputation by {worst:.3g} in the logits (tolerance {tol:g}){said}{cause}",
        )

    return run


@contextlib.contextmanager
def _narrowed_window(config):
    """config.sliding_window set to HF_DECODE_WINDOW for the block when the model has one, then restored."""
    old = getattr(config, "sliding_window", None)
    if not old or getattr(config, "use_sliding_window", True) is False:
        yield None
        return
    config.sliding_window = min(int(old), HF_DECODE_WINDOW)
    try:
        yield config.sliding_window
    finally:
        config.sliding_window = old


def _decode_gap(model, impl: str) -> float:
    """The largest |Δlogit| between cached decoding (a 6-token prefill, 3 steps, a chunk of 3) and
    recomputing the whole sequence."""
    from transformers import DynamicCache

    previous = model.config._attn_implementation
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(100, min(5000, model.config.vocab_size), (1, 12), generator=g)
    try:
        model.set_attn_implementation(impl)
        with torch.no_grad():
            cache = DynamicCache(config=model.config)
            model(input_ids=ids[:, :6], cache=cache, use_cache=True)
            worst = 0.0
            for start, end in ((6, 7), (7, 8), (8, 9), (9, 12)):  # three steps of one token, then a chunk of 3
                out = model(input_ids=ids[:, start:end], cache=cache, use_cache=True).logits
                full = model(input_ids=ids[:, :end]).logits[:, start:end]
                worst = max(worst, float((out - full).abs().max()))
    finally:
        model.set_attn_implementation(previous)
    return worst
