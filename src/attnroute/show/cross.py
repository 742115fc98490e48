"""The terminal table of a cross-stream experiment on a speech model (knockout of a word's routes to its
frames, or a swap of cross-attention maps between two clips): one row per window of cross layers."""

from __future__ import annotations

from rich.table import Table

from ..engine.jsonable import Result
from ..read.speech import CrossKnockoutResult, CrossSwapResult, SpeechPatchResult, SpeechRoutesResult
from .text import token_text


def _lines(result: Result) -> list[str]:
    """The verdict lines the result's own JSON gives (derived there, one home)."""
    return result.payload()["verdict"]["lines"]


def cross_table(result: CrossKnockoutResult | CrossSwapResult) -> Table:
    if isinstance(result, CrossKnockoutResult):
        return _knockout(result)
    t = Table(title=f"{result.model}: B transcribed with A's cross-attention maps")
    for col in ("cross layers", "transcript", "WER to A", "WER to B"):
        t.add_column(col)
    for r in result.rows:
        t.add_row(str(r["cross_layers"]), r["transcript"], f"{r['wer_to_a']:.2f}", f"{r['wer_to_b']:.2f}")
    lines = _lines(result)
    t.caption = "\n".join(lines[:1] + lines[-1:])
    return t


def _knockout(result: CrossKnockoutResult) -> Table:
    said = result.payload()  # its span in seconds and its verdict, as its JSON gives them
    span = said["span"]["seconds"]
    t = Table(title=f"{result.source!r} → frames {span[0]:.2f}–{span[1]:.2f} s cut, per cross layer window")
    for col in ("cross layers", "Δ log p (route)", "Δ log p (control)", "p first token (route)", "(control)"):
        t.add_column(col, justify="right")
    for r in result.rows:
        t.add_row(
            str(r["cross_layers"]),
            f"{r['delta_logprob_route']:+.3f}",
            f"{r['delta_logprob_control']:+.3f}",
            f"{r['p_first_route']:.3f}",
            f"{r['p_first_control']:.3f}",
        )
    t.caption = "\n".join(said["verdict"]["lines"])
    return t


SPEECH_COLUMNS = ("layer", "mode", "stream_layer", "head", "delta", "normalized")


def speech_patch_table(result: SpeechPatchResult) -> Table:
    """The heads that restore the clean clip's answer most, per the patch between two clips."""
    t = Table(title=f"{result.model}: each head's clean output patched into the corrupted clip (top 12)")
    for col in ("mode", "layer.head", "normalized", "Δ logit-diff"):
        t.add_column(col, justify="right")
    for r in sorted(result.rows, key=lambda r: -abs(r["normalized"]))[:12]:
        t.add_row(r["mode"], f"{r['stream_layer']}.{r['head']}", f"{r['normalized']:+.3f}", f"{r['delta']:+.3f}")
    t.caption = "\n".join(_lines(result))
    return t


SPEECH_ROUTE_COLUMNS = (
    "stream",
    "stream_layer",
    "head",
    "query",
    "query_token",
    "key",
    "key_seconds",
    "weight",
    "norm_weight",
    "estimate",
    "exact",
)


def speech_routes_table(result: SpeechRoutesResult) -> Table:
    """The top routes across streams: a decoder token → an audio frame (or within one stream)."""
    t = Table(title=f"{result.model}: top routes by |estimate| of {result.metric}")
    for col in ("stream", "layer", "head", "query → key", "weight", "estimate", "exact"):
        t.add_column(col, justify="right")
    for r in result.routes:
        exact = "—" if r["exact"] is None else f"{r['exact']:+.3f}"
        t.add_row(
            r["stream"],
            str(r["stream_layer"]),
            str(r["head"]),
            f"{token_text(r['query_token'])} → {r['key_said']}",
            f"{r['weight']:.3f}",
            f"{r['estimate']:+.3f}",
            exact,
        )
    said = result.payload()
    a = said["agreement"]["estimate_vs_exact"]
    t.caption = "\n".join(said["verdict"]["lines"]) + (
        f"\nestimate vs exact over {a['n']}: Spearman {a['spearman']:.2f}, R² {a['r2']:.2f}" if a.get("n") else ""
    )
    return t


__all__ = ["SPEECH_COLUMNS", "SPEECH_ROUTE_COLUMNS", "cross_table", "speech_patch_table", "speech_routes_table"]
