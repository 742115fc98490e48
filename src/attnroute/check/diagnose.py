"""Naming the one root cause of a failure, by competing explanations.

Each explanation is an alternative attention a buggy target might compute (no mask, an inverted
mask, top-left causal, a bool mask *added* to the scores, tiled heads…). The first whose output
matches the target's within the dtype's tolerance names the cause. Matching outputs, not support
patterns, keeps the diagnosis alive in bf16 (where small weights round away).
"""

from __future__ import annotations

import torch

from ..engine import causal, predicate


def _softmax_rows(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over keys that gives 0 (not NaN) to rows with no finite score."""
    w = torch.softmax(scores, dim=-1)
    return torch.nan_to_num(w, nan=0.0)


def capped(s: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """cap·tanh(s/cap), the soft cap (Gemma 2) applied to scaled logits before the mask; None: s."""
    return s if not softcap else softcap * torch.tanh(s / softcap)


def weights_under(q, k, keep, scale: float, *, added: bool = False, softcap: float | None = None) -> torch.Tensor:
    """fp64 weights of q·kᵀ·scale (soft-capped when the target declares a cap) with ``keep`` applied as a
    mask (or, with ``added``, as a number added to the scores: the bug of adding a bool mask), query heads
    grouped in repeat_interleave order."""
    G = q.shape[1] // k.shape[1]
    kk = k.double().repeat_interleave(G, dim=1)
    s = capped((q.double() @ kk.transpose(-1, -2)) * scale, softcap)  # (B, H, Tq, Tk)
    if keep is None:
        return _softmax_rows(s)
    keep = keep.expand_as(s)
    if added:
        return _softmax_rows(s + keep.double())
    return _softmax_rows(s.masked_fill(~keep, float("-inf")))


def capped_after_masking(q, k, keep, scale: float, softcap: float) -> torch.Tensor:
    """fp64 weights when the soft cap runs *after* the mask: a masked key's −inf becomes −cap, a finite
    logit that visible keys capped toward −cap tie with (ONNX's reference before its PR #7867)."""
    G = q.shape[1] // k.shape[1]
    s = (q.double() @ k.double().repeat_interleave(G, dim=1).transpose(-1, -2)) * scale
    return torch.softmax(capped(s.masked_fill(~keep.expand_as(s), float("-inf")), softcap), dim=-1)


def _batch_tiled(keep: torch.Tensor, B: int, H: int, order: str) -> torch.Tensor:
    """The [B, H, Tq, Tk] mask a target sees when it tiles a [B, 1, Tq, Tk] mask over its flattened batch ×
    heads the wrong way: scores flattened b-major (b·H + h) with a mask tiled by .repeat(H, 1, 1) (each
    head reads example (b·H + h) mod B's mask), or flattened heads-first (h·B + b) with repeat_interleave
    (example (h·B + b) // H's)."""
    b = torch.arange(B)[:, None]
    h = torch.arange(H)[None, :]
    src = (b * H + h) % B if order == "repeat" else (h * B + b) // H  # (B, H): whose mask each head reads
    return keep.expand(B, 1, *keep.shape[-2:])[src.flatten(), 0].view(B, H, *keep.shape[-2:])


TILED = {
    "repeat": "the mask is tiled over batch × heads with .repeat (scores flattened b·H + h, so each head reads "
    "another example's mask): expand it per example (repeat_interleave, or a [B, 1, Tq, Tk] broadcast)",
    "repeat_interleave": "the mask is tiled over batch × heads in the other order (scores flattened heads-first, "
    "h·B + b, with a repeat_interleave mask): each head reads another example's mask",
}


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


def explain(
    obs, q, k, keep, scale: float, tol: float, *, causal_case: bool, rows=None, exp=None, first=(), softcap=None
) -> str:
    """The cause whose weights match ``obs`` [B, H, Tq, Tk] within ``tol``, or ''. ``rows`` (bool,
    broadcastable to [B, H, Tq, 1]) limits the comparison to the rows that were judged. When several fit
    the judged rows, the rows that separate them decide (rows with no visible key, the top rows of
    Tq < Tk): the one closest on every row wins. When none fits to ``tol`` but one accounts for nearly all
    of the difference from the reference ``exp``, it is named with how close it comes. ``first``: the
    check's own (text, keep) explanations, tried before the general ones (they win a tie)."""
    B, H, Tq, Tk = obs.shape

    def under(alt, added=False):
        return weights_under(q, k, alt, scale, added=added, softcap=softcap)

    cands: list[tuple[str, torch.Tensor]] = [(text, under(alt)) for text, alt in first]
    if keep is not None:
        cands.append(("the mask is inverted (rows attend exactly where they must not)", under(~keep)))
        cands.append(
            (
                "a bool mask is added to the scores (softmax(s + mask)) instead of hiding the keys",
                under(keep, added=True),
            )
        )
        cands.append(("ignores the mask it is given (never masked)", under(None)))
        always_causal = causal().materialize(1, 1, Tq, Tk)
        if not bool((keep.expand(B, 1, Tq, Tk) == always_causal).all()):
            cands.append(("ignores the mask it is given (always causal)", under(always_causal)))
        per_example = keep.expand(B, 1, Tq, Tk)
        if B > 1 and H > 1 and not bool((per_example == per_example[:1]).all()):  # masks differ per example
            for order, text in TILED.items():
                cands.append((text, under(_batch_tiled(keep, B, H, order))))
    if causal_case:
        shifted_ahead = predicate(lambda b, h, qi, kv: kv <= qi + 1).materialize(1, 1, Tq, Tk)
        shifted_back = predicate(lambda b, h, qi, kv: kv < qi).materialize(1, 1, Tq, Tk)
        top_left = causal("top_left").materialize(1, 1, Tq, Tk)
        cands += [
            (
                "the causal diagonal is shifted: each query also sees the next key",
                under(shifted_ahead),
            ),
            ("the causal diagonal is shifted: queries do not see themselves", under(shifted_back)),
            (
                "causal is aligned top-left (query 0 sees only key 0), wrong for KV-cache decoding",
                under(top_left),
            ),
        ]
    judged = torch.ones_like(obs, dtype=torch.bool) if rows is None else rows.expand_as(obs)
    if not bool(torch.isfinite(obs[judged]).all()):
        return ""
    finite = torch.isfinite(obs).all(-1, keepdim=True).expand_as(obs)

    def error(w):
        """(on the judged rows, on every finite row): a row the explanation leaves without a key is left out
        (what such a row holds depends on the mask's sentinel, which empty_rows judges), if most remain."""
        seen = (w.sum(-1, keepdim=True) > 0).expand_as(obs)
        rows = judged & seen if int((judged & seen).sum()) * 2 >= int(judged.sum()) else judged
        every = finite & (seen | ~judged)
        diff = (obs - w).abs()
        return (float(diff[rows].max()) if bool(rows.any()) else float("inf"),  # nothing to fit: no fit
                float(diff[every].max()) if bool(every.any()) else 0.0)  # fmt: skip

    errors = [(text, *error(w)) for text, w in cands]
    fits = [e for e in errors if e[1] <= tol]
    if fits:  # ties on the judged rows are broken on every row
        return min(fits, key=lambda e: e[2])[0]
    if exp is not None and (zeros := zero_heads(obs, exp, tol, judged)):
        return zeros
    if exp is not None and errors:
        gap = float((obs - exp).abs()[judged].max())
        best = min(e[1] for e in errors)
        near = [e for e in errors if e[1] <= max(1.5 * best, best + tol)]  # near-ties: every row decides, as above
        text, err, _ = min(near, key=lambda e: e[2])
        if err <= 0.25 * gap:
            return (
                f"most likely {text} (it fits to {err:.1e}, the tolerance is {tol:.0e}; the reference is {gap:.2f} off)"
            )
    return ""


def tiled_heads(obs, q, k, keep, scale: float, tol: float, softcap: float | None = None) -> str:
    """Query heads grouped by tiling (repeat) instead of repeat_interleave."""
    G = q.shape[1] // k.shape[1]
    kk = k.double().repeat(1, G, 1, 1)
    s = capped((q.double() @ kk.transpose(-1, -2)) * scale, softcap)
    if keep is not None:
        s = s.masked_fill(~keep.expand_as(s), float("-inf"))
    alt = _softmax_rows(s)
    if float((obs - alt).abs().max()) <= tol:
        return "query heads are grouped by tiling (repeat), not repeat_interleave"
    return ""


def window_hint(obs, W: int, start: int, tol: float) -> str:
    """Only when rows far from the start see W + 1 or W − 1 keys: a window convention mix-up."""
    seen = (obs > tol).sum(-1)[..., start:]
    n = int(seen.float().median())
    if n in (W - 1, W + 1):
        return f"rows far from the start see {n} keys, expected W = {W}: a W{'+' if n > W else '−'}1 window convention"
    return ""


__all__ = [
    "TILED",
    "capped",
    "capped_after_masking",
    "explain",
    "tiled_heads",
    "weights_under",
    "window_hint",
    "zero_heads",
]
