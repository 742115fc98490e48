"""fused: torch's fused CPU flash kernel, with each row's log-sum-exp, and statistics without n×n.

The kernel (``_scaled_dot_product_flash_attention_for_cpu``) returns (out, lse). With lse_i in hand
every weight is a dot product away, p_ij = exp(scale·q_i·k_j − lse_i), and every statistic that is
linear in the weights is one more fused pass with other "values":

    Σ_j p_ij k_j         (V = K)      entropy  H_i = lse_i − scale · q_i · Σ_j p_ij k_j
    Σ_j p_ij c_j         (V = c)      mass on a key set (c = indicator), norm-weighted mass (c = ‖f(x_j)‖)

The kernel wants Q, K and V of one head size, so everything goes into the one call that computes the
output: the values are [V | K | c], and q and k are padded with zero channels to that width (zeros
add nothing to q·k). Measured on this CPU, one call of width 2D + 8 costs ~1.4–2× one of width D,
less than two calls (the softmax is computed once). Named weights (diagonals, a band of keys, the
first position) cost O(T · w · D) dot products. Nothing n×n is ever held.

What is not linear in the weights — the row maximum and argmax, soft-capped scores — is refused
here (UnsupportedRequest names ``blocked``). Probes that read this backend implement
``update_fused(block: FusedBlock)`` and set ``reads_fused = True`` (engine/fused_probes.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

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

    def _logits(self, q0: int, q1: int, cols: torch.Tensor) -> torch.Tensor:
        """scale · q_i · k_j for rows q0..q1 and, per row, the key columns ``cols`` [bq, n]: [B, H, bq, n].
        Query head h reads kv head h // G through a view: K is never copied per query head."""
        B, H, Tq, D = self.q.shape
        Hkv = self.k.shape[1]
        q = self.q[:, :, q0:q1].float().reshape(B, Hkv, H // Hkv, q1 - q0, D)  # (B, Hkv, G, bq, D)
        kk = self.k[:, :, cols].float()  # (B, Hkv, bq, n, D)
        return torch.einsum("bkgqd,bkqnd->bkgqn", q, kk).reshape(B, H, q1 - q0, cols.shape[1]) * self.scale

    def named_weights(self, offsets) -> torch.Tensor:
        """p_{i, i − off} for every row and offset (query position minus key position): [B, H, Tq, len(offsets)];
        0 where that key does not exist or the row may not see it."""
        B, H, Tq, D = self.q.shape
        offs = torch.as_tensor(list(offsets), dtype=torch.long)
        out = self.q.new_zeros(B, H, Tq, len(offs), dtype=torch.float32)
        causal = self._plain_causal()
        for q0 in range(0, Tq, ROWS_PER_BLOCK):
            q1 = min(Tq, q0 + ROWS_PER_BLOCK)
            qpos = torch.arange(q0, q1) + (self.Tk - Tq)  # absolute positions (bottom-right)
            cols = qpos[:, None] - offs[None, :]  # (bq, n_off)
            ok = (cols >= 0) & (cols < self.Tk)
            if causal:  # a bottom-right causal row sees exactly the keys at or before it
                ok = ok & (offs[None, :] >= 0)
            else:
                keep = self.req.keep_rows(q0, q1)  # (b?, h?, bq, Tk) or None
                if keep is not None:
                    c = cols.clamp(0, self.Tk - 1)
                    ok = ok & keep.expand(B, H, q1 - q0, self.Tk).gather(-1, c.expand(B, H, -1, -1))
            p = torch.exp(self._logits(q0, q1, cols.clamp(0, self.Tk - 1)) - self.lse[:, :, q0:q1, None].float())
            out[:, :, q0:q1] = torch.where(ok, p, torch.zeros_like(p))
        return out

    def key_weights(self, keys: torch.Tensor) -> torch.Tensor:
        """p_ij for a small set of key positions ``keys`` (1-D long): [B, H, Tq, len(keys)], 0 where not visible."""
        B, H, Tq, D = self.q.shape
        out = self.q.new_zeros(B, H, Tq, len(keys), dtype=torch.float32)
        causal = self._plain_causal()
        for q0 in range(0, Tq, ROWS_PER_BLOCK):
            q1 = min(Tq, q0 + ROWS_PER_BLOCK)
            cols = keys[None, :].expand(q1 - q0, -1)
            p = torch.exp(self._logits(q0, q1, cols) - self.lse[:, :, q0:q1, None].float())
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
    """(out [B, H, Tq, Dv], lse [B, H, Tq]) with q/k padded or v padded to one head size."""
    dq, dv = q.shape[-1], v.shape[-1]
    if dv > dq:
        q, k = F.pad(q, (0, dv - dq)), F.pad(k, (0, dv - dq))  # zero channels: q·k unchanged
    elif dv < dq:
        v = F.pad(v, (0, dq - dv))
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q.contiguous(), k.contiguous(), v.contiguous(), 0.0, is_causal, attn_mask=additive, scale=scale
    )[:2]
    return out[..., :dv], lse


