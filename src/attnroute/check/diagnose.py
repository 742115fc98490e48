"""Naming the one root cause of a failure, by competing explanations.

Each explanation is an alternative attention a buggy target might compute (no mask, an inverted
mask, top-left causal, a bool mask *added* to the scores, tiled heads…), listed once in ALTERNATIVES
with its name and what it says. The first whose output matches the target's within the dtype's
tolerance names the cause. Matching outputs, not support patterns, keeps the diagnosis alive in bf16
(where small weights round away). The fp64 scores are computed once per case (``scores64``); every
alternative is a mask on them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..engine import causal, predicate


def capped(s: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """cap·tanh(s/cap), the soft cap (Gemma 2) applied to scaled logits before the mask; None: s."""
    return s if not softcap else softcap * torch.tanh(s / softcap)


def scores64(q, k, scale: float, softcap: float | None = None, *, tiled: bool = False) -> torch.Tensor:
    """fp64 scaled (and soft-capped) scores [B, H, Tq, Tk], query heads grouped in repeat_interleave order —
    or, ``tiled``, in repeat order (the grouping bug)."""
    G = q.shape[1] // k.shape[1]
    kk = k.double().repeat(1, G, 1, 1) if tiled else k.double().repeat_interleave(G, dim=1)
    return capped((q.double() @ kk.transpose(-1, -2)) * scale, softcap)


def masked_softmax(s: torch.Tensor, keep, *, added: bool = False) -> torch.Tensor:
    """Softmax over keys of ``s`` with ``keep`` applied as a mask (or, ``added``, as a number added to the
    scores: the bug of adding a bool mask); a row with no finite score gives 0, not NaN."""
    if keep is not None:
        keep = keep.expand_as(s)
        s = s + keep.double() if added else s.masked_fill(~keep, float("-inf"))
    return torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)


def weights_under(q, k, keep, scale: float, *, added: bool = False, softcap: float | None = None) -> torch.Tensor:
    """fp64 weights of q·kᵀ·scale (soft-capped when the target declares a cap) under ``keep``."""
    return masked_softmax(scores64(q, k, scale, softcap), keep, added=added)


def capped_after_masking(q, k, keep, scale: float, softcap: float) -> torch.Tensor:
    """fp64 weights when the soft cap runs *after* the mask: a masked key's −inf becomes −cap, a finite
    logit that visible keys capped toward −cap tie with (ONNX's reference before its PR #7867)."""
    s = scores64(q, k, scale).masked_fill(~keep.expand(*q.shape[:3], k.shape[2]), float("-inf"))
    return torch.softmax(capped(s, softcap), dim=-1)


def _batch_tiled(keep: torch.Tensor, B: int, H: int, order: str) -> torch.Tensor:
    """The [B, H, Tq, Tk] mask a target sees when it tiles a [B, 1, Tq, Tk] mask over its flattened batch ×
    heads the wrong way: scores flattened b-major (b·H + h) with a mask tiled by .repeat(H, 1, 1) (each
    head reads example (b·H + h) mod B's mask), or flattened heads-first (h·B + b) with repeat_interleave
    (example (h·B + b) // H's)."""
    b = torch.arange(B)[:, None]
    h = torch.arange(H)[None, :]
    src = (b * H + h) % B if order == "repeat" else (h * B + b) // H  # (B, H): whose mask each head reads
    return keep.expand(B, 1, *keep.shape[-2:])[src.flatten(), 0].view(B, H, *keep.shape[-2:])


@dataclass(frozen=True)
class Case:
    """What the alternatives are built from: the mask a check gave and its shape."""

    keep: torch.Tensor | None
    B: int
    H: int
    Tq: int
    Tk: int
    causal_case: bool

    def has_mask(self) -> bool:
        return self.keep is not None

    def per_example(self) -> bool:
        """Masks differ between examples (a tiling bug can show) and there are several heads to tile over."""
        ex = None if self.keep is None else self.keep.expand(self.B, 1, self.Tq, self.Tk)
        return ex is not None and self.B > 1 and self.H > 1 and not bool((ex == ex[:1]).all())

    def not_causal(self) -> bool:
        always = causal().materialize(1, 1, self.Tq, self.Tk)
        return self.keep is not None and not bool((self.keep.expand(self.B, 1, self.Tq, self.Tk) == always).all())

    def diagonal(self, fn) -> torch.Tensor:
        return predicate(lambda b, h, qi, kv: fn(qi, kv)).materialize(1, 1, self.Tq, self.Tk)


@dataclass(frozen=True)
class Alternative:
    name: str  # the mechanism's name (a check's `cause`, the report's root cause)
    says: str  # the sentence a failing check ends with
    applies: Callable[[Case], bool]
    mask: Callable[[Case], torch.Tensor | None]
    added: bool = False


TILED = {
    "repeat": "the mask is tiled over batch × heads with .repeat (scores flattened b·H + h, so each head reads "
    "another example's mask): expand it per example (repeat_interleave, or a [B, 1, Tq, Tk] broadcast)",
    "repeat_interleave": "the mask is tiled over batch × heads in the other order (scores flattened heads-first, "
    "h·B + b, with a repeat_interleave mask): each head reads another example's mask",
}
ALTERNATIVES = (  # in order of preference: an earlier one wins a tie
    Alternative(
        "inverted_mask",
        "the mask is inverted (rows attend exactly where they must not)",
        Case.has_mask,
        lambda c: ~c.keep,
    ),
    Alternative(
        "mask_added",
        "a bool mask is added to the scores (softmax(s + mask)) instead of hiding the keys",
        Case.has_mask,
        lambda c: c.keep,
        added=True,
    ),
    Alternative("mask_ignored", "ignores the mask it is given (never masked)", Case.has_mask, lambda c: None),
    Alternative(
        "always_causal",
        "ignores the mask it is given (always causal)",
        Case.not_causal,
        lambda c: causal().materialize(1, 1, c.Tq, c.Tk),
    ),
    Alternative(
        "mask_tiled_repeat", TILED["repeat"], Case.per_example, lambda c: _batch_tiled(c.keep, c.B, c.H, "repeat")
    ),
    Alternative(
        "mask_tiled_repeat_interleave",
        TILED["repeat_interleave"],
        Case.per_example,
        lambda c: _batch_tiled(c.keep, c.B, c.H, "repeat_interleave"),
    ),
    Alternative(
        "diagonal_ahead",
        "the causal diagonal is shifted: each query also sees the next key",
        lambda c: c.causal_case,
        lambda c: c.diagonal(lambda qi, kv: kv <= qi + 1),
    ),
    Alternative(
        "diagonal_behind",
        "the causal diagonal is shifted: queries do not see themselves",
        lambda c: c.causal_case,
        lambda c: c.diagonal(lambda qi, kv: kv < qi),
    ),
    Alternative(
        "top_left_causal",
        "causal is aligned top-left (query 0 sees only key 0), wrong for KV-cache decoding",
        lambda c: c.causal_case,
        lambda c: causal("top_left").materialize(1, 1, c.Tq, c.Tk),
    ),
)


# the mechanisms a check names beside ALTERNATIVES, with what each says (the report's root cause reads them)
OTHER_CAUSES = {
    "zero_heads": "whole (example, head) blocks come back zero: a loop over batch × heads in chunks skips the last "
    "partial chunk",
    "heads_tiled": "query heads are grouped by tiling (repeat), not repeat_interleave",
    "window_convention": "the sliding window counts one key more or fewer than W",
    "window_not_applied": "the window is not applied while decoding with a cache",
    "softmax_axis": "the softmax runs over the queries, not the keys: every weight is wrong",
    "not_a_softmax": "the weights are not a softmax over keys (rows do not sum to 1): every weight is wrong",
}
EVERY_WEIGHT = ("softmax_axis", "not_a_softmax")  # causes that break every check, whatever it asks


def cause_said(name: str) -> str:
    """What a named mechanism says, in a sentence."""
    return next((a.says for a in ALTERNATIVES if a.name == name), OTHER_CAUSES.get(name, name))


@dataclass(frozen=True)
class Explanation:
    name: str  # the mechanism (ALTERNATIVES' names, "zero_heads", a check's own)
    says: str


def zero_heads(obs, exp, tol: float, judged=None) -> str:
    """Whole (example, head) blocks of zeros where the reference has weight, the judged rest right: a loop
    over batch × heads in chunks that drops the last partial chunk."""
    B, H = obs.shape[:2]
    zero = (obs.abs().amax((-1, -2)) <= tol) & (exp.abs().amax((-1, -2)) > tol)  # (B, H)
    if not bool(zero.any()):
        return ""
    rest = ~zero[..., None, None].expand_as(obs)
    if judged is not None:
        rest = rest & judged
    if bool(rest.any()) and float((obs - exp).abs()[rest].max()) > tol:
        return ""
    flat = [int(b) * H + int(h) for b, h in torch.nonzero(zero)]
    return (
        f"every row of {len(flat)} (example, head) pair(s) is zero — flat indices {flat} of B·H = {B * H}: a loop over "
        "batch × heads in chunks that skips the last partial chunk"
    )


def candidates(s: torch.Tensor, case: Case, first=()) -> list[tuple[Explanation, torch.Tensor]]:
    """Every alternative that applies to this case, with its weights: the check's own ``first`` (name, text,
    keep) before the table's."""
    out = [(Explanation(name, text), masked_softmax(s, alt)) for name, text, alt in first]
    for a in ALTERNATIVES:
        if a.applies(case):
            out.append((Explanation(a.name, a.says), masked_softmax(s, a.mask(case), added=a.added)))
    return out


def _errors(obs, cands, judged) -> list[tuple[Explanation, float, float]]:
    """(explanation, error on the judged rows, error on every finite row) per candidate. A row the
    explanation leaves without a key is left out (what such a row holds depends on the mask's sentinel,
    which empty_rows judges), if most judged rows remain."""
    finite = torch.isfinite(obs).all(-1, keepdim=True).expand_as(obs)
    out = []
    for expl, w in cands:
        seen = (w.sum(-1, keepdim=True) > 0).expand_as(obs)
        rows = judged & seen if int((judged & seen).sum()) * 2 >= int(judged.sum()) else judged
        every = finite & (seen | ~judged)
        diff = (obs - w).abs()
        on_rows = float(diff[rows].max()) if bool(rows.any()) else float("inf")  # nothing to fit: no fit
        out.append((expl, on_rows, float(diff[every].max()) if bool(every.any()) else 0.0))
    return out


def explain(
    obs, q, k, keep, scale: float, tol: float, *, causal_case: bool, rows=None, exp=None, first=(), softcap=None
) -> Explanation | None:
    """The cause whose weights match ``obs`` [B, H, Tq, Tk] within ``tol``, or None. ``rows`` (bool,
    broadcastable to [B, H, Tq, 1]) limits the comparison to the rows that were judged. When several fit
    the judged rows, the rows that separate them decide (rows with no visible key, the top rows of
    Tq < Tk): the one closest on every row wins. When none fits to ``tol`` but one accounts for nearly all
    of the difference from the reference ``exp``, it is named with how close it comes. ``first``: the
    check's own (name, text, keep) explanations, tried before the general ones (they win a tie)."""
    B, H, Tq, Tk = obs.shape
    judged = torch.ones_like(obs, dtype=torch.bool) if rows is None else rows.expand_as(obs)
    if not bool(torch.isfinite(obs[judged]).all()):
        return None
    s = scores64(q, k, scale, softcap)
    errors = _errors(obs, candidates(s, Case(keep, B, H, Tq, Tk, causal_case), first), judged)
    fits = [e for e in errors if e[1] <= tol]
    if fits:  # ties on the judged rows are broken on every row
        return min(fits, key=lambda e: e[2])[0]
    if exp is not None and (zeros := zero_heads(obs, exp, tol, judged)):
        return Explanation("zero_heads", zeros)
    if exp is not None and errors:
        gap = float((obs - exp).abs()[judged].max())
        best = min(e[1] for e in errors)
        near = [e for e in errors if e[1] <= max(1.5 * best, best + tol)]  # near-ties: every row decides, as above
        expl, err, _ = min(near, key=lambda e: e[2])
        if err <= 0.25 * gap:
            return Explanation(
                expl.name,
                f"most likely {expl.says} (it fits to {err:.1e}, the tolerance is "
                f"{tol:.0e}; the reference is {gap:.2f} off)",
            )
    return None


def tiled_heads(obs, q, k, keep, scale: float, tol: float, softcap: float | None = None) -> Explanation | None:
    """Query heads grouped by tiling (repeat) instead of repeat_interleave."""
    alt = masked_softmax(scores64(q, k, scale, softcap, tiled=True), keep)
    if float((obs - alt).abs().max()) <= tol:
        return Explanation("heads_tiled", "query heads are grouped by tiling (repeat), not repeat_interleave")
    return None


def window_hint(obs, W: int, start: int, tol: float) -> Explanation | None:
    """Only when rows far from the start see W + 1 or W − 1 keys: a window convention mix-up."""
    seen = (obs > tol).sum(-1)[..., start:]
    n = int(seen.float().median())
    if n in (W - 1, W + 1):
        return Explanation(
            "window_convention",
            f"rows far from the start see {n} keys, expected W = {W}: a W{'+' if n > W else '−'}1 window convention",
        )
    return None


__all__ = [
    "ALTERNATIVES",
    "EVERY_WEIGHT",
    "OTHER_CAUSES",
    "cause_said",
    "TILED",
    "Alternative",
    "Case",
    "Explanation",
    "capped",
    "capped_after_masking",
    "explain",
    "masked_softmax",
    "scores64",
    "tiled_heads",
    "weights_under",
    "window_hint",
    "zero_heads",
]
