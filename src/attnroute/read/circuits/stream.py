"""The residual stream inside one forward: what every sender wrote, and receivers' inputs changed on request.

    with Forward(layout, graph, edits) as fw:          # hooks on the model's blocks for one forward
        model(**batch)
    fw.rec[("decoder", 3)]["x_in"]                     # what block 3 read, [B, T, d]
    writes(layout, graph, fw.rec, senders)             # those senders' writes, [n, B, T, d]

Recorded per block (key (stream, index)): ``x_in`` its input (the attention's read point), ``call`` its
attention's call (for replay; a self-attention's without its input, which every replay replaces), ``z``
the heads' outputs as the output projection reads them [B, T, H·Dv], ``post`` the post-norm's input and
output (Gemma), the same with a "c" for a cross-attention, ``x_cross`` and ``x_mlp`` the cross-attention's
and the MLP's read points (their norms' inputs), ``mlp`` the MLP's write, ``out`` the block's output (for a
restart) and ``x_out``. ``writes=False`` (a gradient pass) leaves out z, post and mlp, which only the
senders' writes are computed from.

An edit changes a receiver's *input* — the residual it reads, before its own norm — by a correction
``corr`` on some rows: ``edits.corr(receiver, x)`` returns [(rows, corr [len(rows), T, d])] or []. The
receiver's norm and projections are then recomputed from x + corr (adapter.replay: the attention module's
own forward, stopped at its attention call), and only that receiver's head and channel take the result;
every other receiver reads what it read. Everything after runs as the model runs it. A channel that is its
projection alone, or its projection rotated by the call's rotary embedding (checked each forward, sliced.py),
is computed from that head's columns instead of a replay.
"""

from __future__ import annotations

import torch

from ...engine import Intervention
from ...models.offload import param
from ..adapter import replay
from ..ground.norms import frozen_norm
from ..hooks import Hooks
from .graph import Graph, where_read
from .layout import Block, CircuitUnsupported, Layout
from .sliced import fit


def _first(args, kwargs):
    return args[0] if args and isinstance(args[0], torch.Tensor) else kwargs.get("hidden_states")


def _tensor(out):
    return out[0] if isinstance(out, tuple) else out


class Forward:
    """Hooks for one forward over a Layout: records the stream's parts and applies receivers' edits."""

    def __init__(self, layout: Layout, graph: Graph, edits=None, interpolate: dict | None = None, writes=True):
        self.layout, self.graph, self.edits = layout, graph, edits
        self.writes = writes  # False: the read points alone (a gradient pass reads no sender's write)
        self.interpolate = interpolate or {}  # stream -> callable(x_in of block 0) -> its replacement
        self.rec: dict[tuple, dict] = {}
        self._hooks = Hooks()
        # only a forward that edits receivers carries interventions (edits of q, k, v: the fused kernel still runs)
        sublayers = [(b, a) for b in layout.blocks for a in (b.attn, b.cross) if a]
        self.interventions = [ReceiverEdit(self, b, a) for b, a in sublayers] if edits is not None else []

    def __enter__(self):
        for b in self.layout.blocks:
            self._install(b)
        return self

    def __exit__(self, *exc):
        self._hooks.remove()
        # each ReceiverEdit points back at this forward: a cycle only the cyclic collector frees, and until it
        # ran a circuit forward's edits — their [senders, copies, n·T·d] D rows, 357 MiB a chunk on an IOI run —
        # stayed alive, chunk after chunk (IOI's curve peaked at 8.6 GiB, 3.5 without). Broken here: freed on return.
        self.interventions = []

    def _hook(self, module, pre=None, post=None) -> None:
        if pre is not None:
            self._hooks.before(module, pre, kwargs=True)
        if post is not None:
            self._hooks.after(module, post)

    def _install(self, b: Block) -> None:
        r = self.rec.setdefault((b.stream, b.index), {})
        self._hook(
            b.module, pre=lambda m, a, k: self._block_in(b, r, a, k), post=lambda m, a, o: self._block_out(b, r, o)
        )

        # a part is recorded only while its block's own call is open: a checkpointed block's recomputation in the
        # backward (recompute.py) runs the parts again, not the block's hooks, and must not replace the record
        def put(key, value, once=False):
            if r.get("open") and (self.writes or key.removeprefix("c") not in WRITES):
                _put(r, key, value, once)

        for a, c in ((b.attn, ""), (b.cross, "c")):
            if a is None:
                continue
            self._hook(a.module, pre=lambda m, args, kw, c=c: put(c + "call", _call(args, kw, c)))
            self._hook(a.o_proj, pre=lambda m, args, kw, c=c: put(c + "z", _first(args, kw)))
            if a.post is not None:
                self._hook(a.post, post=lambda m, args, out, c=c: put(c + "post", (args[0], out)))
            if c:
                self._hook(a.norm, pre=lambda m, args, kw: put("x_cross", _first(args, kw), once=True))
        self._hook(b.mlp_norm, pre=lambda m, args, kw: put("x_mlp", _like(_first(args, kw), r), once=True))
        self._hook(b.mlp_in, pre=lambda m, args, kw: self._mlp_in(b, r, args, kw))
        self._hook(b.mlp_post or b.mlp_out, post=lambda m, args, out: put("mlp", _tensor(out)))

    def _block_in(self, b: Block, r: dict, args, kwargs):
        x = _first(args, kwargs)
        if b.index == 0 and b.stream in self.interpolate:
            x = self.interpolate[b.stream](x)
            args, kwargs = _replace_first(args, kwargs, x)
        r.clear()
        r["x_in"], r["open"] = x, True
        return args, kwargs

    def _block_out(self, b: Block, r: dict, out):
        r["out"], r["x_out"] = out, _tensor(out)
        del r["open"]
        last = self.layout.streams[-1]
        if b.stream != last or b.index != len(self.layout.stack(last)) - 1 or self.edits is None:
            return out
        x = _tensor(out)
        found = self.edits.corr(self.graph.receivers_of(last, None)[0], x, self)
        if not found:
            return out
        x = _apply(x, found)
        r["x_out"] = x
        return (x, *out[1:]) if isinstance(out, tuple) else x

    def _mlp_in(self, b: Block, r: dict, args, kwargs):
        if self.edits is None:
            return None
        (j,) = [j for j in self.graph.receivers_of(b.stream, b.index) if self.graph.receivers[j].kind == "mlp"]
        x = r["x_mlp"]
        found = self.edits.corr(j, x, self)
        if not found:
            return None
        inp = _first(args, kwargs)
        normed = b.mlp_norm.forward(_apply(x, found)).reshape(inp.shape)
        return _replace_first(args, kwargs, normed)


