"""AtP*'s QK fix for edges into a self-attention's queries and keys (Kramár et al. 2403.00745).

EAP linearizes the whole path from a receiver's input to the metric — through its norm, its projection
and the attention softmax. Where the softmax saturates, the linear estimate of a key edge can have the
wrong sign: on SmolLM2's repeated random tokens, a previous-token head's edge into an induction head's
keys was estimated at +0.35 where the exact effect is −0.27. Here the receiver's side is computed exactly
and only what follows the head's output is linear:

    x' = x + Δ_S                                      the receiver's input with the sender's change
    q', k' = the layer's own projections of norm(x')   (adapter.replay: rotary, q/k norms, all of it)
    z' = attend with the receiver's q (or k) from x'   (the layer's mask, scale, soft-cap, sinks, bias)
    est(S → R) = Σ_{heads read, positions} ∂M/∂z · (z' − z)

for every sender of every earlier block at once (senders stacked along the batch). Its cost is a replay of
the layer's projections per sender and layer (on SmolLM2's IOI set, 12× the plain estimate over all 30
layers), so it is spent where it matters: each layer's q and k are first recomputed from the whole source
input (one replay per layer), and the QK_LAYERS layers whose queries or keys move the metric most that way
get the fix for every edge into them; the other layers keep the linear estimate (the layers fixed are said
in the result). A block whose prompts × positions² is over QK_BUDGET keeps the plain estimate (each stream
by its own length: Whisper's decoder blocks read a few tokens, its encoder blocks 1,500 frames). Value
edges keep the plain estimate (given the pattern, a head's output is linear in its values: the softmax is
not on their path), as does cross-attention.
"""

from __future__ import annotations

import numpy as np
import torch

from ...engine import attend
from ..adapter import replay, routed
from ..ground.budget import scaled
from .stream import _tile, o_matrix

QK_BUDGET = 1 << 18  # prompts × tokens²: above it the plain (linear) estimate is kept for q and k edges
QK_LAYERS = 6  # layers whose q and k edges get the fix: those whose whole-input q, k change matters most
STACK_BYTES = 256 << 20  # senders stacked per recomputation: what one sender's recomputation holds, within this


def block_length(run, b) -> int:
    """The positions block ``b`` reads (its stream's: an encoder's frames are not its decoder's tokens)."""
    return int(run.base[(b.stream, b.index)]["x_in"].shape[1])


def within(run, b, n: int | None = None) -> bool:
    """Block ``b`` within QK_BUDGET for ``n`` prompts (default: the run's)."""
    return (run.n if n is None else n) * block_length(run, b) ** 2 <= QK_BUDGET


def affordable(run) -> bool:
    return any(within(run, b) for b in run.layout.blocks)


@torch.no_grad()
def chosen_blocks(run, grad, count: int = QK_LAYERS) -> list:
    """The ``count`` self-attention blocks whose queries or keys, recomputed from the whole source input,
    move the metric most (the largest |mean over prompts| of Σ ∂M/∂z · (z' − z) over their heads)."""
    blocks = candidates(run)
    if len(blocks) <= count:
        return blocks
    return choose(blocks, effect_sums(run, grad, blocks), run.n, count)


def candidates(run, n: int | None = None) -> list:
    """The self-attention blocks within QK_BUDGET for ``n`` prompts (default: the run's)."""
    return [b for b in run.layout.blocks if b.attn is not None and within(run, b, n)]


@torch.no_grad()
def effect_sums(run, grad, blocks: list) -> dict:
    """{id(block): {channel: Σ over the run's prompts of each unit's effect [units]}} with the block's q or k
    recomputed from the source run's whole input: summed, so that runs cut from one group add up to it."""
    out = {}
    with routed(run.loaded, impl="eager"):
        for b in blocks:
            out[id(b)] = {ch: e.sum((0, 1)) for ch, e in _effects(run, grad, b, None).items()}
    return out


def choose(blocks: list, sums: dict, n: int, count: int) -> list:
    """The ``count`` blocks whose q or k move the metric most: the largest |mean over the n prompts| of a unit."""
    size = {id(b): max(float((e / n).abs().max()) for e in sums[id(b)].values()) for b in blocks}
    return sorted(blocks, key=lambda b: -size[id(b)])[:count]


