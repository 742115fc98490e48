"""The runs behind a circuit experiment, for one group of same-length prompts.

    run = EdgeRun(loaded, layout, graph, group, metric, direction, ablation)  # clean and corrupt recorded
    run.estimates(ig_steps)        # EAP (m = 1) or EAP-IG: every edge's estimated Δ metric, [E, n]
    run.measure([edge, ...])       # path patching, exact: M with each edge patched, [k, n]
    run.circuits([mask, ...])      # M with only the masked edges clean, [k, n]

**Path patching** (the direct-path definition EAP and ACDC use; Wang et al. 2211.00593, Goldowsky-Dill et
al. 2304.05969): on the base run (corrupt when denoising, clean when noising) the receiver's input becomes
x + Δ_S, where Δ_S = w_S(source) − w_S(base) is the change of the sender's write between the runs; the
receiver's own norm and projections are recomputed on it; nothing else is changed, and everything after
the receiver runs as the model runs (stream.py). Copies of the batch carry one edge each; a decoder-only
model restarts at the receiver's block from the base run's recorded block outputs, and an encoder–decoder's
decoder receivers read the base run's recorded encoding (the encoder is not run again).

**A circuit** C runs on the clean prompts with every receiver R reading

    x_R = x_R(ablated) + Σ_{S : (S, R) ∈ C} (w_S(this run) − w_S(ablated))

— the ablated run's residual plus what the circuit's edges carry from this very forward. Because a pre-LN
stream is exactly the sum of its senders' writes (and constant biases, checked in layout.py), the empty
circuit *is* the ablated run and the full one the clean run; both are measured and reported. The ablated
run is the corrupt one, or (``ablation="mean"``) the mean of the clean run's writes, position by position,
over every prompt of the run's length — all runs and ranks (means.py).

**EAP** (Syed et al. 2310.10348): est(S → R) = Σ_t Δ_S[t] · ∂M/∂x_R[t] on the base run, for every edge
from one forward and one backward: the receivers' gradients are the metric's gradients at their q, k, v
(or MLP input) taken back through their own norm and projections (adapter.replay), and the scores are one
contraction over positions and features per pair of blocks — no tensor per edge. **EAP-IG** (Hanna et al.
2403.17806) averages the gradients over m runs whose stream starts (the embeddings) are interpolated from
the base run toward the source, at α = 0, 1/m, …, (m − 1)/m: with m = 1 it is EAP.
"""

from __future__ import annotations

import numpy as np
import torch

from ...engine.tolerance import split_tolerance
from ..adapter import routed
from ..effects import layer_stack, restart_check, run_from
from ..ground.batches import batch_of, logit_copies, metric_input, no_cache, output_kwargs, references
from ..ground.budget import scaled
from ..ground.copies import metric_of_copies, repeat_batch
from ..ground.pool import Recorded
from .graph import Graph, where_read
from .layout import CircuitUnsupported, Layout
from .stream import Forward, part_of, read_value, sender_writes

TOKEN_BUDGET = 4096  # tokens (copies × prompts × length) per exact forward
STREAM_BYTES = 512 << 20  # a circuit forward keeps every sender's write for its rows: copies sized to this
DELTA_BYTES = 512 << 20  # senders' deltas kept between uses (the rest recomputed from the recordings)


