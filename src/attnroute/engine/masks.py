"""Masks as routes that exist: True = may attend.

A mask is a predicate over absolute positions ``(b, h, q_idx, kv_idx) -> bool`` (the shape
FlexAttention's mask_mod and transformers' masking_utils arrived at), called once with
broadcast index tensors, never per element. Masks compose with ``&``, ``|`` and ``~``.

Alignment. Query row ``i`` of ``Tq`` sits at absolute position ``Tk - Tq + i`` (bottom-right),
which is what KV-cache decoding needs. Causal, Tq=2, Tk=5 (flash-attn README)::

    bottom_right          top_left (must be asked for by name)
    ■ ■ ■ ■ ⬚             ■ ⬚ ⬚ ⬚ ⬚
    ■ ■ ■ ■ ■             ■ ■ ⬚ ⬚ ⬚

Tq=5, Tk=2: bottom-right gives rows ``⬚⬚ ⬚⬚ ⬚⬚ ■⬚ ■■`` (the top rows see nothing and
return zeros); top-left gives ``■⬚ ■■ ■■ ■■ ■■``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .errors import InputError, InputTypeError
from .validate import as_int

Predicate = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
ALIGNMENTS = ("bottom_right", "top_left")


class Mask:
    """A logical mask: materialize(B, H, Tq, Tk) -> bool [b?, h?, Tq, Tk] (size-1 dims broadcast)."""

    def rows(self, B: int, H: int, Tq: int, Tk: int, q0: int, q1: int, device=None) -> torch.Tensor:
        raise NotImplementedError

    def materialize(self, B: int, H: int, Tq: int, Tk: int, device=None) -> torch.Tensor:
        return self.rows(B, H, Tq, Tk, 0, Tq, device)

    def __and__(self, other: Mask) -> Mask:
        return _Combine("and", self, _as_mask(other))

    def __or__(self, other: Mask) -> Mask:
        return _Combine("or", self, _as_mask(other))

    def __invert__(self) -> Mask:
        return _Not(self)

    def grid(self, Tq: int, Tk: int, b: int = 0, h: int = 0) -> str:
        """The mask as rows of ■ (may attend) and ⬚ (may not), for docs and golden tests."""
        m = self.materialize(b + 1, h + 1, Tq, Tk)
        m = m.expand(b + 1, h + 1, Tq, Tk)[b, h]
        return "\n".join(" ".join("■" if x else "⬚" for x in row.tolist()) for row in m)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def _repr_html_(self) -> str:
        """Jupyter: the mask drawn on 8 queries × 8 keys (■ may attend), beside its repr; no script."""
        from html import escape

        from .display import card

        try:
            drawn = self.grid(8, 8)
        except Exception as e:  # a mask built for one length (padding, document) draws only at that length
            drawn = f"(drawn at its own length only: {e})"
        note = "<div style='color:#666'>8 queries × 8 keys; ■ may attend, bottom-right</div>"
        return card(repr(self), f"<pre style='line-height:1.1;margin:4px 0'>{escape(drawn)}</pre>{note}")


@dataclass(frozen=True, repr=False)
class Predicated(Mask):
    """A leaf: ``predicate(b, h, q_idx, kv_idx)`` with q_idx absolute under ``align``."""

    predicate: Predicate
    align: str = "bottom_right"
    name: str = "predicate"
    built_for_tk: int | None = None  # masks built from data of one length refuse another
    built_for_b: int | None = None

    def __post_init__(self):
        if self.align not in ALIGNMENTS:
            raise InputError(f"align must be one of {ALIGNMENTS}, got {self.align!r}")

    def rows(self, B, H, Tq, Tk, q0, q1, device=None):
        if self.built_for_tk is not None and self.built_for_tk != Tk:
            raise InputError(
                f"{self.name} mask was built for Tk={self.built_for_tk} keys but is used with Tk={Tk}; "
                "build it again for this length"
            )
        if self.built_for_b is not None and self.built_for_b not in (1, B):
            raise InputError(f"{self.name} mask was built for B={self.built_for_b} examples but is used with B={B}")
        offset = Tk - Tq if self.align == "bottom_right" else 0
        b = torch.arange(B, device=device).view(B, 1, 1, 1)
        h = torch.arange(H, device=device).view(1, H, 1, 1)
        q_idx = (torch.arange(q0, q1, device=device) + offset).view(1, 1, q1 - q0, 1)
        kv_idx = torch.arange(Tk, device=device).view(1, 1, 1, Tk)
        out = torch.as_tensor(self.predicate(b, h, q_idx, kv_idx), device=device)
        if out.dtype != torch.bool:
            raise InputTypeError(f"mask predicate {self.name!r} must return bool, got {out.dtype}")
        out = out.reshape((1,) * (4 - out.dim()) + tuple(out.shape))  # (b?, h?, tq?, tk?)
        shape = [s if s == 1 else n for s, n in zip(out.shape, (B, H, q1 - q0, Tk))]
        return out.expand(*shape)

    def __repr__(self):
        return f"{self.name}({self.align})" if self.align != "bottom_right" else self.name


@dataclass(frozen=True, repr=False)
class _Combine(Mask):
    op: str
    left: Mask
    right: Mask

    def rows(self, B, H, Tq, Tk, q0, q1, device=None):
        a = self.left.rows(B, H, Tq, Tk, q0, q1, device)
        b = self.right.rows(B, H, Tq, Tk, q0, q1, device)
        return (a & b) if self.op == "and" else (a | b)

    def __repr__(self):
        return f"({self.left!r} {'&' if self.op == 'and' else '|'} {self.right!r})"


@dataclass(frozen=True, repr=False)
class _Not(Mask):
    inner: Mask

    def rows(self, B, H, Tq, Tk, q0, q1, device=None):
        return ~self.inner.rows(B, H, Tq, Tk, q0, q1, device)

    def __repr__(self):
        return f"~{self.inner!r}"


@dataclass(frozen=True, repr=False)
class TensorMask(Mask):
    """A bool tensor (True = may attend) broadcastable to [B, H, Tq, Tk], wrapped as a Mask."""

    keep: torch.Tensor

    def rows(self, B, H, Tq, Tk, q0, q1, device=None):
        from .validate import validate_keep

        keep = validate_keep(self.keep, B, H, Tq, Tk)
        keep = keep if keep.shape[2] == 1 else keep[:, :, q0:q1]
        return keep.to(device) if device is not None else keep

    def __repr__(self):
        return f"tensor{list(self.keep.shape)}"


def _as_mask(m) -> Mask:
    if isinstance(m, Mask):
        return m
    if isinstance(m, torch.Tensor):
        return TensorMask(m)
    raise InputTypeError(f"expected an attnroute Mask or a bool tensor, got {type(m).__name__}")


# ---------------------------------------------------------------- the standard masks


def full() -> Mask:
    """Every route exists."""
    return Predicated(lambda b, h, q, kv: torch.ones((), dtype=torch.bool), name="full")


def predicate(fn: Predicate, *, align: str = "bottom_right", name: str = "predicate") -> Mask:
    """Any ``fn(b, h, q_idx, kv_idx) -> bool tensor`` over absolute positions."""
    return Predicated(fn, align=align, name=name)


def causal(align: str = "bottom_right") -> Mask:
    """Query at absolute position p may attend keys 0..p.  Tq=Tk=4::

    ■ ⬚ ⬚ ⬚
    ■ ■ ⬚ ⬚
    ■ ■ ■ ⬚
    ■ ■ ■ ■
    """
    return Predicated(lambda b, h, q, kv: kv <= q, align=align, name="causal")


def causal_alignment(mask) -> str | None:
    """The alignment of a plain :func:`causal` mask, or None for any other mask.

    Backends read this to take a fast path (torch's ``is_causal``, a key-range shortcut) instead of
    materialising the keep grid; one home, so every backend agrees on which masks qualify."""
    return mask.align if isinstance(mask, Predicated) and mask.name == "causal" else None


def is_torch_causal(mask, Tq: int, Tk: int) -> bool:
    """True when ``mask`` draws the grid of torch's ``is_causal=True``: causal aligned top-left.
    Bottom-right causal draws the same grid only when Tq == Tk.  Tq=2, Tk=4::

        top_left (torch)   bottom_right (ours)
        ■ ⬚ ⬚ ⬚            ■ ■ ■ ⬚
        ■ ■ ⬚ ⬚            ■ ■ ■ ■
    """
    align = causal_alignment(mask)
    return align == "top_left" or (align == "bottom_right" and Tq == Tk)


def sliding_window(window: int, align: str = "bottom_right") -> Mask:
    """Causal window of ``window`` keys including the query's own (transformers' convention).

    W=2, T=4::

        ■ ⬚ ⬚ ⬚
        ■ ■ ⬚ ⬚
        ⬚ ■ ■ ⬚
        ⬚ ⬚ ■ ■

    Other libraries count differently; see :func:`window_from`.
    """
    window = as_int(window, "window")
    if window < 1:
        raise InputError(f"sliding window must be >= 1 key (it includes the query's own position), got {window}")
    return Predicated(lambda b, h, q, kv: (kv <= q) & (kv > q - window), align=align, name=f"window{window}")


WINDOW_CONVENTIONS = {
    "transformers": 0,  # W keys including self            (kv_idx > q_idx - W)
    "flash_attn": 1,  # window_size=(left, 0): left + 1 keys (inclusive left)
    "flex": 1,  # attention-gym: q_idx - kv_idx <= W  -> W + 1 keys
}


def window_from(value: int, convention: str) -> int:
    """Translate another library's window parameter into attnroute's W (keys incl. self)."""
    if convention not in WINDOW_CONVENTIONS:
        raise InputError(f"unknown window convention {convention!r}; expected one of {sorted(WINDOW_CONVENTIONS)}")
    return value + WINDOW_CONVENTIONS[convention]


def window_to(window: int, convention: str) -> int:
    """attnroute's W expressed in another library's convention (inverse of window_from)."""
    return window - window_from(0, convention)


def padding(lengths, Tk: int | None = None, side: str = "right") -> Mask:
    """Keys beyond each example's length are padding.  lengths=[3], Tk=5, right::

    ■ ■ ■ ⬚ ⬚        (left: ⬚ ⬚ ■ ■ ■)
    """
    if side not in ("right", "left"):
        raise InputError(f"padding side must be 'right' or 'left', got {side!r}")
    raw = torch.as_tensor(lengths)
    if raw.is_floating_point() or raw.is_complex() or raw.dtype == torch.bool:
        raise InputTypeError(f"padding lengths must be integers, got {raw.tolist()} ({raw.dtype})")
    lengths = raw.to(torch.long).reshape(-1)
    if (lengths < 0).any():
        raise InputError(f"padding lengths must be >= 0, got {lengths.tolist()}")
    if Tk is not None and (lengths > Tk).any():
        raise InputError(f"padding lengths {lengths.tolist()} exceed Tk={Tk}")
    B = lengths.numel()

    def keep(b, h, q, kv):
        if int(lengths.max()) > kv.shape[-1]:  # a length beyond Tk would silently mean "all visible"
            raise InputError(f"padding lengths {lengths.tolist()} exceed the {kv.shape[-1]} keys this mask meets")
        n = lengths.to(kv.device)[b]  # (B, 1, 1, 1)
        start = (kv.shape[-1] - n) if side == "left" else torch.zeros_like(n)
        return (kv >= start) & (kv < start + n)

    return Predicated(keep, name=f"padding_{side}", built_for_tk=Tk, built_for_b=B)


def from_hf(attention_mask: torch.Tensor) -> Mask:
    """transformers' 2-D ``attention_mask`` [B, Tk] (1 = real token, 0 = padding), left or right."""
    am = torch.as_tensor(attention_mask)
    if am.dim() != 2:
        raise InputError(f"a transformers attention_mask is 2-D [B, Tk], got shape {list(am.shape)}")
    vals = torch.unique(am)
    if not set(vals.tolist()) <= {0, 1}:
        raise InputError(f"a transformers attention_mask holds only 0 and 1, got values {vals.tolist()[:6]}")
    real = am.bool()
    B, Tk = real.shape
    return Predicated(lambda b, h, q, kv: real.to(kv.device)[b, kv], name="hf_padding", built_for_tk=Tk, built_for_b=B)


