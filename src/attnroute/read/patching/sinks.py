"""Route views past the attention sink: which key positions are sinks — detected from the weight they take,
not assumed to be token 0 — what share of the top routes they hold, and the top routes that go elsewhere.

    sink = sinks_of(shares, routes, tokens)   # None when no kept route goes to a sink
    content, *_ = stream_routes(..., exclude=sink["keys"])   # the content routes: a second streaming pass

A key is a sink when, averaged over every streamed layer, head and row that can attend to it, it takes at
least SINK_SHARE of the weight (a key every row looks at whatever it reads: the first token, a BOS, often a
delimiter). On SmolLM2 the top routes of a prompt all end there; the routes that carry its content (a name,
the word before) are ranked apart, by the same estimate, in one more forward without a backward.
"""

from __future__ import annotations

SINK_SHARE = 0.3  # mean weight a key takes from the (layer, head, row) that can attend to it, to count as a sink


def sinks_of(shares: dict[int, float], routes: list[dict], tokens: list[str]) -> dict | None:
    """{keys, tokens, mean_weight, share_of_top} when some kept route ends on a sink key, else None.
    ``share_of_top``: the sink routes' part of the kept routes' summed |estimate|."""
    keys = [j for j, share in sorted(shares.items()) if share >= SINK_SHARE]
    to_sink = [r for r in routes if r.get("stream") is None and r["key"] in keys]
    if not to_sink:
        return None
    total = sum(abs(r["estimate"]) for r in routes) or 1.0
    return {
        "keys": keys,
        "tokens": [tokens[j] if j < len(tokens) else None for j in keys],
        "mean_weight": [round(shares[j], 4) for j in keys],
        "share_of_top": sum(abs(r["estimate"]) for r in to_sink) / total,
        "threshold": SINK_SHARE,
    }


def sink_said(sink: dict, kept: int) -> str:
    """One line: which keys are sinks, their weight, and their share of the top routes."""
    where = ", ".join(
        f"{j} {t!r} (mean weight {w:.2f})" for j, t, w in zip(sink["keys"], sink["tokens"], sink["mean_weight"])
    )
    return (
        f"attention sink at key {where}: it holds {sink['share_of_top']:.0%} of the top {kept} routes' |estimate|; "
        "the content routes (to other keys) are ranked apart"
    )


__all__ = ["SINK_SHARE", "sink_said", "sinks_of"]