def run(req: Request) -> tuple[torch.Tensor, Trace | None]:
    reason = why_not(req)
    if reason:
        raise UnsupportedRequest(reason)
    B, H, Hkv, Tq, Tk, D, Dv = req.dims
    is_causal, additive, n_vis = _mask_args(req)
    n_vis = n_vis.expand(B, H, Tq)
    empty = (n_vis == 0)[..., None]
    if not req.probes:
        out, lse = _kernel(req.q, req.k, req.v, is_causal, additive, req.scale)
        out = out.masked_fill(empty, 0.0)  # rows that see nothing: zeros (the kernel agrees)
        return out, (Trace("fused", lse=lse, out=out, notes=["flash kernel"]) if req.want_trace else None)
    # One call computes the output and every statistic: the values are [V | K | key channels], all per
    # query head, and q, k are zero-padded to that width (the CPU kernel wants one head size). One
    # call of width ~2D costs less than two of width D (the softmax and its exps are done once).
    need_keys = any(getattr(p, "needs_key_sums", False) for p in req.probes)
    G = H // Hkv
    block = FusedBlock(req.q, req.k, req.scale, None, n_vis, req, layer=req.layer)
    channels = {}  # id of the key-vector tensor a probe handed in -> those vectors, per query head
    for p in req.probes:
        c = p.key_channels(block) if hasattr(p, "key_channels") else None
        if c is not None:
            channels[id(c)] = c.to(req.q.dtype).expand(B, H, Tk, c.shape[-1])  # (B, H, Tk, C)
    k_rep = req.k.repeat_interleave(G, dim=1)  # (B, H, Tk, D): the kernel takes K with the values' heads
    parts = [req.v.repeat_interleave(G, dim=1)] + ([k_rep] if need_keys else []) + list(channels.values())
    used = sum(p.shape[-1] for p in parts)
    width = -(-used // 8) * 8  # a multiple of 8: the kernel is much slower at other widths
    values = F.pad(torch.cat(parts, dim=-1), (0, width - used))  # (B, H, Tk, Dv + D? + ΣC + pad)
    del parts
    # One call for the whole layer. (Calling it per kv-head group was tried: smaller copies, but the
    # peak RSS rose — mid-sized blocks stay in malloc's heap where whole-layer ones are unmapped.)
    sums, lse = _kernel(req.q, k_rep, values, is_causal, additive, req.scale)  # (B, H, Tq, width)
    del values, k_rep
    sums.masked_fill_(empty, 0.0)  # in place: no second copy of the sums
    block.lse = lse.masked_fill_(empty[..., 0], float("-inf"))
    out, at = sums[..., :Dv], Dv
    if need_keys:
        block.key_sums, at = sums[..., at : at + D], at + D
    for key, c in channels.items():
        block.channel_sums[key] = sums[..., at : at + c.shape[-1]]
        at += c.shape[-1]
    for probe in req.probes:
        probe.update_fused(block)
    trace = Trace("fused", lse=block.lse, out=out, notes=["one flash call: [V | K | key channels]"])
    return out.contiguous(), (trace if req.want_trace else None)
