"""kv_decode: a decoder run as it generates — a prefill, then one query at a time, then a chunk of queries —
each call given every key its cache holds, judged row by row against the reference with the decoder's own
mask. A window (or sinks) the decoder applies to the new queries but not to the keys it cached (Mistral's
shipped mask, transformers 4.34: the cached keys' block was all zeros) shows only here and is named.

A target that takes a mask is given the decoder's mask (its declared window, else the battery's W = 3); a
target in the causal convention builds its own, so it must declare its window (``--window``) to be judged
on one."""

from __future__ import annotations

from ..engine import causal
from .harness import case_inputs, compare, over_shapes, shape_label
from .outcome import Unsupported

PREFILL, STEPS, CHUNK = 6, 3, 3  # 6 keys, then Tq = 1 at Tk = 7, 8, 9, then Tq = 3 at Tk = 12
BATTERY_WINDOW = 3  # the window a mask-taking target is asked to decode with when it declares none


def calls() -> list[tuple[int, int]]:
    """(first query position, number of queries) of each call, in the order a generator makes them."""
    steps = [(PREFILL + i, 1) for i in range(STEPS)]
    return [(0, PREFILL), *steps, (PREFILL + STEPS, CHUNK)]


def check_kv_decode(ctx, dtype):
    if ctx.mask_family == "bidirectional":
        raise Unsupported("an encoder does not decode with a cache")
    if ctx.window is not None or ctx.convention == "causal":
        return _decode(ctx, dtype, ctx.window, "")
    try:  # a target that takes a mask decodes with the battery's window, or plainly causal when it takes none
        return _decode(ctx, dtype, BATTERY_WINDOW, "")
    except Unsupported as e:
        return _decode(ctx, dtype, None, f"; it cannot take a window ({e}), so it decoded causal only")


def _decode(ctx, dtype, W, note: str):
    """The calls of ``calls()`` under the decoder's mask with window ``W`` (None: plain causal)."""
    T = PREFILL + STEPS + CHUNK
    B, H = 2, 3
    q, k, v = case_inputs(ctx, B=B, H=H, Tq=T, Tk=T, seed=31, dtype=dtype)

    def case(start: int, n: int):
        Tk = start + n
        keep = ctx.decoder_keep(B, n, Tk, W)  # plain causal when W is None
        unwindowed = _unwindowed(W, B, n, Tk) if W is not None and n < Tk else []
        return lambda: compare(
            ctx,
            "kv_decode",
            q[:, :, start:Tk],
            k[:, :, :Tk],
            v[:, :, :Tk],
            keep,
            _why(W, ctx.sinks, Tk - n),
            causal_case=W is None,
            first=unwindowed,
        )

    r = over_shapes("kv_decode", [(_label(B, H, start, n), case(start, n)) for start, n in calls()])
    said = f"causal with a window of {W} keys" + (f" and {ctx.sinks} sinks" if ctx.sinks else "") if W else "causal"
    if r.passed:
        r.detail = f"decoding through a cache ({said}{note}): " + r.detail
    return r


def _label(B, H, start, n):
    what = "prefill" if start == 0 else "step" if n == 1 else "chunk"
    return shape_label(B, H, n, start + n, text=f"{what} Tq={n}, Tk={start + n}")


def _unwindowed(W, B, Tq, Tk):
    """The explanation the cached calls are tried against first: every cached key visible (no window)."""
    said = (
        f"the window is not applied to cached keys: a query after {Tk - Tq} cached keys sees every one "
        f"of them, where its window allows {W}"
    )
    return [("window_not_applied", said, causal().materialize(B, 1, Tq, Tk))]


def _why(W, sinks, past):
    def why(b, i, j):
        p = i + past  # the query's absolute position
        if j > p:
            return "a future position"
        return f"outside its window of {W} keys" + (f" and its {sinks} sinks" if sinks else "")

    return why


__all__ = ["check_kv_decode"]
