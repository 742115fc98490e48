"""The edges' scores from the senders' deltas and the receivers' gradients, a chunk of each at a time.

    est(S → R)[prompt] = Σ_{t, d} Δ_S[t, d] · g_R[t, d]

For every prompt this is one matrix product, [senders, T·d] × [T·d, receivers]. Taken one block's senders
against one read point's receivers (9 × 15 on SmolLM2) it is thin: each number read from memory is used a
few times, and the products cost more than the forward + backward that made the gradients (IOI: 5 s of
bmm against 3 s). So receivers' gradients are gathered until they fill ``RECEIVER_BYTES`` and multiplied
with the senders' deltas gathered up to ``SENDER_BYTES``: each delta is read (and, on a long text whose
deltas do not all stay in memory, recomputed: runs.DELTA_BYTES) once per chunk of receivers, each gradient
once per chunk of senders. The receivers are put in stream order, so a chunk of senders skips those read
before its first sender writes; a pair inside the rest with no edge is computed and dropped. Both are held
and multiplied in float32 whatever the model's dtype (a bf16 model's are cast on arrival), and counted so: a
budget counted in bf16 bytes held twice the gradients, and their float32 copy doubled that again.

    products = Products(run, scores)   # scores [E, n], float64, added into
    products.add(receivers, grads)     # grads [r, n, T, d], the receivers' order
    products.flush()                   # what is gathered, multiplied (also when a chunk is full)
"""

from __future__ import annotations

import numpy as np
import torch

from ..ground.budget import scaled

RECEIVER_BYTES = 512 << 20  # receivers' gradients gathered before a pass over the senders
SENDER_BYTES = 128 << 20  # senders' deltas multiplied at once


class Products:
    def __init__(self, run, scores: torch.Tensor):
        self.run, self.scores = run, scores
        self._rs: list[np.ndarray] = []
        self._grads: list[torch.Tensor] = []
        self._bytes = 0

    def add(self, receivers, grads: torch.Tensor) -> None:
        if self._grads and self._grads[0].shape[1:] != grads.shape[1:]:  # another stream's length (Whisper)
            self.flush()
        self._rs.append(np.asarray(list(receivers)))
        grads = grads.float()  # multiplied in float32 whatever the dtype: held so, and counted at 4 bytes
        self._grads.append(grads)
        self._bytes += grads.numel() * grads.element_size()
        if self._bytes >= scaled(RECEIVER_BYTES):
            self.flush()

    def flush(self) -> None:
        if not self._rs:
            return
        # read points in stream order (by how many senders reach them): a chunk of senders then reaches a
        # suffix of the receivers, and the product skips the receivers before it
        reach = (self.run.graph.matrix >= 0).sum(0)
        order = sorted(range(len(self._rs)), key=lambda i: int(reach[self._rs[i][0]]))
        rs = np.concatenate([self._rs[i] for i in order])
        G = self._grads[0] if len(self._grads) == 1 else torch.cat([self._grads[i] for i in order])
        self._rs, self._grads, self._bytes = [], [], 0
        G = G.flatten(2).permute(1, 2, 0)  # (n, T·d, r)
        for ss, D in self._sender_chunks(rs):
            idx = self.run.graph.matrix[np.ix_(ss, rs)]  # (s, r) edge indices, −1 where no edge
            first = int(np.argmax((idx >= 0).any(0)))
            idx = idx[:, first:]
            S = torch.bmm(D.flatten(2).transpose(0, 1), G[..., first:])  # (n, s, r − first)
            ok = idx >= 0
            self.scores.index_add_(0, torch.from_numpy(idx[ok]), S.permute(1, 2, 0)[torch.from_numpy(ok)].double())

    def _sender_chunks(self, rs: np.ndarray):
        """(senders, their deltas [s, n, T, d]) for the parts with an edge into ``rs``, up to SENDER_BYTES."""
        run, ss, ds, size = self.run, [], [], 0
        for part, senders in run.sender_parts().items():
            if (run.graph.matrix[np.ix_(senders, rs)] < 0).all():
                continue
            ids, D = run.part_deltas(part)  # in the order of ids (= senders)
            D = D.float()  # a bf16 part is counted as the float32 it is multiplied in
            if ds and D.shape[1:] != ds[0].shape[1:]:  # a part of another stream: never with the same receivers,
                yield np.asarray(ss), ds[0] if len(ds) == 1 else torch.cat(ds)  # but kept apart all the same
                ss, ds, size = [], [], 0
            ss += ids
            ds.append(D)
            size += D.numel() * D.element_size()
            if size >= scaled(SENDER_BYTES):
                yield np.asarray(ss), ds[0] if len(ds) == 1 else torch.cat(ds)
                ss, ds, size = [], [], 0
        if ss:
            yield np.asarray(ss), ds[0] if len(ds) == 1 else torch.cat(ds)


__all__ = ["RECEIVER_BYTES", "SENDER_BYTES", "Products"]
