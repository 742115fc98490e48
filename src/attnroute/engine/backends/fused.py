"""fused: torch's fused CPU flash kernel, with each row's log-sum-exp, and statistics without n×n.

The kernel (``_scaled_dot_product_flash_attention_for_cpu``) returns (out, lse). With lse_i in hand
every weight is a dot product away, p_ij = exp(scale·q_i·k_j − lse_i), and every statistic that is
linear in the weights is the same weighted sum with other "values":

    Σ_j p_ij k_j         (V = K)      entropy  H_i = lse_i − scale · q_i · Σ_j p_ij k_j
    Σ_j p_ij c_j         (V = c)      mass on a key set (c = indicator), norm-weighted mass (c = ‖f(x_j)‖)

The kernel wants Q, K and V of one head size, so everything goes into the one call that computes the
output: the values are [V | K | c] per kv head (grouped query heads read their kv head, as in the
model; a channel that differs per query head takes G columns, one per head of the group), and q and
k are padded with zero channels to that width (zeros add nothing to q·k). Measured on this CPU at
4,096 tokens, one call of width 2D + 8 costs 1.8–1.9× one of width D; two calls of width D cost 2×
(the softmax is computed twice). Named weights (diagonals, a band of keys, the first position) cost
O(T · w · D) dot products. Nothing n×n is ever held.

Where the time goes, and the floor of this design: the K channels double the width of both matmuls
in the kernel (q·k over the zero padding too — the CPU kernel has no Dv ≠ D form), so the statistics
cost about 0.8 × the model's own attention on top of the forward. FlexAttention with Dv ≠ D was
tried: on CPU it cannot return the lse and was slower at width 136 (253 ms against 191 ms).

What is not linear in the weights — the row maximum and argmax, soft-capped scores — is refused
here (UnsupportedRequest names ``blocked``). Probes that read this backend implement
``update_fused(block: FusedBlock)`` and set ``reads_fused = True`` (engine/fused_probes.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..errors import InputError
from ..masks import causal_alignment, is_torch_causal
from ..trace import Trace
from .common import Request, UnsupportedRequest

ROWS_PER_BLOCK = 1024  # query rows whose named weights (and keep-mask, if any) are built at once


@dataclass
class FusedBlock:
    """What one fused call knows, for probes: every row of the call at once (no weights)."""

    q: torch.Tensor  # (B, H, Tq, D)
    k: torch.Tensor  # (B, Hkv, Tk, D)
    scale: float
    lse: torch.Tensor | None  # (B, H, Tq); -inf for rows that see nothing
    n_visible: torch.Tensor  # (B, H, Tq) keys each row may see
    req: Request
    layer: int | None = None
    key_sums: torch.Tensor | None = None  # (B, H, Tq, D): Σ_j p_ij k_j
    channel_sums: dict = field(default_factory=dict)  # id(key vectors) -> (B, H, Tq, C): Σ_j p_ij c_j

    @property
    def Tq(self) -> int:
        return self.q.shape[2]

    @property
    def Tk(self) -> int:
        return self.k.shape[2]

    def _plain_causal(self) -> bool:
        return causal_alignment(self.req.mask) == "bottom_right"

    def named_weights(self, offsets) -> torch.Tensor:
        """p_{i, i − off} for every row and offset (query position minus key position): [B, H, Tq, len(offsets)];
        0 where that key does not exist or the row may not see it.

        Nearby offsets share one window of keys, positions pos_i − max(off) .. pos_i − min(off): the keys
        are padded at both ends and unfolded into that window (a view), and one batched matmul per block
        of rows gives every offset's logit — no gather, no n×n. Offsets far apart (1 and S, say) get a
        window each rather than one that spans the gap. Query head h reads kv head h // G."""
        B, H, Tq, D = self.q.shape
        offs = [int(o) for o in offsets]
        out = self.q.new_zeros(B, H, Tq, len(offs), dtype=torch.float32)
        causal = self._plain_causal()
        use = sorted({o for o in offs if not (causal and o < 0)})  # causal rows see no key after them
        if not use or Tq == 0:
            return out
        runs, run = [], [use[0]]
        for o in use[1:]:  # split where the gap is wider than the offsets it would save computing
            if o - run[-1] > 2:
                runs.append(run)
                run = []
            run.append(o)
        runs.append(run)
        for run in runs:
            cols = [n for n, o in enumerate(offs) if run[0] <= o <= run[-1]]
            self._window_weights(out, cols, [offs[n] for n in cols], causal)
        return out

    def _window_weights(self, out: torch.Tensor, cols: list, run: list, causal: bool) -> None:
        """Fill out[..., cols] with the weights at offsets ``run`` (one window of keys)."""
        B, H, Tq, D = self.q.shape
        Hkv, Tk, shift = self.k.shape[1], self.Tk, self.Tk - Tq
        lo, hi = min(run), max(run)
        # keys padded so that every row's window lies inside: key j sits at j + front
        front = max(0, hi - shift)  # row 0's window starts at key shift − hi
        kp = F.pad(self.k.float(), (0, 0, front, max(0, -lo)))
        windows = kp.unfold(2, hi - lo + 1, 1)  # (B, Hkv, ·, D, span): window s holds keys s − front ...
        pick = torch.tensor([hi - o for o in run])
        for q0 in range(0, Tq, ROWS_PER_BLOCK):
            q1 = min(Tq, q0 + ROWS_PER_BLOCK)
            qpos = torch.arange(q0, q1) + shift  # absolute positions (bottom-right)
            q = self.q[:, :, q0:q1].float().view(B, Hkv, H // Hkv, q1 - q0, D).transpose(2, 3)  # (B, Hkv, bq, G, D)
            start = q0 + shift - hi + front  # row q0's window: keys pos − hi .. pos − lo
            w = windows[:, :, start : start + q1 - q0]  # (B, Hkv, bq, D, span)
            logits = (q @ w).transpose(2, 3).reshape(B, H, q1 - q0, -1)[..., pick] * self.scale  # (B, H, bq, n)
            keys = qpos[:, None] - torch.tensor(run)[None, :]  # (bq, n) key positions
            ok = (keys >= 0) & (keys < Tk)
            if not causal and (keep := self.req.keep_rows(q0, q1)) is not None:
                idx = keys.clamp(0, Tk - 1).expand(B, H, -1, -1)
                ok = ok & keep.expand(B, H, q1 - q0, Tk).gather(-1, idx)
            p = torch.exp(logits - self.lse[:, :, q0:q1, None].float())
            out[:, :, q0:q1, cols] = torch.where(ok, p, 0.0)

    def key_weights(self, keys: torch.Tensor) -> torch.Tensor:
        """p_ij for a small set of key positions ``keys`` (1-D long): [B, H, Tq, len(keys)], 0 where not visible."""
        B, H, Tq, D = self.q.shape
        Hkv = self.k.shape[1]
        kk = self.k[:, :, keys].float()[:, :, None]  # (B, Hkv, 1, n, D): the keys, once
        out = self.q.new_zeros(B, H, Tq, len(keys), dtype=torch.float32)
        causal = self._plain_causal()
        for q0 in range(0, Tq, ROWS_PER_BLOCK):
            q1 = min(Tq, q0 + ROWS_PER_BLOCK)
            q = self.q[:, :, q0:q1].float().view(B, Hkv, H // Hkv, q1 - q0, D)
            logits = (q @ kk.transpose(-1, -2)).view(B, H, q1 - q0, len(keys)) * self.scale
            p = torch.exp(logits - self.lse[:, :, q0:q1, None].float())
            if causal:
                qpos = torch.arange(q0, q1) + (self.Tk - Tq)
                seen = keys[None, :] <= qpos[:, None]  # (bq, n)
            else:
                keep = self.req.keep_rows(q0, q1)
                seen = (
                    torch.ones(1, dtype=torch.bool) if keep is None else keep.expand(B, H, q1 - q0, self.Tk)[..., keys]
                )
            out[:, :, q0:q1] = torch.where(seen, p, 0.0)
        return out


def why_not(req: Request) -> str | None:
    if req.softcap:
        return "the fused kernel has no soft-cap; use impl='blocked'"
    if req.bias is not None:
        return "the fused statistics assume scores = scale·q·k; a score bias needs impl='blocked' (or 'sdpa')"
    if req.sinks is not None:
        return "the fused kernel has no sink logits in the softmax denominator; use impl='blocked'"
    if req.interventions:
        return "the fused kernel cannot edit weights or head outputs; use impl='eager' or 'blocked'"
    plain = [p for p in req.probes if not getattr(p, "reads_fused", False)]
    if plain:
        names = ", ".join(sorted({type(p).__name__ for p in plain}))
        return f"{names} read the weights block by block, which the fused kernel never holds; use impl='blocked'"
    if not req.scale > 0:
        return f"the fused kernel needs a positive scale, got {req.scale:g}; use impl='eager'"
    return None


def _mask_args(req: Request):
    """(is_causal, additive float mask or None, n_visible [B?, H?, Tq]) for the kernel."""
    B, H, Hkv, Tq, Tk, D, Dv = req.dims
    m = req.mask
    if m is None:
        return False, None, torch.full((1, 1, Tq), Tk)
    if is_torch_causal(m, Tq, Tk):  # row i sees keys 0..i (top-left), all of them once i >= Tk
        return True, None, (torch.arange(Tq) + 1).clamp(max=Tk).view(1, 1, Tq)
    keep = req.keep_rows(0, Tq)  # (b?, h?, Tq, Tk): one bool per pair (T² bits; the kernel needs it whole)
    additive = torch.zeros(keep.shape, dtype=req.q.dtype).masked_fill(~keep, float("-inf"))
    return False, additive, keep.sum(-1)


def _kernel(q, k, v, is_causal, additive, scale):
    """(out [B, H, Tq, Dv], lse [B, H, Tq]) with q/k padded or v padded to one head size. K and V may
    have fewer heads than Q (grouped heads): the kernel maps query head h to kv head h // G itself."""
    dq, dv = q.shape[-1], v.shape[-1]
    if dv > dq:
        q, k = F.pad(q, (0, dv - dq)), F.pad(k, (0, dv - dq))  # zero channels: q·k unchanged
    elif dv < dq:
        v = F.pad(v, (0, dq - dv))
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q.contiguous(), k.contiguous(), v.contiguous(), 0.0, is_causal, attn_mask=additive, scale=scale
    )[:2]
    return out[..., :dv], lse


def _pack_values(req: Request, need_keys: bool, channels: list[torch.Tensor]):
    """The values of the one call, per kv head: [V | K? | channels], zero-padded to a multiple of 8
    (the kernel is much slower at other widths). A channel tensor [B|1, 1, Tk, C] is the same for every
    head: C columns. One that differs per query head [B|1, H, Tk, C] puts its G heads side by side in
    their kv head's columns (G·C): K and V are never copied per query head.
    Returns (values [B, Hkv, Tk, width], where: column offset of each part)."""
    B, H, Hkv, Tq, Tk, D, Dv = req.dims
    G = H // Hkv
    cols = [c.shape[-1] * (1 if c.shape[1] == 1 else G) for c in channels]
    used = Dv + (D if need_keys else 0) + sum(cols)
    width = max(D, -(-used // 8) * 8) if used > Dv else max(D, Dv)
    values = req.v.new_empty(B, Hkv, Tk, width)
    values[..., :Dv] = req.v
    at = Dv
    if need_keys:
        values[..., at : at + D] = req.k
        at += D
    where = []
    for c, n in zip(channels, cols, strict=True):
        c = c.to(values.dtype)
        if c.shape[1] == 1:
            values[..., at : at + n] = c
        else:  # (b, H, Tk, C) -> (b, Hkv, Tk, G·C): head g of a group at columns g·C .. (g + 1)·C
            b, C = c.shape[0], c.shape[-1]
            values[..., at : at + n] = c.view(b, Hkv, G, Tk, C).permute(0, 1, 3, 2, 4).reshape(b, Hkv, Tk, n)
        where.append(at)
        at += n
    values[..., at:] = 0
    return values, where


def _channel_sums(sums: torch.Tensor, at: int, c: torch.Tensor, G: int) -> torch.Tensor:
    """Σ_j p_ij c_j for each query head from the call's sums [B, H, Tq, width]: [B, H, Tq, C] (a copy)."""
    C = c.shape[-1]
    if c.shape[1] == 1:
        return sums[..., at : at + C].float().clone()
    B, H, Tq, _ = sums.shape
    grouped = sums.view(B, H // G, G, Tq, -1)
    own = [grouped[:, :, g, :, at + g * C : at + (g + 1) * C] for g in range(G)]  # head g's own columns
    return torch.stack(own, dim=2).float().reshape(B, H, Tq, C)


def run(req: Request) -> tuple[torch.Tensor, Trace | None]:
    """(out [B, H, Tq, Dv], trace). With probes, ``out`` is a view into the call's [V | K | channels]
    sums, not a copy: the adapter's transpose copies it anyway, and a copy here would be a second one."""
    reason = why_not(req)
    if reason:
        raise UnsupportedRequest(reason)
    B, H, Hkv, Tq, Tk, D, Dv = req.dims
    is_causal, additive, n_vis = _mask_args(req)
    n_vis = n_vis.expand(B, H, Tq)
    empty = (n_vis == 0)[..., None]
    any_empty = bool(empty.any())
    if not req.probes:
        out, lse = _kernel(req.q, req.k, req.v, is_causal, additive, req.scale)
        if any_empty:
            out = out.masked_fill(empty, 0.0)  # rows that see nothing: zeros (the kernel agrees)
        return out, (Trace("fused", lse=lse, out=out, notes=["flash kernel"]) if req.want_trace else None)
    # One call computes the output and every statistic: the values are [V | K | key channels] per kv
    # head, and q, k are zero-padded to that width (the CPU kernel wants one head size). One call of
    # width ~2D costs less than two of width D (the softmax and its exps are done once).
    need_keys = any(getattr(p, "needs_key_sums", False) for p in req.probes)
    G = H // Hkv
    block = FusedBlock(req.q, req.k, req.scale, None, n_vis, req, layer=req.layer)
    wanted = {}  # id of the key-vector tensor a probe handed in -> that tensor
    for p in req.probes:
        c = p.key_channels(block) if hasattr(p, "key_channels") else None
        if c is not None:
            if c.dim() != 4 or c.shape[1] not in (1, H) or c.shape[2] != Tk or c.shape[0] not in (1, B):
                raise InputError(
                    f"key vectors must be [B|1, H|1, Tk, C] = [{B}|1, {H}|1, {Tk}, C], got {list(c.shape)}"
                )
            wanted[id(c)] = c
    if need_keys or wanted:
        values, where = _pack_values(req, need_keys, list(wanted.values()))
    else:  # named weights only: the model's own values, no copy
        values, where = req.v, []
    sums, lse = _kernel(req.q, req.k, values, is_causal, additive, req.scale)  # (B, H, Tq, width)
    del values
    if any_empty:
        sums.masked_fill_(empty, 0.0)  # in place: no second copy of the sums
        lse.masked_fill_(empty[..., 0], float("-inf"))
    block.lse = lse
    out = sums[..., :Dv]
    if need_keys:
        block.key_sums = sums[..., Dv : Dv + D]
    for (key, c), at in zip(wanted.items(), where, strict=True):
        block.channel_sums[key] = _channel_sums(sums, at, c, G)
    for probe in req.probes:
        probe.update_fused(block)
    trace = Trace("fused", lse=block.lse, out=out, notes=["one flash call: [V | K | key channels]"])
    return out, (trace if req.want_trace else None)
