"""A post-LN model's stream split into components for `why` (BERT, BART): every LayerNorm frozen at its σ.

In a post-LN block the stream is re-normalized after each sublayer, y = LN(r + s) with r the stream and s
the sublayer's write, so a write does not reach a later layer as a sum — circuits refuse such models. A
*score* can still be split exactly: with each LN frozen at the run's σ, LN(r + s) = N(r) + N(s) + β is
linear, so every component — the embeddings (the first block's input), each head's slice of an output
projection, each MLP's write — is carried through every later LN's map N, and the projection biases and
the LNs' β gather in one bias component (per position: N divides by each position's σ). At every LN the
carried components must add up to the LN's own output, or the model is refused with the gap.

    stream = PostLNStream(loaded, ids)          # one watched forward
    parts = stream.read_by(attention_module, side)   # {components, bias, x}: what that side reads, split
"""

from __future__ import annotations

import torch

from ...engine.tolerance import split_gap
from ...models.offload import param
from ..adapter import replay, routed
from ..ground.batches import batch_of, no_cache
from ..ground.norms import frozen_norm
from ..hooks import Hooks
from .layout import CircuitUnsupported, Finder, Watch, _linear_like, _same, is_norm, stacks


class PostLNStream:
    """The components of every read point of a post-LN model's attention layers, for one text."""

    def __init__(self, loaded, ids: torch.Tensor):
        self.loaded = loaded
        z: dict[int, torch.Tensor] = {}
        self.calls: dict[int, tuple] = {}  # layer -> the attention module's call (args, kwargs), for replay

        def keep(layer, out):
            z.setdefault(layer, out.detach())
            return out

        watch = Watch(loaded.model)
        try:
            with torch.no_grad(), Hooks() as hooks, routed(loaded, impl="eager", after_attend=[keep]):
                for i, m in enumerate(loaded.attention_modules):
                    hooks.before(m, lambda m, a, k, i=i: self.calls.setdefault(i, (a, k)), kwargs=True)
                loaded.model(**batch_of(loaded, ids), **no_cache(loaded))
        finally:
            watch.close()
        self.layer_of = {id(m): i for i, m in enumerate(loaded.attention_modules)}
        self.reads: dict[tuple[int, str], dict] = {}  # (layer, "x" | "kv") -> {components, bias, x}
        self.final: dict[str, dict] = {}
        for stream, blocks in stacks(loaded):
            self._walk(watch, stream, blocks, z)

    def _walk(self, watch: Watch, stream: str, blocks: list, z: dict) -> None:
        x0 = watch.inputs[id(blocks[0])][0]  # [T, d]: the embeddings, after their own norm
        comps = [({"kind": "embed", "layer": None, "head": None, "stream": stream}, x0.double())]
        bias = torch.zeros_like(x0, dtype=torch.float64)
        for i, block in enumerate(blocks):
            f = Finder(watch, block)
            attns = [m for m in block.modules() if id(m) in self.layer_of]
            self._read_point(watch, attns[0], comps, bias)
            for ln in [m for m in watch.order if is_norm(m) and any(m is x for x in block.modules())]:
                u, y = watch.inputs[id(ln)][0].double(), watch.outputs[id(ln)][0].double()
                write = u - sum(c for _, c in comps) - bias
                new, wb = self._split(f, attns, write, z, stream, i)
                frozen = frozen_norm(ln, u[None], y[None])
                if frozen is None:
                    raise CircuitUnsupported(f"{stream} block {i}: {type(ln).__name__} is not a LayerNorm or RMSNorm")
                N, beta = frozen
                comps = [(s, N(c[None])[0].double()) for s, c in comps + new]
                bias = N((bias + wb)[None])[0].double() + beta.double()
                _check(sum(c for _, c in comps) + bias, y, f"{stream} block {i}: the stream after {type(ln).__name__}")
                for a in attns[1:]:  # a cross-attention reads the stream after the self-attention's LN
                    if (self.layer_of[id(a)], "x") not in self.reads and _same(watch.inputs[id(a)][0], y):
                        self._read_point(watch, a, comps, bias)
        self.final[stream] = {"components": comps, "bias": bias}

    def _read_point(self, watch: Watch, attn, comps, bias) -> None:
        x = watch.inputs[id(attn)][0].double()
        _check(sum(c for _, c in comps) + bias, x, "the stream an attention reads")
        self.reads[(self.layer_of[id(attn)], "x")] = {"components": list(comps), "bias": bias, "x": x}

    def _split(self, f: Finder, attns: list, write: torch.Tensor, z: dict, stream: str, i: int):
        """A sublayer's write as components: an attention's output projection split by head (its bias to the
        bias component), else one MLP component."""
        size = float(write.abs().max())
        for a in attns:
            layer = self.layer_of[id(a)]
            heads = z[layer][0]  # [H, T, Dv]
            flat = heads.transpose(0, 1).reshape(heads.shape[1], -1)  # [T, H·Dv]
            o = f.first(lambda m, flat=flat: _linear_like(m) and _same(f.input(m), flat[None]))
            if o is not None and _same(f.output(o)[0], write, size):
                W = param(o).double()  # [d, H·Dv]
                H, Dv = heads.shape[0], heads.shape[-1]
                cross = self.loaded.attention_kinds[layer] == "cross"
                new = [
                    (
                        {
                            "kind": "head",
                            "layer": i,
                            "head": h,
                            "stream": stream,
                            "attention": "cross" if cross else "self",
                        },
                        heads[h].double() @ W[:, h * Dv : (h + 1) * Dv].T,
                    )
                    for h in range(H)
                ]
                b = param(o, "bias")
                b = b.double() if b is not None else torch.zeros(W.shape[0], dtype=torch.float64)
                return new, b.expand_as(write)
        return [({"kind": "mlp", "layer": i, "head": None, "stream": stream}, write)], torch.zeros_like(write)


@torch.no_grad()
def side_parts(stream: PostLNStream, module, layer: int, side: str, unit: int, channel: str, positions: list[int]):
    """[C + 1, P, D]: the channel's unit (q: a query head; k: a kv head) at ``positions``, split into the
    components of what it reads (then the bias component), and those components as dicts. ``side``: "x"
    (the module's hidden states) or "kv" (a cross-attention's keys: the encoder's output)."""
    read = stream.final["encoder"] if side == "kv" else stream.reads[(layer, "x")]
    comps, bias = read["components"], read["bias"]
    rows = torch.stack([c for _, c in comps] + [bias, torch.zeros_like(bias)])[:, :, :]  # [C + 2, T, d]
    args, kwargs = stream.calls[layer]
    key = "key_value_states" if side == "kv" else "hidden_states"
    dtype = next(module.parameters()).dtype
    from .stream import _tile

    with routed(stream.loaded, impl="eager"):
        q, k, _ = replay(
            module, _tile(args, 1, rows.shape[0]), _tile(kwargs, 1, rows.shape[0]), **{key: rows.to(dtype)}
        )
    t = (q if channel == "q" else k)[:, unit][:, positions].double()  # [C + 2, P, D]
    C = len(comps)
    return torch.cat([t[:C] - t[-1:], t[C : C + 1]]), [s for s, _ in comps]


def _check(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    gap, ok = split_gap(got, want)
    if not ok:
        raise CircuitUnsupported(f"{what} is not the sum of its components (max difference {gap:.3g})")


__all__ = ["PostLNStream", "side_parts"]
