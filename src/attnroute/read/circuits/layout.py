"""Where a model's residual stream is written and read: found by watching one short forward, then checked.

A circuit needs, for every block, the places its components write to and read from the stream:

    x_in ─┬─ attn_norm ─ attention ─ o_proj ─ (attn_post) ─ ×scale ─┐
          └─────────────────────────────────────────────────────────+─ x_mid
    x_mid ─┬─ mlp_norm ─ mlp ─ (mlp_post) ─ ×scale ─┐
           └────────────────────────────────────────+─ x_out

(a parallel block — GPT-NeoX, Cohere — feeds its MLP from x_in instead of x_mid; an encoder–decoder's
decoder block has a cross-attention between the two, reading the encoder's output). Module names differ
from one architecture to the next (o_proj, out_proj, c_proj, o; mlp, fc1/fc2, DenseReluDense …), so they are
not looked up by name: a forward on a few tokens records every submodule's input and output, and each part
is the module whose tensors are the ones the diagram says (the attention's input is the norm's output, the
output projection's input is the heads' outputs, …). Then the block is checked: x_out must equal x_in plus
what its parts wrote, in the same forward, or the model is refused with the gap. A block whose attention
reads x_in itself (post-LN: BERT, BART — the stream is re-normalized after every sublayer, so a write does
not reach a later layer as a sum) is refused with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...engine.tolerance import rounding
from ...errors import InputError
from ..adapter import routed
from ..hooks import Hooks


class CircuitUnsupported(InputError):
    """The model's stream cannot be decomposed into senders' writes (said with the measured reason)."""

    def __init__(self, message: str):
        super().__init__(message, field="model")


@dataclass
class Attention:
    """One attention sublayer of a block: its flat layer index (the engine's), its modules."""

    layer: int
    module: torch.nn.Module
    norm: torch.nn.Module  # its pre-norm (the receivers' own norm)
    o_proj: torch.nn.Module  # Linear [d, H·Dv] or Conv1D [H·Dv, d]
    post: torch.nn.Module | None = None  # Gemma: a norm on the sublayer's output before the add
    cross: bool = False


@dataclass
class Block:
    stream: str  # "encoder" or "decoder"
    index: int  # within its stack
    module: torch.nn.Module
    attn: Attention
    mlp_norm: torch.nn.Module
    mlp_in: torch.nn.Module  # its input is the MLP's (normed) input
    mlp_out: torch.nn.Module  # its output is the MLP's write (before mlp_post)
    mlp_post: torch.nn.Module | None = None
    cross: Attention | None = None
    parallel: bool = False  # the MLP reads x_in, not x_mid
    scale: float = 1.0  # residual multiplier (Granite)


@dataclass
class Layout:
    """Every block of every stack (encoder first), each stack's final norm, and the model's sizes."""

    blocks: list[Block]
    final_norms: dict[str, torch.nn.Module | None] = field(default_factory=dict)
    heads: int = 0
    kv_heads: int = 0
    d_model: int = 0

    def stack(self, stream: str) -> list[Block]:
        return [b for b in self.blocks if b.stream == stream]

    @property
    def streams(self) -> list[str]:
        return list(dict.fromkeys(b.stream for b in self.blocks))


def is_norm(m: torch.nn.Module) -> bool:
    return isinstance(m, torch.nn.LayerNorm) or "norm" in type(m).__name__.lower()


def _same(a, b, scale: float | torch.Tensor | None = None) -> bool:
    """The same tensor up to one operation's rounding in b's dtype (engine/tolerance "rounding"), relative to
    ``scale``: b's largest |value| by default, or a tensor of sizes element by element (a write read back as a
    difference of residuals rounds with each residual element: SmolLM2's stream reaches 764 in one dimension,
    and a size that large for every element would let a norm's output pass for a small MLP write in
    bfloat16). A flattened [B·T, d] equals its [B, T, d] (OPT runs its MLP on flattened rows)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.numel() != b.numel():
        return False
    if a.shape != b.shape and a.shape[-1] != b.shape[-1]:
        return False
    if isinstance(scale, torch.Tensor):
        size = scale.float().clamp(min=1.0)
    else:
        size = max(1.0, float(b.abs().max()) if scale is None else scale)
    return bool(((a.reshape(b.shape).float() - b.float()).abs() <= rounding(b.dtype) * size).all())


class Watch:
    """Records, for one forward, every module's first tensor input and its tensor output (by module)."""

    def __init__(self, root: torch.nn.Module):
        self.inputs: dict[int, torch.Tensor] = {}
        self.kwargs: dict[int, dict] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.order: list[torch.nn.Module] = []
        self._hooks = Hooks()
        for m in root.modules():
            self._hooks.before(m, self._pre, kwargs=True)
            self._hooks.after(m, self._post)

    def _pre(self, m, args, kwargs):
        x = args[0] if args and isinstance(args[0], torch.Tensor) else kwargs.get("hidden_states")
        if id(m) not in self.inputs and isinstance(x, torch.Tensor):
            self.inputs[id(m)], self.kwargs[id(m)] = x.detach(), kwargs
            self.order.append(m)

    def _post(self, m, args, out):
        y = out[0] if isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor) else out
        if id(m) not in self.outputs and isinstance(y, torch.Tensor):
            self.outputs[id(m)] = y.detach()

    def close(self) -> None:
        self._hooks.remove()