WRITES = ("z", "post", "mlp")  # what only the senders' writes are computed from


def _call(args, kwargs, c: str) -> tuple:
    """A self-attention's call, kept for replays, without its input: every replay gives its own (the norm of
    the residual it reads), and the normed input is another [B, T, d] per block per recorded run. A
    cross-attention's call keeps it: a replay of its keys and values leaves the queries' input as it was."""
    if c:
        return args, kwargs
    if args and isinstance(args[0], torch.Tensor):
        return (None, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": None} if "hidden_states" in kwargs else kwargs


def _like(x: torch.Tensor, r: dict) -> torch.Tensor:
    """A residual as [B, T, d] (OPT flattens its rows to [B·T, d] before the MLP's norm)."""
    return x.reshape(r["x_in"].shape) if x.shape != r["x_in"].shape else x


def _put(r: dict, key: str, value, once: bool = False) -> None:
    """A hook's record (hooks must return None to change nothing). ``once``: the first call of the forward
    (a norm shared by the attention and the MLP is called once; a cross-attention's norm once per block)."""
    if not (once and key in r):
        r[key] = value


def _apply(x: torch.Tensor, found: list) -> torch.Tensor:
    x = x.clone()
    for rows, corr in found:
        x[rows] = x[rows] + corr.to(x.dtype)
    return x


def _replace_first(args, kwargs, x):
    if args and isinstance(args[0], torch.Tensor):
        return (x, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": x}


class ReceiverEdit(Intervention):
    """At one attention sublayer: the q, k, v of edited receivers, recomputed from their corrected inputs."""

    def __init__(self, fw: Forward, block: Block, attn):
        super().__init__([], attn.layer)
        self.fw, self.block, self.attn = fw, block, attn
        g = fw.graph
        mine = g.receivers_of("decoder" if attn.cross else block.stream, block.index)
        kind = "cross" if attn.cross else "self"
        self.receivers = [j for j in mine if g.receivers[j].kind == "head" and g.receivers[j].attention == kind]
        self.replayed: set[str] = set()  # channels that failed sliced.fit in this forward (QK-norm): not refitted

    def edit_inputs(self, q, k, v):
        if self.fw.edits is None:
            return q, k, v
        new = {"q": q, "k": k, "v": v}
        for side, ids in self._sides().items():
            x, norm, key = self._read_point(side)
            found: dict[tuple, list] = {}  # one entry per distinct correction (the same object: the same input)
            for j in ids:
                for rows, corr in self.fw.edits.corr(j, x, self.fw):
                    found.setdefault((id(rows), id(corr)), [[], rows, corr])[0].append(j)
            if not found:
                continue
            sliced = self._sliced(ids, x, norm, new)
            fast = {j for j in ids if self._channel(j) in sliced}
            projected, replayed = _split(list(found.values()), fast)
            self._project(projected, sliced, norm, x, new)
            if replayed:
                self._replay(_slots(replayed), x, norm, key, new)
        return new["q"], new["k"], new["v"]

    def _channel(self, j: int) -> str:
        return self.fw.graph.receivers[j].channel

    def _sliced(self, ids: list[int], x, norm, new: dict) -> dict:
        """{channel: Sliced} for this side's channels that are plain projections in this forward (sliced.py)."""
        channels = {self._channel(j) for j in ids} - self.replayed
        if not channels:
            return {}
        normed = norm.forward(x[:1]) if norm is not None else x[:1]
        rotary = self._rotary()
        found = {c: fit(self.attn.module, c, normed, new[c], rotary) for c in channels}
        self.replayed |= {c for c, f in found.items() if f is None}
        return {c: f for c, f in found.items() if f is not None}

    def _rotary(self):
        """The (cos, sin) this forward's call gave the module (transformers' ``position_embeddings``), or None:
        sliced.fit checks whether the q and k channels are their projections rotated by it."""
        r = self.fw.rec[(self.block.stream, self.block.index)]
        args, kwargs = r.get("ccall" if self.attn.cross else "call", ((), {}))
        return kwargs.get("position_embeddings", args[1] if len(args) > 1 else None)

    def _project(self, edits: list, sliced: dict, norm, x, new: dict) -> None:
        """Receivers on a sliced channel: each correction's input normed once, each receiver's head projected."""
        cloned: set = set()
        for js, rows, corr in edits:
            xs = x[rows] + corr.to(x.dtype)
            normed = norm.forward(xs) if norm is not None else xs
            for j in js:
                rc = self.fw.graph.receivers[j]
                if rc.channel not in cloned:
                    new[rc.channel] = new[rc.channel].clone()
                    cloned.add(rc.channel)
                t = new[rc.channel]
                t[rows, rc.head] = sliced[rc.channel].head(normed, rc.head, rows).to(t.dtype)

    def _sides(self) -> dict:
        """Receivers grouped by the point they read: a cross-attention's queries and its keys/values differ."""
        g = self.fw.graph
        if not self.attn.cross:
            return {"x": self.receivers}
        return {
            "x": [j for j in self.receivers if g.receivers[j].channel == "q"],
            "kv": [j for j in self.receivers if g.receivers[j].channel != "q"],
        }

    def _read_point(self, side: str):
        r = self.fw.rec[(self.block.stream, self.block.index)]
        if side == "kv":  # the encoder's final residual, through the encoder's final norm
            enc = self.fw.layout.stack("encoder")[-1]
            return (
                self.fw.rec[("encoder", enc.index)]["x_out"],
                self.fw.layout.final_norms.get("encoder"),
                "key_value_states",
            )
        return (r["x_cross"] if self.attn.cross else r["x_in"]), self.attn.norm, "hidden_states"

    def _replay(self, slots: list, x, norm, key: str, new: dict) -> None:
        """Every slot's corrected input through the norm and one replay of the attention module (the slots
        stacked along the batch), and each edited receiver's head and channel taken from its slot."""
        r = self.fw.rec[(self.block.stream, self.block.index)]
        xs = torch.cat([_apply(x, [(rows, corr) for _, rows, corr in slot]) for slot in slots])
        normed = norm.forward(xs) if norm is not None else xs
        args, kwargs = r["ccall" if self.attn.cross else "call"]
        m, rows = len(slots), x.shape[0]
        q2, k2, v2 = replay(self.attn.module, _tile(args, rows, m), _tile(kwargs, rows, m), **{key: normed})
        fresh = {"q": q2, "k": k2, "v": v2}
        for i, slot in enumerate(slots):
            for js, rows_j, _ in slot:
                for j in js:  # every receiver whose input got this correction
                    rc = self.fw.graph.receivers[j]
                    t = new[rc.channel] = new[rc.channel].clone()
                    t[rows_j, rc.head] = fresh[rc.channel][i * rows + rows_j, rc.head].to(t.dtype)


def _split(edits: list, fast: set) -> tuple[list, list]:
    """Edits [receivers, rows, correction] as (those of the receivers in ``fast``, the others), empty ones dropped."""
    parts: tuple[list, list] = ([], [])
    for js, rows, corr in edits:
        for part, want in zip(parts, (True, False), strict=True):
            mine = [j for j in js if (j in fast) == want]
            if mine:
                part.append((mine, rows, corr))
    return parts


def _tile(obj, rows: int, m: int):
    """A call's arguments for a batch stacked m times: tensors whose first axis is the batch repeated."""
    if m == 1:
        return obj
    if isinstance(obj, torch.Tensor):
        return obj.repeat(m, *([1] * (obj.dim() - 1))) if obj.dim() >= 2 and obj.shape[0] == rows else obj
    if isinstance(obj, tuple | list):
        return type(obj)(_tile(o, rows, m) for o in obj)
    if isinstance(obj, dict):
        return {k: _tile(v, rows, m) for k, v in obj.items()}
    return obj


def _slots(edits: list) -> list[list]:
    """Edits (receivers, rows, correction) grouped so that no row is edited twice in a group: one replay per
    group."""
    slots: list[tuple[set, list]] = []
    for e in edits:
        rows = set(e[1].tolist())
        for used, group in slots:
            if not used & rows:
                used |= rows
                group.append(e)
                break
        else:
            slots.append((rows, [e]))
    return [group for _, group in slots]


# ---------------------------------------------------------------- the senders' writes


def wide(x: torch.Tensor) -> torch.dtype:
    """The dtype writes are summed in: float32 at least (float64 for a float64 model)."""
    return torch.promote_types(x.dtype, torch.float32)


def o_matrix(o_proj) -> torch.Tensor:
    """The output projection as [d, H·Dv] (a Conv1D stores its transpose)."""
    W = param(o_proj)
    return W.t() if type(o_proj).__name__ == "Conv1D" else W


def head_writes(layout: Layout, block: Block, r: dict, cross: bool) -> torch.Tensor:
    """What each head of the block's attention (or cross-attention) wrote into the stream [H, B, T, d]:
    its slice of the output projection, through the post-norm at this run's own scale (Gemma), × scale."""
    a = block.cross if cross else block.attn
    c = "c" if cross else ""
    x = r["x_in"]
    B, T = x.shape[0], x.shape[1]
    dt = wide(x)
    W = o_matrix(a.o_proj).to(dt)
    H = layout.heads
    z = r[c + "z"].reshape(B, T, H, -1).to(dt)
    out = torch.einsum("bthv,dhv->hbtd", z, W.view(W.shape[0], H, -1))
    if a.post is not None:
        inp, y = r[c + "post"]
        frozen = frozen_norm(a.post, inp.reshape(B, T, -1), y.reshape(B, T, -1))
        if frozen is None:
            raise CircuitUnsupported(f"{type(a.post).__name__} after the attention is not a LayerNorm or RMSNorm")
        out = frozen[0](out)
    return out * block.scale


def mlp_write(block: Block, r: dict) -> torch.Tensor:
    x = r["x_in"]
    return r["mlp"].reshape(x.shape).to(wide(x)) * block.scale


def part_of(sender) -> tuple[str, int | None, str]:
    """(stream, block, part) of a sender: its writes are computed a part at a time (embed | self | cross |
    mlp), as soon as that part has run."""
    part = sender.kind if sender.kind != "head" else sender.attention
    return sender.stream, sender.layer, part


def sender_writes(layout: Layout, graph: Graph, rec: dict, stream: str, block: int | None, part: str) -> dict:
    """{sender index: its write [B, T, d]} for the senders of one part of one block."""
    if part == "embed":
        s = next(i for i, x in enumerate(graph.senders) if x.kind == "embed" and x.stream == stream)
        x = rec[(stream, 0)]["x_in"]
        return {s: x.to(wide(x))}
    b = layout.stack(stream)[block]
    r = rec[(stream, block)]
    mine = [i for i, x in enumerate(graph.senders) if part_of(x) == (stream, block, part)]
    if part == "mlp":
        return {mine[0]: mlp_write(b, r)}
    heads = head_writes(layout, b, r, part == "cross")
    return {i: heads[graph.senders[i].head] for i in mine}


def read_value(layout: Layout, rec: dict, receiver) -> torch.Tensor:
    """What ``receiver`` read in a recorded forward: the residual at its read point [B, T, d]."""
    stream, block = where_read(receiver)
    if receiver.kind == "logits":
        last = layout.stack(stream)[-1]
        return rec[(stream, last.index)]["x_out"]
    if receiver.attention == "cross" and receiver.channel != "q":
        return rec[("encoder", layout.stack("encoder")[-1].index)]["x_out"]
    r = rec[(stream, block)]
    if receiver.kind == "mlp":
        return r["x_mlp"]
    return r["x_cross"] if receiver.attention == "cross" else r["x_in"]


__all__ = [
    "Forward",
    "ReceiverEdit",
    "head_writes",
    "mlp_write",
    "o_matrix",
    "part_of",
    "read_value",
    "sender_writes",
]
