"""Edges by name: 'SENDER>RECEIVER' with the nodes' labels (Sender.label, Receiver.label).

senders     embed, L5.H1 (layer 5, head 1), L5.xH1 (a cross-attention head), L5.MLP; an encoder's
            enc.embed, E2.H0, E2.MLP
receivers   L18.H6.q (a query head's queries), L18.KV2.k / L18.KV2.v (a kv head's keys / values),
            L18.xH6.q, L18.xKV2.k (cross-attention), L18.MLP, logits (the final residual)
"""

from __future__ import annotations

from ...errors import InputError
from .graph import Graph


def resolve_edges(graph: Graph, labels) -> list[int]:
    """Edge indices of 'SENDER>RECEIVER' labels; refused naming the first unknown node or missing edge."""
    senders = {s.label(): i for i, s in enumerate(graph.senders)}
    receivers = {r.label(): j for j, r in enumerate(graph.receivers)}
    out = []
    for label in labels:
        a, b = label.split(">")
        if a not in senders:
            raise InputError(f"edges: {a!r} is not a sender of this model (e.g. {_some(senders)})", field="edges")
        if b not in receivers:
            raise InputError(f"edges: {b!r} is not a receiver of this model (e.g. {_some(receivers)})", field="edges")
        e = graph.index.get((senders[a], receivers[b]))
        if e is None:
            raise InputError(f"edges: {a} writes after {b} reads: no such edge", field="edges")
        out.append(e)
    return out


def edge_label(graph: Graph, e: int) -> str:
    s, r = graph.edge(e)
    return f"{s.label()}>{r.label()}"


def _some(names: dict) -> str:
    keys = list(names)
    return ", ".join(keys[:2] + keys[-2:])


__all__ = ["edge_label", "resolve_edges"]
