"""How a target wants its mask, and how to call it without being fooled by it.

A target is called as ``fn(q, k, v, attn_mask=mask)`` with q [B, H, Tq, D], k/v [B, Hkv, Tk, D|Dv];
it returns [B, H, Tq, Dv] or a tuple whose first item is that. attnroute holds one logical mask
(bool, True = may attend) and converts it to the target's declared convention here:

    sdpa       bool, True = may attend (torch SDPA)
    mha        bool, True = masked out (nn.MultiheadAttention attn_mask)
    additive   float, 0 = may attend, -inf = masked
    hf         float, 0 = may attend, finfo(dtype).min = masked (transformers' eager 4-D mask)
    causal     no mask argument: ``fn(q, k, v)`` always applies causal attention itself (with the
               sliding window and sinks it declares, if any); a case whose mask is not that one
               cannot be said in this convention (n/a)

Calling guards (each a lesson from a real target):
- the target gets *copies* of q, k, v; a target that changes its inputs in place is named, and the
  reference always sees the pristine tensors;
- masks are sent in the smallest broadcast shape first ([1, 1, Tq, Tk], [B, 1, 1, Tk], …); when the
  target raises on it, the full [B, 1, Tq, Tk] shape is tried, and the shapes accepted are recorded;
- every call has a timeout (a hung target is a failure, and later calls are not attempted);
- ``Unsupported`` means n/a; any other exception, and a wrong output shape, is a failure.
"""

from __future__ import annotations

import threading

import torch

from ..engine import causal, to_additive, to_mha
from ..settings import CONVENTIONS
from .outcome import Unsupported

DEFAULT_TIMEOUT = 10.0  # seconds per call; the battery's tensors are tiny, so this is generous
# called with "start" and "end" around every call of a target: the check process's heartbeat, by which
# its parent tells a target that holds the interpreter (no thread can time it out) from a slow one
heartbeat = None


class TargetFailed(Exception):
    """The target raised, hung, mutated its inputs or returned the wrong shape: the check fails."""


def convert(keep: torch.Tensor | None, convention: str, dtype: torch.dtype):
    if keep is None or convention == "sdpa":
        return keep
    if convention == "mha":
        return to_mha(keep)
    if convention == "additive":
        return to_additive(keep, dtype)
    if convention == "hf":
        return to_additive(keep, dtype, sentinel="min")
    raise ValueError(f"unknown convention {convention!r}; expected one of {CONVENTIONS}")


def minimal(keep: torch.Tensor) -> torch.Tensor:
    """The smallest broadcast shape that says the same mask: size-1 dims where every slice agrees."""
    out = keep
    for dim in (0, 1, 2):
        if out.shape[dim] > 1 and bool((out == out.narrow(dim, 0, 1)).all()):
            out = out.narrow(dim, 0, 1)
    return out


def _describe(e: BaseException) -> str:
    text = str(e).splitlines()[0][:160] if str(e) else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class Caller:
    """Calls one target, remembering what it accepted and whether it ever hung."""

    def __init__(self, fn, convention: str, timeout: float = DEFAULT_TIMEOUT, own=None):
        if convention not in CONVENTIONS:
            raise ValueError(f"unknown convention {convention!r}; expected one of {CONVENTIONS}")
        self.fn, self.convention, self.timeout = fn, convention, timeout
        # (B, Tq, Tk) -> keep: the mask a causal-convention target applies itself, when it declared one (a
        # window, sinks); else plain causal
        self.own = own
        self.hung: str | None = None
        # "minimal": it accepted broadcast shapes ([1, 1, Tq, Tk], [B, 1, 1, Tk]); "full": it needed [B, 1, Tq, Tk]
        self.shapes: set[str] = set()
        self.mutated: str | None = None
        self.reached = 0  # calls the target took (it returned something or hung) rather than raised at

    def __call__(self, q, k, v, keep: torch.Tensor | None) -> torch.Tensor:
        """The target's output [B, H, Tq, Dv] for the logical keep-mask, or TargetFailed / Unsupported."""
        if self.convention == "causal":
            return self._call_causal(q, k, v, keep)
        if keep is None:
            return self._run(q, k, v, None)
        small = minimal(keep)
        full_shape = (q.shape[0], keep.shape[1], q.shape[2], k.shape[2])  # [B, 1|H, Tq, Tk]
        try:
            out = self._run(q, k, v, convert(small, self.convention, q.dtype))
            if tuple(small.shape) != full_shape:
                self.shapes.add("minimal")
            return out
        except TargetFailed as first:
            if self.hung or tuple(small.shape) == full_shape:
                raise
            full = keep.expand(*full_shape)
            try:
                out = self._run(q, k, v, convert(full.contiguous(), self.convention, q.dtype))
            except TargetFailed:
                raise first from None
            self.shapes.add("full")
            return out

    def _call_causal(self, q, k, v, keep):
        Tq, Tk = q.shape[2], k.shape[2]
        expected = causal().materialize(1, 1, Tq, Tk) if self.own is None else self.own(1, Tq, Tk)
        if keep is None or not bool((keep == expected).all()):
            raise Unsupported(
                "the target takes no mask and always applies "
                + ("causal attention" if self.own is None else "its own causal window")
            )
        return self._run(q, k, v, None, with_mask=False)

    def _run(self, q, k, v, mask, with_mask: bool = True) -> torch.Tensor:
        if self.hung:
            raise TargetFailed(f"not called: the target hung earlier ({self.hung})")
        copies = [t.clone() for t in (q, k, v)]
        args = (*copies, mask) if with_mask else tuple(copies)
        result: dict = {}

        def work():
            try:
                result["out"] = self.fn(*args[:3], attn_mask=args[3]) if with_mask else self.fn(*args)
            except BaseException as e:  # noqa: BLE001  (whatever the target raises is reported)
                result["error"] = e

        worker = threading.Thread(target=work, daemon=True)  # a hung target cannot hold the process
        if heartbeat is not None:
            heartbeat("start")
        worker.start()
        worker.join(self.timeout)
        if heartbeat is not None:
            heartbeat("end")
        if worker.is_alive():
            self.reached += 1
            self.hung = f"no answer within {self.timeout:g} s"
            raise TargetFailed(f"did not return within {self.timeout:g} s")
        if "error" in result:
            if isinstance(result["error"], Unsupported):
                raise result["error"]
            raise TargetFailed(f"raised {_describe(result['error'])}")
        self.reached += 1
        for name, original, copy in zip("qkv", (q, k, v), copies):
            if not torch.equal(torch.nan_to_num(original), torch.nan_to_num(copy)) or copy.dtype != original.dtype:
                self.mutated = self.mutated or name
        return _output(result["out"], q, v)


def _output(out, q, v) -> torch.Tensor:
    if isinstance(out, (tuple, list)) and out:
        out = out[0]
    want = (*q.shape[:3], v.shape[-1])
    if not isinstance(out, torch.Tensor):
        raise TargetFailed(f"returned {type(out).__name__}, expected a tensor [B, H, Tq, Dv] = {list(want)}")
    if not out.is_floating_point():
        raise TargetFailed(f"returned a tensor of {str(out.dtype).removeprefix('torch.')}, expected floating point")
    if tuple(out.shape) != want:
        raise TargetFailed(f"returned shape {list(out.shape)}, expected [B, H, Tq, Dv] = {list(want)}")
    return out


__all__ = ["CONVENTIONS", "Caller", "TargetFailed", "Unsupported", "convert", "minimal"]