class EdgeRun(Recorded):
    SHARED = ("loaded", "layout", "graph", "metric", "means", "blocks")  # the rest is this run's (ground/pool.py)

    def __init__(
        self, loaded, layout: Layout, graph: Graph, group, metric, *, direction: str, ablation: str, means=None
    ):
        self.loaded, self.layout, self.graph, self.group = loaded, layout, graph, group
        self.metric, self.direction, self.ablation = metric, direction, ablation
        self.means = means  # mean ablation: the means over every clean prompt of this length (means.py)
        self.n = len(group.rows)
        self.blocks = layer_stack(loaded)
        self._writes: dict = {}
        self._deltas: dict = {}  # part -> (senders, deltas [s, n, T, d])
        self._pos: dict[int, int] = {}  # sender -> its row in its part's deltas
        self.kwargs = {**output_kwargs(loaded, metric), **no_cache(loaded)}
        self.fields = {"answer": group.answer, "wrong": group.wrong}
        out, self.clean, clean_blocks = self._record(group.clean)
        self.fields.update(references(loaded, out, batch_of(loaded, group.clean)))
        self.m_clean = self._metric(out, group.clean)
        clean_enc = getattr(out, "encoder_last_hidden_state", None)
        out, self.corrupt, corrupt_blocks = self._record(group.corrupt)
        self.m_corrupt = self._metric(out, group.corrupt)
        denoise = direction == "denoising"
        # an encoder–decoder's base-run encoding [n, S, d]: what a patch of a decoder receiver's input reads
        self.base_encoding = getattr(out, "encoder_last_hidden_state", None) if denoise else clean_enc
        self.base, self.source = (self.corrupt, self.clean) if denoise else (self.clean, self.corrupt)
        self.base_ids = group.corrupt if denoise else group.clean
        self.base_blocks = corrupt_blocks if denoise else clean_blocks
        self.m_base = self.m_corrupt if denoise else self.m_clean
        self.shortcut = self._restart_check()
        self.checked = _check_sums(layout, graph, self)

    # ---------------------------------------------------------------- forwards and the metric

    def _forward(
        self, ids, fw: Forward, copies: int = 1, start: int = 0, interventions=(), then=None, encoded=False, **hooks
    ):
        """The model on ``copies`` copies of ``ids`` under ``fw``'s hooks (gradients kept when enabled),
        restarted at block ``start`` from the base run's recorded block outputs, or (``encoded``) at the
        decoder of an encoder–decoder, which reads the base run's encoding. ``then(outputs)``, when given,
        runs inside the same routing (a backward whose checkpointed blocks rerun must attend as they did)
        and its result is returned."""
        batch = repeat_batch(batch_of(self.loaded, ids), copies)
        if encoded:
            batch["encoder_outputs"] = self._base_encoding(fw, copies)
        ivs = [*fw.interventions, *interventions]
        # every forward here — the recordings, the gradient pass, patched runs, circuits — takes the same
        # backend: a circuit's only edits are of receivers' inputs (ReceiverEdit: q, k, v, none needing the
        # weights), so "auto" picks torch's fused kernel wherever the model's attention allows it and the
        # engine's eager path elsewhere, alike for runs whose metrics are compared. Eager on Whisper's 1,500
        # encoder frames was a quarter of a clip circuit's time (65.6 s → 49.6 s, the same numbers).
        impl = "auto"
        if start:
            return run_from(
                self.loaded,
                start,
                self.base_blocks,
                batch,
                interventions=ivs,
                copies=copies,
                blocks=self.blocks,
                impl=impl,
                **self.kwargs,
            )
        with routed(self.loaded, interventions=ivs, impl=impl, **hooks):
            out = self.loaded.model(**batch, **self.kwargs)
            return out if then is None else then(out)

    def _base_encoding(self, fw: Forward, copies: int) -> tuple:
        """The base run's encoding for ``copies`` copies, and its final residual put in ``fw``'s record, where the
        cross-attention keys and values of a patched receiver read it (stream.ReceiverEdit._read_point). A patch
        of a decoder receiver's input cannot change the encoder: it is not run again (a Whisper clip's 1,500
        frames, 1.3 s a copy on one core, were most of a speech circuit's exact edges)."""
        last = self.layout.stack("encoder")[-1].index
        fw.rec[("encoder", last)]["x_out"] = self.base[("encoder", last)]["x_out"].repeat(copies, 1, 1)
        return (self.base_encoding.repeat(copies, 1, 1),)

    @torch.no_grad()
    def _record(self, ids):
        with Forward(self.layout, self.graph) as fw:
            out = self._forward(ids, fw)
        blocks = {b.index: fw.rec[(b.stream, b.index)]["out"] for b in self.layout.stack(self.layout.streams[-1])}
        return out, fw.rec, blocks

    def _metric_value(self, outputs, ids, copies: int = 1) -> torch.Tensor:
        batch = repeat_batch(batch_of(self.loaded, ids), copies)
        return metric_of_copies(self.metric, metric_input(self.loaded, outputs, batch), batch, self.fields, self.n)

    def _metric(self, outputs, ids, copies: int = 1) -> torch.Tensor:
        v = self._metric_value(outputs, ids, copies).detach()
        return v if v.dtype == torch.float64 else v.float()  # a float64 model keeps its precision

    def _restart_check(self) -> dict:
        if self.blocks is None or self.layout.streams != ["decoder"]:
            return {"used": False, "reason": "not one stack of layers: full forwards"}
        value = lambda out: self._metric(out, self.base_ids)  # noqa: E731
        return restart_check(
            self.loaded,
            self.base_blocks,
            batch_of(self.loaded, self.base_ids),
            value,
            self.m_base,
            self.blocks,
            **self.kwargs,
        )

    # ---------------------------------------------------------------- the senders' writes and the deltas

    def ablated(self, part: tuple) -> dict[int, torch.Tensor]:
        """The writes edges outside a circuit carry for one part (stream, block, part): the corrupt run's, or
        each sender's mean clean write over every prompt of this length (GroupMeans, [1, T, d]). Kept: every
        circuit forward reads them."""
        if part not in self._writes:
            if self.ablation == "corrupt":
                self._writes[part] = sender_writes(self.layout, self.graph, self.corrupt, *part)
            else:
                senders = [s for s, x in enumerate(self.graph.senders) if part_of(x) == part]
                self._writes[part] = {s: self._means().write(self.group.length, s) for s in senders}
        return self._writes[part]

    def ablated_read(self, receiver: int) -> torch.Tensor:
        """What ``receiver`` (an index) reads in the ablated run: the corrupt run's, or the mean over prompts."""
        if self.ablation == "corrupt":
            return read_value(self.layout, self.corrupt, self.graph.receivers[receiver])
        return self._means().read(self.group.length, receiver)

    def _means(self):
        if self.means is None or self.group.length not in self.means.means:
            raise RuntimeError("mean ablation: GroupMeans.fill must run before the first circuit")
        return self.means

    def delta(self, s: int) -> torch.Tensor:
        """Δ_S = w_S(source) − w_S(base) [n, T, d]."""
        return self.deltas([s])[0]

    def deltas(self, senders: list[int]) -> torch.Tensor:
        """[len(senders), n, T, d] (senders of any parts)."""
        return torch.stack([self.part_deltas(part_of(self.graph.senders[s]))[1][self._pos[s]] for s in senders])

    def part_deltas(self, key: tuple) -> tuple[list[int], torch.Tensor]:
        """(the senders of one part — a block's heads, its MLP, an embedding —, their deltas [s, n, T, d]).
        A bounded number of parts is kept (an LRU of DELTA_BYTES): a long text never holds every delta."""
        if key not in self._deltas:
            src, base = sender_writes(*self._at(self.source), *key), sender_writes(*self._at(self.base), *key)
            ids = list(src)
            self._deltas[key] = (ids, torch.stack([src[i] - base[i] for i in ids]))
            self._pos.update({s: i for i, s in enumerate(ids)})
            self._trim()
        self._deltas[key] = self._deltas.pop(key)  # most recently used last
        return self._deltas[key]

    def sender_parts(self) -> dict[tuple, list[int]]:
        """{part: its senders} in stream order (a stream's embedding, then each block's heads and MLP)."""
        found: dict[tuple, list[int]] = {}
        for s, x in enumerate(self.graph.senders):
            found.setdefault(part_of(x), []).append(s)
        return found

    def _at(self, rec: dict):
        return (self.layout, self.graph, rec)

    def _trim(self) -> None:
        while len(self._deltas) > 1 and sum(d.numel() * 4 for _, d in self._deltas.values()) > scaled(DELTA_BYTES):
            self._deltas.pop(next(iter(self._deltas)))

    # ---------------------------------------------------------------- path patching, exact

    def copies(self, k: int) -> int:
        by_tokens = scaled(TOKEN_BUDGET) // max(1, self.n * self.group.length)
        return max(1, min(k, by_tokens, self._logit_copies()))

    def _logit_copies(self) -> int:
        return logit_copies(self.loaded, self.n, self.group.length, self.kwargs)

    @torch.no_grad()
    def measure(self, edges: list[int], scale: float = 1.0) -> torch.Tensor:
        """M with each edge path-patched on the base run, [len(edges), n]; edges grouped by receiver block.
        ``scale``: the receiver reads x + scale·Δ_S (1: the edge patched; a small ε: its derivative)."""
        out = torch.empty(len(edges), self.n, dtype=self.m_base.dtype)
        groups: dict[tuple, list[int]] = {}
        for i, e in enumerate(edges):
            groups.setdefault(where_read(self.graph.receivers[self.graph.pairs[e][1]]), []).append(i)
        for (stream, block), idx in groups.items():
            start = self._start(stream, block)
            encoded = stream == "decoder" and self.base_encoding is not None
            k = self.copies(len(idx))
            for j in range(0, len(idx), k):
                chunk = idx[j : j + k]
                edits = PathEdits(self, [edges[i] for i in chunk], scale)
                with Forward(self.layout, self.graph, edits) as fw:
                    res = self._forward(self.base_ids, fw, len(chunk), start, encoded=encoded)
                out[chunk] = self._metric(res, self.base_ids, len(chunk)).view(len(chunk), self.n)
        return out

    def _start(self, stream: str, block: int | None) -> int:
        """The block a patched forward restarts at (its receiver's; the last for the final residual), or 0."""
        if not self.shortcut["used"] or stream != "decoder":
            return 0
        return len(self.layout.stack("decoder")) - 1 if block is None else block

    # ---------------------------------------------------------------- circuits

    def circuit_copies(self) -> int:
        per = len(self.graph.senders) * self.n * self.group.length * self.layout.d_model * 4
        return max(1, min(scaled(STREAM_BYTES) // max(1, per), self._logit_copies()))

    @torch.no_grad()
    def circuits(self, masks: list[np.ndarray]) -> torch.Tensor:
        """M of each circuit (a bool mask over the edges) on the clean prompts, [len(masks), n]."""
        out = torch.empty(len(masks), self.n, dtype=self.m_base.dtype)
        k = self.circuit_copies()
        for j in range(0, len(masks), k):
            chunk = masks[j : j + k]
            edits = CircuitEdits(self, chunk)
            with Forward(self.layout, self.graph, edits) as fw:
                res = self._forward(self.group.clean, fw, len(chunk))
            out[j : j + len(chunk)] = self._metric(res, self.group.clean, len(chunk)).view(len(chunk), self.n)
        return out


class PathEdits:
    """One edge per copy of the batch: its receiver reads x + Δ_S on that copy's rows."""

    def __init__(self, run: EdgeRun, edges: list[int], scale: float = 1.0):
        self.by_receiver: dict[int, list] = {}
        n = run.n
        for c, e in enumerate(edges):
            s, r = (int(x) for x in run.graph.pairs[e])
            rows = torch.arange(c * n, (c + 1) * n)
            self.by_receiver.setdefault(r, []).append((rows, scale * run.delta(s)))

    def corr(self, receiver: int, x, fw) -> list:
        return self.by_receiver.get(receiver, [])


class CircuitEdits:
    """One circuit per copy: every receiver reads the ablated residual plus what its circuit edges carry."""

    def __init__(self, run: EdgeRun, masks: list[np.ndarray]):
        self.run, self.masks, self.n = run, np.stack(masks), run.n
        self.parts = run.sender_parts()
        # stream -> (its first sender, D_S of its senders over every copy [its senders, k, n·T·d]): one block per
        # stream, filled a part at a time as the forward reaches it and zero elsewhere, so that a read point's
        # senders are one slice of it (a concatenation per read point re-copied every earlier D: 3.6 s of a
        # 15-token SmolLM2 pair's 33 s circuit)
        self.rows: dict[str, tuple[int, torch.Tensor]] = {}
        self.filled: set[tuple] = set()
        self.at_point: dict[tuple, list[int]] = {}  # read point -> the receivers that read it
        for j, point in enumerate(run.graph.read_points):
            self.at_point.setdefault(point, []).append(j)
        # read point -> (its input x, {receiver: correction}): a point's receivers are corrected together, and
        # receivers whose circuits hold the same edges get the same object, so the forward replays them once.
        # A point's corrections are dropped once each of its receivers has read them (kept for the whole
        # forward, every layer's [k, U, n·T·d] stayed: 10.2 GiB of IOI's circuit command, 6.3 without)
        self.done: dict[tuple, tuple[torch.Tensor, dict[int, list]]] = {}
        self.read: dict[tuple, set[int]] = {}  # read point -> its receivers that have read this forward

    def _part(self, part: tuple, fw) -> None:
        """D_S = w_S(this forward) − w_S(ablated) for one part's senders, computed once per forward into its
        stream's rows."""
        if part in self.filled:
            return
        now = sender_writes(self.run.layout, self.run.graph, fw.rec, *part)
        ab = self.run.ablated(part)
        first, rows = self._stream_rows(part[0], next(iter(now.values())))
        k, shape = len(self.masks), next(iter(now.values())).shape[1:]
        for s in self.parts[part]:  # [k, n, T, d] − [n or 1 (a mean), T, d], into its row: no repeated copy
            torch.sub(now[s].view(k, self.n, *shape), ab[s].to(rows.dtype), out=rows[s - first].view(k, self.n, *shape))
        self.filled.add(part)

    def _stream_rows(self, stream: str, w: torch.Tensor) -> tuple[int, torch.Tensor]:
        """The stream's block of D rows, zeros until its parts are filled (a stream's senders are contiguous:
        the graph lists them in stream order)."""
        if stream not in self.rows:
            ss = [s for s, x in enumerate(self.run.graph.senders) if x.stream == stream]
            assert ss == list(range(ss[0], ss[0] + len(ss))), "a stream's senders must be contiguous"
            dtype = torch.promote_types(w.dtype, torch.float32)
            self.rows[stream] = ss[0], torch.zeros(len(ss), len(self.masks), w[0].numel() * self.n, dtype=dtype)
        return self.rows[stream]

    def corr(self, receiver: int, x, fw) -> list:
        """Per copy: x_R(ablated) − x + Σ_{S in its circuit} D_S, or −Σ_{S outside} D_S where fewer senders are
        outside than inside (the same number: this forward's residual is the ablated one plus every D_S)."""
        point = self.run.graph.read_points[receiver]
        if point not in self.done or self.done[point][0] is not x:
            self.done[point], self.read[point] = (x, self._corrections(self.at_point[point], x, fw)), set()
        found = self.done[point][1].get(receiver, [])
        self.read[point].add(receiver)
        if len(self.read[point]) == len(self.at_point[point]):  # every receiver has it: computed again if asked
            del self.done[point], self.read[point]
        return found

    def _corrections(self, receivers: list[int], x, fw) -> dict[int, list]:
        """Every receiver of one read point at once: one product for all their distinct circuits (_sums; a
        receiver-by-receiver sum read each part's D once per receiver: most of a circuit's time)."""
        k, n = len(self.masks), self.n
        edges = self.run.graph.matrix[:, receivers]  # (S, R)
        valid = edges >= 0
        on = self.masks[:, np.maximum(edges, 0)] & valid  # (k, S, R): the edge is in copy c's circuit
        off = valid & ~on
        inside = on.sum(1) <= off.sum(1)  # (k, R)
        coef = np.where(inside[:, None], on, -off.astype(int)).astype(np.float32)  # (k, S, R)
        patterns: dict[bytes, list[int]] = {}  # distinct (inside, coef) -> the receivers (positions) sharing it
        for i in range(len(receivers)):
            if inside[:, i].any() or coef[:, :, i].any():  # else: every edge inside in every copy, nothing to do
                patterns.setdefault(inside[:, i].tobytes() + coef[:, :, i].tobytes(), []).append(i)
        if not patterns:
            return {}
        first = [group[0] for group in patterns.values()]
        dtype, shape = torch.promote_types(x.dtype, torch.float32), x.shape[1:]
        c = torch.from_numpy(np.ascontiguousarray(coef[:, :, first].transpose(0, 2, 1))).to(dtype)  # (k, U, S)
        use = inside[:, first]  # (k, U)
        acc = self._sums(c, fw, dtype, n * shape.numel()).view(k, len(first), n, *shape)
        # the ablated residual is the read point's, the same for all its receivers: x_R(ablated) − x once
        base = self.run.ablated_read(receivers[0]).to(dtype)
        start = (base.expand(n, *shape) if base.shape[0] == 1 else base)[None] - x.to(dtype).view(k, n, *shape)
        out: dict[int, list] = {}
        for u, group in enumerate(patterns.values()):
            for copy in np.flatnonzero(use[:, u]).tolist():
                acc[copy, u] += start[copy]  # in place: a pattern's input is its slice of acc
            found = [(torch.arange(k * n), acc[:, u].reshape(k * n, *shape))]
            out.update({receivers[i]: found for i in group})
        return out

    def _sums(self, c: torch.Tensor, fw, dtype, size: int) -> torch.Tensor:
        """Σ_S c[copy, u, S] · D_S for every copy and pattern, [k, U, size = n·T·d]: the parts some circuit here uses,
        stacked, in one product (a product per part re-read and re-wrote the whole [k, U, n·T·d] each time:
        most of a Whisper circuit's time, with 48 cross-attention receivers reading one encoder output)."""
        k, U, _ = c.shape
        used = (c.abs().sum((0, 1)) > 0).numpy()  # (S,): senders some circuit here adds or takes off
        parts = [(part, ss) for part, ss in self.parts.items() if used[ss].any()]
        if not parts:
            return torch.zeros(k, U, size, dtype=dtype)
        streams: dict[str, list[int]] = {}  # stream -> its senders some circuit here uses
        for part, group in parts:
            self._part(part, fw)
            streams.setdefault(part[0], []).extend(group)
        out = torch.zeros(k, U, size, dtype=dtype)
        for stream, ss in streams.items():
            first, rows = self.rows[stream]
            lo, hi = min(ss), max(ss) + 1  # senders in between that no circuit here uses: zero coefficients
            for copy in range(k):
                _add_sum(out[copy], c[copy, :, lo:hi], rows[lo - first : hi - first, copy])
        return out


def _add_sum(out: torch.Tensor, c: torch.Tensor, D: torch.Tensor) -> None:
    """out [U, size] += c [U, S] @ D [S, size] (a strided view of the stream's rows), reading only the senders
    some coefficient uses: a small circuit's copy (the curve's first points: a few edges per receiver), or a
    large one's (every edge inside but a few: their complement is summed), touches a handful of D's rows,
    where the product over all S re-read the whole block (a third of IOI's curve)."""
    cols = torch.nonzero(c.abs().sum(0)).flatten()
    if not len(cols):
        return
    if SPARSE * len(cols) > c.shape[1]:
        out.addmm_(c, D.to(out.dtype))
    else:
        out.addmm_(c[:, cols], D[cols].to(out.dtype))


SPARSE = 4  # gather the used rows of D when at most 1 in SPARSE is used (measured: a gather of more costs more)


# ---------------------------------------------------------------- the decomposition check


def _check_sums(layout: Layout, graph: Graph, run: EdgeRun) -> dict:
    """Every read point must be the sum of the writes of the senders before it plus a constant (biases): the
    clean and the corrupt run must leave the same rest. Refused otherwise, with the gap. One running sum per
    run along each stream, checked at each distinct read point."""
    worst, where, tol = 0.0, None, split_tolerance(torch.float32)
    for stream in layout.streams:
        events = sorted(
            [(pos, 0, s) for s, (st, pos) in enumerate(graph.write_points) if st == stream]
            + [(pos, 1, j) for j, (st, pos) in enumerate(graph.read_points) if st == stream]
        )
        total = {id(rec): 0.0 for rec in (run.clean, run.corrupt)}
        seen, block = set(), {}
        for pos, kind, i in events:
            if kind == 0:
                x = graph.senders[i]
                for rec in (run.clean, run.corrupt):
                    key = (id(rec), *part_of(x))
                    if key not in block:  # one part's writes at a time
                        block = {k: v for k, v in block.items() if k[1:] == key[1:]}
                        block[key] = sender_writes(layout, graph, rec, *part_of(x))
                    total[id(rec)] = total[id(rec)] + block[key][i]
                continue
            if pos in seen:
                continue
            seen.add(pos)
            r = graph.receivers[i]
            rest = [read_value(layout, rec, r) - total[id(rec)] for rec in (run.clean, run.corrupt)]
            whole = read_value(layout, run.clean, r)
            tol = max(tol, split_tolerance(whole.dtype))
            scale = max(1.0, float(whole.abs().max()))
            gap = float((rest[0] - rest[1]).abs().max()) / scale
            if gap > worst:
                worst, where = gap, r.label()
    if worst > tol:
        raise CircuitUnsupported(
            f"the residual stream at {where} is not the sum of its senders' writes plus a constant (the clean and "
            f"corrupt runs leave rests that differ by {worst:.2e} of its size): edges would not add up here"
        )
    return {"stream_sums_max_rel_diff": worst}