def stacks(loaded) -> list[tuple[str, list[torch.nn.Module]]]:
    """(stream, blocks) for each stack of layers: the decoder of a causal LM, the encoder of an encoder,
    both (encoder first) of an encoder–decoder — each a ModuleList whose blocks hold the attention layers."""
    kinds = {"self": "encoder" if loaded.kind != "causal" else "decoder", "decoder-self": "decoder", "cross": None}
    found = []
    for stream in dict.fromkeys(k for k in map(kinds.get, loaded.attention_kinds) if k):
        attns = [m for m, k in zip(loaded.attention_modules, loaded.attention_kinds) if kinds[k] == stream]
        found.append((stream, _blocks_holding(loaded.model, attns)))
    return found


def _blocks_holding(model, attns: list) -> list[torch.nn.Module]:
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == len(attns):
            if all(any(m is a for m in b.modules()) for a, b in zip(attns, module)):
                return list(module)
    raise CircuitUnsupported("circuits need the layers as one list of blocks per stack; this model has none")


__all__ = ["PROBE", "Attention", "Block", "CircuitUnsupported", "Layout", "Watch", "is_norm", "probe_input", "stacks"]


# ---------------------------------------------------------------- discovery


def _linear_like(m) -> bool:
    return isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D"


class Finder:
    """Parts of one block by the tensors the probe forward recorded."""

    def __init__(self, watch: Watch, block: torch.nn.Module, exclude: tuple = ()):
        self.w, self.block = watch, block
        inside = {id(m) for e in exclude for m in e.modules()}
        held = {id(m) for m in block.modules()}  # a set: a search per recorded module cost a second per circuit
        self.mods = [m for m in watch.order if id(m) in held and id(m) not in inside]

    def input(self, m):
        return self.w.inputs.get(id(m))

    def output(self, m):
        return self.w.outputs.get(id(m))

    def first(self, test) -> torch.nn.Module | None:
        return next((m for m in self.mods if test(m)), None)

    def outermost(self, test) -> torch.nn.Module | None:
        hits = [m for m in self.mods if test(m)]
        return next((m for m in hits if not any(m is not o and any(m is x for x in o.modules()) for o in hits)), None)


def _attention(f: Finder, attn_mod, layer: int, z: torch.Tensor, x_read, cross: bool, where: str) -> Attention:
    h = f.input(attn_mod)
    if _same(h, x_read):
        raise CircuitUnsupported(
            f"{where}: the attention reads the residual stream itself, with no norm of its own (post-LN, as BERT and "
            "BART): the stream is re-normalized after every sublayer, so a sender's write does not reach a later "
            "layer as a sum and an edge is not defined; circuits read pre-LN models"
        )
    norm = f.first(lambda m: is_norm(m) and _same(f.output(m), h) and _same(f.input(m), x_read))
    if norm is None:
        raise CircuitUnsupported(f"{where}: no norm found between the residual stream and the attention's input")
    zflat = z.transpose(1, 2).reshape(z.shape[0], z.shape[2], -1)  # (B, T, H·Dv): what the output projection reads
    o_proj = f.first(lambda m: _linear_like(m) and _same(f.input(m), zflat))
    if o_proj is None:
        raise CircuitUnsupported(f"{where}: no Linear reads the heads' outputs (the output projection was not found)")
    post = f.first(lambda m: is_norm(m) and _same(f.input(m), f.output(o_proj)))
    return Attention(layer, attn_mod, norm, o_proj, post, cross)


def _written(f: Finder, a: Attention) -> torch.Tensor:
    return f.output(a.post) if a.post is not None else f.output(a.o_proj)