@torch.no_grad()
def qk_block(run, grad, b, scores: torch.Tensor) -> None:
    """scores[e] += the QK-fixed estimate of every edge into block ``b``'s self-attention q and k."""
    graph = run.graph
    mine = [
        j
        for j in graph.receivers_of(b.stream, b.index)
        if graph.receivers[j].attention == "self" and graph.receivers[j].channel in ("q", "k")
    ]
    senders = [s for s in range(len(graph.senders)) if (graph.matrix[s, mine] >= 0).any()]
    if not senders:
        return
    step = max(1, scaled(STACK_BYTES) // sender_bytes(run, b))
    with routed(run.loaded, impl="eager"):
        for i in range(0, len(senders), step):
            chunk = senders[i : i + step]
            eff = _effects(run, grad, b, chunk)  # {channel: [c, n, units]}
            _scatter(run, chunk, mine, eff, scores)


def sender_bytes(run, b) -> int:
    """What one stacked sender's recomputation holds (float32): the score matrices of the q and the k
    recomputation [n, H, T, T] each, and its [n, T, ·] tensors — the corrected input and its norm, the new q
    and k, and each channel's new head outputs, their change and its product with the gradient. Counting the
    score matrices alone let IOI's 15-token runs stack all ~300 senders of a layer at once: most of the
    estimate's 7 MB a token."""
    n, T, H = run.n, block_length(run, b), run.layout.heads
    HD = o_matrix(b.attn.o_proj).shape[1]  # heads × head size (Gemma's heads are wider than d / H)
    return (n * H * T * T * 2 + n * T * (2 * run.layout.d_model + 8 * HD)) * 4


def _effects(run, grad, b, chunk: list[int] | None) -> dict[str, torch.Tensor]:
    """Per sender of ``chunk`` and channel: Σ ∂M/∂z · (z' − z) per prompt and unit (query head for q, kv
    head for k), with only that channel recomputed from x + Δ_S; ``chunk`` None: from the source run's whole
    input (one row)."""
    a, layer, n = b.attn, b.attn.layer, run.n
    r = grad.rec[(b.stream, b.index)]
    x = r["x_in"].detach()
    if chunk is None:
        c, X = 1, run.source[(b.stream, b.index)]["x_in"].to(x.dtype)
    else:
        c = len(chunk)
        X = (x[None] + run.deltas(chunk).to(x.dtype)).reshape(c * n, *x.shape[1:])
    args, kwargs = r["call"]
    q2, k2, _ = replay(a.module, _tile(args, n, c), _tile(kwargs, n, c), hidden_states=a.norm.forward(X))
    q, k, v = (grad.values[(layer, ch)] for ch in ("q", "k", "v"))
    z, gz = grad.values[(layer, "out")], grad.grads[(layer, "out")]
    mask, eargs = grad.ctx[layer]
    mask, eargs = _tile(mask, n, c), {key: _tile(val, n, c) for key, val in eargs.items()}
    rep = lambda t: t.repeat(c, *([1] * (t.dim() - 1)))  # noqa: E731
    H, Hkv = q.shape[1], k.shape[1]
    out = {}
    for ch, (qq, kk, vv) in {"q": (q2, rep(k), rep(v)), "k": (rep(q), k2, rep(v))}.items():
        new = attend(qq.to(q.dtype), kk.to(k.dtype), vv.to(v.dtype), mask, impl="eager", **eargs)
        per_head = ((new.view(c, n, *z.shape[1:]) - z) * gz).sum((-1, -2))  # (c, n, H)
        out[ch] = per_head if ch == "q" else per_head.view(c, n, Hkv, H // Hkv).sum(-1)
    return out


def _scatter(run, chunk: list[int], mine: list[int], eff: dict, scores: torch.Tensor) -> None:
    """scores[e] += the chunk's effect for every edge e from a sender of ``chunk`` into a receiver of ``mine``:
    one indexed add per receiver (each edge is one (sender, receiver) pair, so no index repeats), not one per
    pair — 3,600 small adds a block on SmolLM2, 2.7 s of its circuit's QK fix."""
    graph = run.graph
    edges = graph.matrix[np.asarray(chunk)[:, None], np.asarray(mine)[None, :]]  # [c, receivers]: edge or −1
    for col, j in enumerate(mine):
        rc = graph.receivers[j]
        rows = np.flatnonzero(edges[:, col] >= 0)
        if len(rows):
            taken = torch.as_tensor(rows)
            scores[torch.as_tensor(edges[rows, col])] += eff[rc.channel][taken, :, rc.head].double()


__all__ = [
    "QK_BUDGET",
    "QK_LAYERS",
    "affordable",
    "candidates",
    "choose",
    "chosen_blocks",
    "effect_sums",
    "qk_block",
    "sender_bytes",
]