def document(doc_ids: torch.Tensor) -> Mask:
    """Packed documents see only themselves; ``doc_ids`` [Tk] or [B, Tk] labels each key.

    ids = [0, 0, 1, 1]::

        ■ ■ ⬚ ⬚
        ■ ■ ⬚ ⬚
        ⬚ ⬚ ■ ■
        ⬚ ⬚ ■ ■

    Combine with causal() for packed causal LM training.  Query ids are the ids of the keys at
    the query's absolute position, so this mask needs Tq <= Tk.
    """
    ids = torch.as_tensor(doc_ids)
    ids2 = ids.unsqueeze(0) if ids.dim() == 1 else ids
    B, Tk = ids2.shape

    def keep(b, h, q, kv):
        if int(q.min()) < 0:  # Tq > Tk: the top queries have no position among the keys, hence no document
            raise InputError(
                "a document mask needs Tq <= Tk (query ids are the ids of the keys at the queries' "
                f"positions); got {int(q.max()) - int(q.min()) + 1} queries for {kv.shape[-1]} keys"
            )
        d = ids2.to(kv.device)
        bb = b if B > 1 else torch.zeros_like(b)
        return d[bb, q] == d[bb, kv]

    return Predicated(keep, name="document", built_for_tk=Tk, built_for_b=B if B > 1 else None)


def prefix_lm(prefix_len) -> Mask:
    """Bidirectional over the first ``prefix_len`` keys, causal after.  prefix 2, T=4::

    ■ ■ ⬚ ⬚
    ■ ■ ⬚ ⬚
    ■ ■ ■ ⬚
    ■ ■ ■ ■
    """
    n = torch.as_tensor(prefix_len, dtype=torch.long).reshape(-1)

    def keep(b, h, q, kv):
        p = n.to(kv.device)[b if n.numel() > 1 else torch.zeros_like(b)]
        return (kv <= q) | (kv < p)

    return Predicated(keep, name="prefix_lm", built_for_b=n.numel() if n.numel() > 1 else None)