def _mlp(f: Finder, x_in, x_mid, x_out, scale: float, attn_norm, where: str) -> dict:
    """mlp_norm, mlp_in, mlp_out, mlp_post and parallel, from where the MLP reads and what it writes."""
    mlp_norm = f.first(lambda m: is_norm(m) and m is not attn_norm and _same(f.input(m), x_mid))
    parallel = mlp_norm is None
    if parallel:  # GPT-NeoX: its own norm of x_in; Cohere: the attention's norm, shared
        mlp_norm = f.first(lambda m: is_norm(m) and _same(f.input(m), x_in) and m is not attn_norm) or attn_norm
    base = x_in if parallel else x_mid
    write = (x_out - base) / scale - (x_mid - x_in) / scale * parallel
    # the write is a difference of residuals, each rounded to its own elements' sizes (GPT-NeoX's parallel MLP is
    # read back past the attention's stream, which can be the larger where the MLP cancels it)
    size = torch.maximum(torch.maximum(x_out.abs(), x_mid.abs()), x_in.abs()) / scale
    post = f.first(lambda m: is_norm(m) and _same(f.output(m), write, size))
    out = (
        f.first(lambda m: _same(f.output(m), f.input(post)))
        if post is not None
        else f.outermost(lambda m: not is_norm(m) and _same(f.output(m), write, size))
    )
    normed = f.output(mlp_norm)
    mlp_in = f.outermost(lambda m: not is_norm(m) and _same(f.input(m), normed) and any(x is out for x in m.modules()))
    if mlp_in is None:  # fc1 … fc2 as siblings (Whisper, OPT): the one module reading the normed input
        readers = [m for m in f.mods if not is_norm(m) and _same(f.input(m), normed)]
        mlp_in = readers[0] if len(readers) == 1 else None
    if out is None or mlp_in is None:
        raise CircuitUnsupported(
            f"{where}: the block's output is not its input plus what its attention and MLP wrote "
            "(no module's output is the MLP's write): its stream cannot be split into senders"
        )
    return {"mlp_norm": mlp_norm, "mlp_in": mlp_in, "mlp_out": out, "mlp_post": post, "parallel": parallel}


PROBE = "The routes of a model are read from its weights."  # a short forward: the calls replayed, the σ frozen


def probe_input(loaded):
    """The probe forward's input: PROBE's tokens (a speech model's decoder reads them after its prompt, its
    encoder a silent clip's features — any input serves: the matrices come from replays on unit vectors)."""
    from ..ground.speech import Clips, prompt_ids, text_ids
    from ..stimuli import encode_text

    if loaded.audio:
        feats = torch.zeros(1, int(loaded.model.config.num_mel_bins), 2 * loaded.model.config.max_source_positions)
        return Clips(feats, torch.tensor([prompt_ids(loaded) + text_ids(loaded, PROBE)]))
    return encode_text(loaded.tokenizer, PROBE, None, add_bos=loaded.causal)[0]


def discover(loaded, ids: torch.Tensor) -> Layout:
    """The Layout of ``loaded``, from one forward on ``ids`` [1, T] (a few tokens)."""
    from ..ground.batches import batch_of, no_cache

    z: dict[int, torch.Tensor] = {}  # flat layer -> the heads' outputs [B, H, T, Dv]
    keep = lambda layer, out: _keep(z, layer, out)  # noqa: E731
    watch = Watch(loaded.model)
    try:
        with torch.no_grad(), routed(loaded, impl="eager", after_attend=[keep]):
            loaded.model(**batch_of(loaded, ids), **no_cache(loaded))
    finally:
        watch.close()
    layer_of = {id(m): i for i, m in enumerate(loaded.attention_modules)}
    blocks = [
        _block(loaded, watch, stream, i, b, z, layer_of) for stream, bs in stacks(loaded) for i, b in enumerate(bs)
    ]
    cfg = loaded.model.config
    d = int(
        getattr(cfg, "hidden_size", 0) or getattr(cfg, "d_model", 0) or watch.outputs[id(blocks[0].module)].shape[-1]
    )
    layout = Layout(blocks, {}, loaded.n_heads, loaded.n_kv_heads, d)
    for stream in layout.streams:
        last = watch.outputs[id(layout.stack(stream)[-1].module)]
        f = Finder(watch, loaded.model, exclude=tuple(b.module for b in layout.blocks))
        layout.final_norms[stream] = f.first(lambda m, f=f, last=last: is_norm(m) and _same(f.input(m), last))
    return layout


def _keep(z: dict, layer: int, out: torch.Tensor) -> torch.Tensor:
    z.setdefault(layer, out.detach())
    return out


def _block(loaded, watch: Watch, stream: str, i: int, module, z: dict, layer_of: dict) -> Block:
    where = f"{stream} block {i}"
    attns = [m for m in module.modules() if id(m) in layer_of]
    self_attn = next(m for m in attns if loaded.attention_kinds[layer_of[id(m)]] != "cross")
    cross_attn = next((m for m in attns if loaded.attention_kinds[layer_of[id(m)]] == "cross"), None)
    f = Finder(watch, module)
    x_in, x_out = watch.inputs[id(module)], watch.outputs[id(module)]
    scale = float(getattr(loaded.model.config, "residual_multiplier", None) or 1.0)
    a = _attention(f, self_attn, layer_of[id(self_attn)], z[layer_of[id(self_attn)]], x_in, False, where)
    x_mid = x_in + scale * _written(f, a)
    c = None
    if cross_attn is not None:
        c = _attention(f, cross_attn, layer_of[id(cross_attn)], z[layer_of[id(cross_attn)]], x_mid, True, where)
        x_mid = x_mid + scale * _written(f, c)
    parts = _mlp(f, x_in, x_mid, x_out, scale, a.norm, where)
    return Block(stream, i, module, a, cross=c, scale=scale, **parts)
