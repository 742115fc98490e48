"""The graph of a model's residual stream: who writes (senders), who reads (receivers), and the edges.

    senders     embed (the stream's start: the token and position embeddings), each head's output (query
                head h, its slice of the output projection), each MLP's output — per stream
    receivers   each head's query input (query head h), key and value inputs (kv head g, shared by the
                query heads g·G … (g+1)·G − 1), each MLP's input, and the final residual (what the metric
                reads: kind "logits"); a decoder's cross-attention reads its queries from the decoder's
                stream and its keys and values from the encoder's final residual
    edge        a sender's write reaching a receiver's input directly, through the residual stream alone

Positions along one stream order them: block i reads its attention at 6i, the attention writes at 6i + 1,
the cross-attention reads at 6i + 2 and writes at 6i + 3, the MLP reads at 6i + 4 (6i + 0 in a parallel
block: it reads the block's input) and writes at 6i + 5; the embedding writes at −1 and the final residual
is read at 6L. An edge exists from a sender to a receiver of the same stream when it writes before the
receiver reads; a cross-attention's keys and values read the encoder stream's end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...settings.base import scoped
from .layout import Layout


@dataclass(frozen=True)
class Sender:
    kind: str  # embed | head | mlp
    stream: str
    layer: int | None  # the block within its stream; None for embed
    head: int | None = None  # the query head (kind head)
    attention: str | None = None  # self | cross (kind head)

    def to_dict(self, seq2seq: bool) -> dict:
        d = {"layer": self.layer, "head": self.head, "kind": self.kind}
        return {**d, "stream": self.stream, "attention": self.attention} if seq2seq else d

    def label(self) -> str:
        if self.kind == "embed":
            return f"{self.stream[:3]}.embed" if self.stream == "encoder" else "embed"
        cross = "x" if self.attention == "cross" else ""
        where = f"L{self.layer}" if self.stream == "decoder" else f"E{self.layer}"
        return f"{where}.MLP" if self.kind == "mlp" else f"{where}.{cross}H{self.head}"


@dataclass(frozen=True)
class Receiver:
    kind: str  # head | mlp | logits
    stream: str  # the stream it reads (cross k/v: "encoder")
    layer: int | None  # its block (within the decoder for cross-attention); None for logits
    head: int | None = None  # query head (q), kv head (k, v)
    channel: str | None = None  # q | k | v (kind head)
    attention: str | None = None  # self | cross (kind head)

    def to_dict(self, seq2seq: bool, G: int) -> dict:
        d = {"layer": self.layer, "head": self.head, "kind": self.kind, "channel": self.channel}
        if self.channel in ("k", "v"):
            d["query_heads"] = list(range(self.head * G, (self.head + 1) * G))
        return {**d, "stream": self.stream, "attention": self.attention} if seq2seq else d

    def label(self) -> str:
        if self.kind == "logits":
            return "logits"
        cross = "x" if self.attention == "cross" else ""
        where = f"L{self.layer}" if self.stream == "decoder" or self.attention == "cross" else f"E{self.layer}"
        if self.kind == "mlp":
            return f"{where}.MLP"
        unit = "H" if self.channel == "q" else "KV"
        return f"{where}.{cross}{unit}{self.head}.{self.channel}"


class Graph:
    """Senders, receivers and the edges between them for one Layout (edges indexed 0 … E − 1)."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.senders: list[Sender] = []
        self.receivers: list[Receiver] = []
        self.write_points: list[tuple[str, float]] = []  # per sender: (stream, position)
        self.read_points: list[tuple[str, float]] = []  # per receiver
        self._build()
        valid = np.array([[_reaches(w, r) for r in self.read_points] for w in self.write_points], dtype=bool)
        self.pairs = np.argwhere(valid)  # (E, 2): sender index, receiver index, sender-major
        self.index = {(int(s), int(r)): e for e, (s, r) in enumerate(self.pairs)}
        self.matrix = np.full(valid.shape, -1, dtype=np.int64)  # [senders, receivers]: the edge index, or −1
        self.matrix[self.pairs[:, 0], self.pairs[:, 1]] = np.arange(len(self.pairs))

    def __len__(self) -> int:
        return len(self.pairs)

    def edge(self, e: int) -> tuple[Sender, Receiver]:
        s, r = self.pairs[e]
        return self.senders[s], self.receivers[r]

    def channels(self) -> np.ndarray:
        """Every edge's receiver channel (q, k, v) or kind (mlp, logits), in index order [E]: the groups whose
        estimates are judged apart (the settle rule's bands, the agreement table)."""
        per = np.array([r.channel or r.kind for r in self.receivers])
        return per[self.pairs[:, 1]] if len(self.pairs) else per[:0]

    def labels(self) -> list[str]:
        """Every edge as 'SENDER>RECEIVER', in index order (circuit()'s rows' ``edge``, CircuitResult.arrays())."""
        return [f"{self.senders[s].label()}>{self.receivers[r].label()}" for s, r in self.pairs]

    def _send(self, sender: Sender, stream: str, pos: float) -> None:
        self.senders.append(sender)
        self.write_points.append((stream, pos))

    def _recv(self, receiver: Receiver, stream: str, pos: float) -> None:
        self.receivers.append(receiver)
        self.read_points.append((stream, pos))

    def _build(self) -> None:
        lay = self.layout
        H, Hkv = lay.heads, lay.kv_heads
        for stream in lay.streams:
            self._send(Sender("embed", stream, None), stream, -1)
            for b in lay.stack(stream):
                i, at = b.index, 6 * b.index
                for h in range(H):
                    self._recv(Receiver("head", stream, i, h, "q", "self"), stream, at)
                for ch in ("k", "v"):
                    for g in range(Hkv):
                        self._recv(Receiver("head", stream, i, g, ch, "self"), stream, at)
                for h in range(H):
                    self._send(Sender("head", stream, i, h, "self"), stream, at + 1)
                if b.cross is not None:
                    self._cross(i, at, H, Hkv, len(lay.stack("encoder")))
                self._recv(Receiver("mlp", stream, i), stream, at if b.parallel else at + 4)
                self._send(Sender("mlp", stream, i), stream, at + 5)
        last = lay.streams[-1]
        self._recv(Receiver("logits", last, None), last, 6 * len(lay.stack(last)))

    def _cross(self, i: int, at: int, H: int, Hkv: int, n_encoder: int) -> None:
        for h in range(H):
            self._recv(Receiver("head", "decoder", i, h, "q", "cross"), "decoder", at + 2)
        for ch in ("k", "v"):
            for g in range(Hkv):
                self._recv(Receiver("head", "encoder", i, g, ch, "cross"), "encoder", 6 * n_encoder)
        for h in range(H):
            self._send(Sender("head", "decoder", i, h, "cross"), "decoder", at + 3)

    def receivers_of(self, stream: str, block: int | None) -> list[int]:
        """Indices of the receivers read inside ``block`` of ``stream`` (a cross-attention's keys and values
        are read in its decoder block); block None: the final residual's."""
        return [j for j, r in enumerate(self.receivers) if where_read(r) == (stream, block)]


@scoped
def edge_graph(model, tokenizer=None, progress=None) -> Graph:
    """The residual stream's edge graph of ``model`` (anything the model door takes), found by one short forward:
    every sender → receiver edge a circuit can hold, indexed as circuit()'s rows and evaluate_circuit() name them
    (``graph.labels()``). The first step of the circuit pipeline: graph, scores (circuit()), top(k),
    evaluate_circuit()."""
    from types import SimpleNamespace

    from ..study import Study
    from .layout import discover, probe_input

    loaded = Study(SimpleNamespace(model=model, tokenizer=tokenizer), progress).load()
    return Graph(discover(loaded, probe_input(loaded)))


def where_read(r: Receiver) -> tuple[str, int | None]:
    """(stream, block) of the block that reads ``r`` (its own block; the decoder block for cross-attention)."""
    return ("decoder", r.layer) if r.attention == "cross" else (r.stream, r.layer)


def _reaches(write: tuple[str, float], read: tuple[str, float]) -> bool:
    return write[0] == read[0] and write[1] < read[1]


__all__ = ["Graph", "Receiver", "Sender", "edge_graph", "where_read"]
