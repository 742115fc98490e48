"""A head's query and key split into the residual stream's components, exactly (the run's norm scales frozen).

The score of route i → j in head h is bilinear in what its query reads at i and its key reads at j:

    x_i = Σ_c w_c(i)                               the stream at the read point: each sender's write (stream.py)
    q_i = f_q(N(x_i) + β)                           f_q: projection, frozen QK-norm, rotary at i — affine
    q_i = Σ_c [f_q(N(w_c(i))) − f_q(0)] + f_q(β)    N: the layer norm's linear map at the run's own σ (norms.py)
    s_ij = scale · q_i · k_j = Σ_{a,b} scale · q_a(i) · k_b(j)

so with the norms' σ taken from the run — as direct logit attribution freezes the final norm — every
(query-side component, key-side component) pair has a term and the terms add up to the score. The affine
maps f are the attention module's own forward (adapter.replay), stopped at its attention call, with each
QK-norm inside it replaced by its frozen linear map; one replay takes every component at once (stacked
along the batch) and only the positions asked for (rotary tables and position ids sliced to them). Both
the split stream and the split q and k are checked against the run's own values; where slicing the
positions does not reproduce them, the replay runs on the whole sequence instead.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from ...engine.tolerance import split_gap
from ..adapter import replay
from ..ground.norms import frozen_norm
from ..hooks import Hooks, forwards_replaced
from .layout import CircuitUnsupported, is_norm
from .stream import _tile, part_of, read_value, sender_writes


class Side:
    """One side of a head (its queries or its keys): the components' contributions at some positions.

    ``parts`` [C + 1, P, D]: each sender's contribution, then the biases' (the norm's β, projection biases);
    ``senders``: the graph's sender indices of the first C rows; ``positions``: the P positions."""

    def __init__(self, parts, senders: list[int], positions: list[int], sliced: bool, components=None):
        self.parts, self.senders, self.positions, self.sliced = parts, senders, positions, sliced
        self.components = components  # dicts (kind, layer, head, stream[, attention]) where there is no graph


def split_side(run, receiver: int, positions: list[int], actual: torch.Tensor) -> Side:
    """The receiver's channel (q of a query head, k of a kv head) at ``positions`` split into components;
    ``actual`` [T, D]: the run's own values (the check)."""
    graph, layout, rec = run.graph, run.layout, run.rec
    rc = graph.receivers[receiver]
    senders = [int(s) for s in np.nonzero(graph.matrix[:, receiver] >= 0)[0]]
    x = read_value(layout, rec, rc)  # [1, T, d]
    writes, const = _writes(run, senders, positions)  # [C, P, d], [d]
    _check(writes.sum(0) + const, x[0, positions], f"the stream read by {rc.label()} is not the sum of its writes")
    actual = actual[positions]
    for sliced in (True, False):
        parts = _through_attention(run, rc, x, writes, const, positions, sliced)
        if _close(parts.sum(0), actual):
            return Side(parts, senders, positions, sliced)
    _check(parts.sum(0), actual, f"{rc.label()} split into components does not add up to the run's own")
    raise AssertionError("unreachable")


def _writes(run, senders: list[int], positions: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sender's write at ``positions`` [C, P, d] (computed a part at a time, sliced at once), and what
    the stream holds at every position beside them [d]: the attention output projections' biases (a head's
    write is its slice of the projection; the bias belongs to no head)."""
    graph, layout, rec = run.graph, run.layout, run.rec
    out = {}
    const = torch.zeros(rec[(graph.senders[senders[0]].stream, 0)]["x_in"].shape[-1], dtype=torch.float64)
    for part in dict.fromkeys(part_of(graph.senders[s]) for s in senders):
        for s, w in sender_writes(layout, graph, rec, *part).items():
            out[s] = w[0, positions]
        if part[2] in ("self", "cross"):
            const += _output_bias(layout.stack(part[0])[part[1]], part[2] == "cross")
    writes = torch.stack([out[s] for s in senders])
    return writes, const.to(writes.dtype)


def _output_bias(block, cross: bool) -> torch.Tensor:
    a = block.cross if cross else block.attn
    b = getattr(a.o_proj, "bias", None)
    if b is None:
        return torch.zeros(())
    if a.post is not None:
        raise CircuitUnsupported("an output projection's bias before a post-norm: its share is not split here")
    return b.detach().double() * block.scale


def _through_attention(run, rc, x, writes, const, positions: list[int], sliced: bool) -> torch.Tensor:
    """[C + 1, P, D]: f(N(w_c)) − f(0) per component, then f(N(const) + β) (the biases), for the receiver's
    head and channel."""
    b = run.layout.stack(rc.stream if rc.attention != "cross" else "decoder")[rc.layer]
    a = b.cross if rc.attention == "cross" else b.attn
    kv_cross = rc.attention == "cross" and rc.channel != "q"
    norm = run.layout.final_norms.get("encoder") if kv_cross else a.norm
    N, beta = _frozen(norm, x, positions)
    C, P = writes.shape[0], len(positions)
    biases = N(const.expand(1, P, -1)) + beta
    rows = torch.cat([N(writes), biases, torch.zeros(1, P, writes.shape[-1])])  # [C + 2, P, d]
    if not sliced:
        rows = _placed(rows, positions, x.shape[1])
    args, kwargs = run.rec[(b.stream, b.index)]["ccall" if rc.attention == "cross" else "call"]
    if sliced:
        args, kwargs = _sliced((args, kwargs), positions, x.shape[1])
    key = "key_value_states" if kv_cross else "hidden_states"
    with _frozen_qk_norms(a.module, run.qk_norms.get(a.layer, {}), positions if sliced else None, x.shape[1]):
        q, k, _ = replay(a.module, _tile(args, 1, C + 2), _tile(kwargs, 1, C + 2), **{key: rows.to(x.dtype)})
    t = (q if rc.channel == "q" else k)[:, rc.head].double()  # [C + 2, P or T, D]
    if not sliced:
        t = t[:, positions]
    return torch.cat([t[:C] - t[-1:], t[C : C + 1]])


def _frozen(norm, x: torch.Tensor, positions: list[int]):
    """(N, β) of the norm at this run's σ at ``positions`` (N takes [C, P, d]); the identity where the read
    point has no norm."""
    if norm is None:
        return (lambda c: c), torch.zeros(x.shape[-1])
    xp = x[:, positions]
    frozen = frozen_norm(norm, xp, norm(x)[:, positions])
    if frozen is None:
        raise CircuitUnsupported(f"{type(norm).__name__} before the attention is not a LayerNorm or RMSNorm")
    return frozen[0], frozen[1].float()


def _placed(rows: torch.Tensor, positions: list[int], T: int) -> torch.Tensor:
    """[R, P, d] rows put at their positions of a [R, T, d] sequence of zeros."""
    out = rows.new_zeros(rows.shape[0], T, rows.shape[-1])
    out[:, positions] = rows
    return out


def _sliced(obj, positions: list[int], T: int):
    """A call's arguments cut to ``positions``: per-position tensors (rotary tables [1, T, D], position ids
    [1, T], cache positions [T]) sliced; anything else (the mask, which a replay never reaches) kept."""
    if isinstance(obj, torch.Tensor):
        if obj.dim() >= 2 and obj.shape[0] == 1 and obj.shape[1] == T:
            return obj[:, positions]
        return obj[positions] if obj.dim() == 1 and obj.shape[0] == T else obj
    if isinstance(obj, tuple | list):
        return type(obj)(_sliced(o, positions, T) for o in obj)
    if isinstance(obj, dict):
        return {k: _sliced(v, positions, T) for k, v in obj.items()}
    return obj


@contextlib.contextmanager
def record_qk_norms(attention_modules):
    """Within the block, each QK-norm's input and output on the run: {layer: {norm module: (x, y)}}."""
    seen: dict[int, dict] = {}
    with Hooks() as hooks:
        for layer, module in enumerate(attention_modules):
            for sub in module.modules():
                if sub is not module and is_norm(sub):
                    hooks.after(
                        sub, lambda m, a, out, layer=layer: seen.setdefault(layer, {}).__setitem__(m, (a[0], out))
                    )
        yield seen


