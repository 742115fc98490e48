"""One place for input validation: every error says what was expected, what came, what to do.

Letters (used across attnroute):
    B batch, H query heads, Hkv key/value heads, G = H // Hkv query heads per kv head,
    Tq queries, Tk keys, D query/key head dim, Dv value head dim.
"""

from __future__ import annotations

import torch

from .errors import InputError, InputTypeError


def shape_of(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def as_int(value, name: str, minimum: int | None = None) -> int:
    """An integer argument (Python or tensor integer; never a float, bool or string), >= minimum."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputTypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    value = int(value)
    if minimum is not None and value < minimum:
        raise InputError(f"{name} must be >= {minimum}, got {value}")
    return value


def validate_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int, int, int, int, int]:
    """Check q [B,H,Tq,D], k [B,Hkv,Tk,D], v [B,Hkv,Tk,Dv]; return (B, H, Hkv, Tq, Tk, D, Dv)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise InputTypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            letters = "[B, H, Tq, D]" if name == "q" else "[B, Hkv, Tk, D]"
            raise InputError(f"{name} must be 4-D {letters}, got shape {shape_of(t)}")
    B, H, Tq, D = q.shape
    Bk, Hkv, Tk, Dk = k.shape
    Bv, Hv, Tv, Dv = v.shape
    if Dk != D:
        raise InputError(f"q and k must share the head dim D: q {shape_of(q)} has D={D}, k {shape_of(k)} has D={Dk}")
    if (Bk, Tk, Hkv) != (Bv, Tv, Hv):
        raise InputError(f"k and v must agree on [B, Hkv, Tk]: k {shape_of(k)}, v {shape_of(v)}")
    if Bk != B:
        raise InputError(f"q and k must share the batch size B: q {shape_of(q)}, k {shape_of(k)}")
    if Hkv == 0 or H % Hkv != 0:
        raise InputError(
            f"query heads H={H} must be a multiple of kv heads Hkv={Hkv} (q {shape_of(q)}, k {shape_of(k)}); "
            "grouped-query attention needs H = G * Hkv"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise InputError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.dtype.is_floating_point:
        raise InputTypeError(f"q, k, v must be real floating point (fp16, bf16, fp32, fp64), got {q.dtype}")
    if D < 1 or Dv < 1:
        raise InputError(f"head dims must be >= 1: q {shape_of(q)} has D={D}, v {shape_of(v)} has Dv={Dv}")
    return B, H, Hkv, Tq, Tk, D, Dv


def validate_keep(keep: torch.Tensor, B: int, H: int, Tq: int, Tk: int) -> torch.Tensor:
    """A bool keep-mask (True = may attend) must broadcast to [B, H, Tq, Tk]; return it as 4-D."""
    if keep.dtype != torch.bool:
        raise InputTypeError(
            f"mask tensor must be bool (True = may attend), got {keep.dtype}; convert it first with "
            "attnroute.from_additive / from_hf / from_mha_mask so its polarity is explicit"
        )
    if keep.dim() > 4:
        raise InputError(f"mask must broadcast to [B, H, Tq, Tk] = [{B}, {H}, {Tq}, {Tk}], got {shape_of(keep)}")
    keep4 = keep.reshape((1,) * (4 - keep.dim()) + tuple(keep.shape))  # (b?, h?, tq?, tk?)
    for have, want, letter in zip(keep4.shape, (B, H, Tq, Tk), ("B", "H", "Tq", "Tk")):
        if have not in (1, want):
            raise InputError(
                f"mask of shape {shape_of(keep)} does not broadcast to [B, H, Tq, Tk] = [{B}, {H}, {Tq}, {Tk}]: "
                f"its {letter} is {have}; was it built for another length?"
            )
    return keep4


def validate_bias(bias, B: int, H: int, Tq: int, Tk: int) -> torch.Tensor | None:
    """An additive score bias must be a float tensor broadcastable to [B, H, Tq, Tk], with no NaN or +inf
    (-inf is a mask, which belongs in ``mask`` where its polarity is checked); return it as 4-D."""
    if bias is None:
        return None
    if not isinstance(bias, torch.Tensor) or not bias.is_floating_point():
        raise InputTypeError(f"bias must be a float tensor (added to the scaled scores), got {shape_of(bias)}")
    if bias.dim() > 4:
        raise InputError(f"bias must broadcast to [B, H, Tq, Tk] = [{B}, {H}, {Tq}, {Tk}], got {shape_of(bias)}")
    b4 = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape))
    for have, want, letter in zip(b4.shape, (B, H, Tq, Tk), ("B", "H", "Tq", "Tk")):
        if have not in (1, want):
            raise InputError(
                f"bias of shape {shape_of(bias)} does not broadcast to [B, H, Tq, Tk] = [{B}, {H}, {Tq}, {Tk}]: "
                f"its {letter} is {have}"
            )
    if bool(torch.isnan(b4).any()) or bool(torch.isposinf(b4).any()) or bool(torch.isneginf(b4).any()):
        raise InputError("bias holds NaN or ±inf; a bias is finite (pass what may not be seen as a bool mask)")
    return b4


def validate_sinks(sinks, H: int) -> torch.Tensor | None:
    """Sink logits: one finite float per query head, shape [H]."""
    if sinks is None:
        return None
    if not isinstance(sinks, torch.Tensor) or not sinks.is_floating_point():
        raise InputTypeError(f"sinks must be a float tensor of shape [H] = [{H}], got {shape_of(sinks)}")
    if tuple(sinks.shape) != (H,):
        raise InputError(f"sinks must have shape [H] = [{H}] (one logit per query head), got {shape_of(sinks)}")
    if not bool(torch.isfinite(sinks).all()):
        raise InputError("sinks holds NaN or ±inf; sink logits must be finite")
    return sinks