@contextlib.contextmanager
def _frozen_qk_norms(module, recorded: dict, positions: list[int] | None, T: int):
    """Inside ``module``, each QK-norm replaced by its linear map at the run's σ, sliced to ``positions`` of the
    ``T`` along the norm's sequence axis (_seq_axis: Qwen3 norms [B, T, H, D] before the transpose, Gemma 3
    [B, H, T, D] after it; the split is checked)."""
    frozen_forwards = {}
    for norm, (x, y) in recorded.items():
        if positions is not None:
            axis, at = _seq_axis(x, T, type(norm).__name__), torch.tensor(positions)
            x, y = x.index_select(axis, at), y.index_select(axis, at)
        frozen = frozen_norm(norm, x, y)
        if frozen is None:
            raise CircuitUnsupported(f"{type(norm).__name__} on the queries or keys is not a LayerNorm or RMSNorm")
        N, beta = frozen
        frozen_forwards[norm] = lambda c, N=N, beta=beta: (N(c.float()) + beta).to(c.dtype)
    with forwards_replaced(frozen_forwards):
        yield


def _seq_axis(x: torch.Tensor, T: int, name: str) -> int:
    """The axis of a QK-norm's recorded input [B, ·, ·, D] that runs over the T positions: the one of size T
    (a model norms q and k per head either before or after moving the heads forward). Both of size T — as
    many heads as tokens — leaves it unknown: refused, not guessed."""
    axes = [a for a in (1, 2) if x.shape[a] == T] if x.dim() == 4 else [1]
    if len(axes) != 1:
        raise CircuitUnsupported(
            f"{name} on the queries or keys reads {tuple(x.shape)}: which axis is the {T} positions is ambiguous "
            "(as many heads as tokens); add or remove a token"
        )
    return axes[0]


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    return split_gap(got, want)[1]  # the split stream, q and k against the run's own


def _check(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    if not _close(got.double(), want):
        gap = float((got.double() - want.double()).abs().max())
        raise CircuitUnsupported(f"{what} (max difference {gap:.3g}): this model cannot be split here")


__all__ = ["Side", "record_qk_norms", "split_side"]
