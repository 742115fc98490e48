"""ProbSparse attention (Informer, Zhou et al. 2021, arXiv 2012.07436; zhouhaoyi/Informer2020 models/attn.py).

Only the u "active" queries whose score distribution is far from uniform get full attention;
the other ("lazy") queries get what uniform attention would give them.

    U_part = min(c·⌈ln L_K⌉, L_K)   keys sampled per query (with replacement, one draw shared
                                   across batch and heads, as upstream)
    u      = min(c·⌈ln L_Q⌉, L_Q)   active queries
    M(q)   = max_j s_j − Σ_j s_j / divisor   over the sampled keys, on unscaled scores s = q·k
             divisor "keys" = L_K (upstream code, the paper's "filling other pairs with zero"),
             divisor "samples" = U_part (the mean of the sample; Informer2020 #211)

Lazy rows:
    not causal            mean of all values (upstream V.mean)
    causal, lazy="mean"   running mean Σ_{j≤t} v_j / (t+1): uniform attention over visible keys
    causal, lazy="cumsum" running sum Σ_{j≤t} v_j: upstream's code (grows with t; Informer2020 #633)

Upstream never applies dropout in ProbAttention (it stores it unused); neither does this.
"""

from __future__ import annotations

import math

import torch

from .errors import InputError
from .masks import causal as causal_mask
from .stages import aggregate, default_scale, normalize, scale_and_mask, score
from .validate import validate_qkv

LAZY = ("mean", "cumsum")
DIVISORS = ("keys", "samples")


def probsparse_sizes(L_Q: int, L_K: int, factor: float = 5) -> tuple[int, int]:
    """(U_part, u): sampled keys per query and active queries, both clipped."""
    U_part = min(int(factor * math.ceil(math.log(L_K))) if L_K > 1 else 1, L_K)
    u = min(int(factor * math.ceil(math.log(L_Q))) if L_Q > 1 else 1, L_Q)
    return max(U_part, 1), max(u, 1)


def sparsity_measure(q, k, U_part: int, divisor: str, generator=None) -> torch.Tensor:
    """M(q, K) per query from a random key sample: [B, H, L_Q]."""
    B, H, L_Q, D = q.shape
    L_K = k.shape[2]
    idx = torch.randint(L_K, (L_Q, U_part), generator=generator, device=q.device)  # (L_Q, U_part)
    k_sample = k[:, :, idx]  # (B, H, L_Q, U_part, D)
    qk = torch.einsum("bhqd,bhqsd->bhqs", q, k_sample)  # (B, H, L_Q, U_part)
    denom = L_K if divisor == "keys" else U_part
    return qk.max(dim=-1).values - qk.sum(dim=-1) / denom


def lazy_context(v: torch.Tensor, L_Q: int, causal: bool, lazy: str) -> torch.Tensor:
    """What every lazy query receives: [B, H, L_Q, Dv]."""
    if not causal:
        return v.mean(dim=-2, keepdim=True).expand(-1, -1, L_Q, -1).clone()
    run = v.cumsum(dim=-2)  # (B, H, L, Dv)
    if lazy == "cumsum":
        return run
    count = torch.arange(1, v.shape[2] + 1, device=v.device, dtype=v.dtype).view(1, 1, -1, 1)
    return run / count


def probsparse_attend(
    q,
    k,
    v,
    *,
    factor: float = 5,
    causal: bool = False,
    lazy: str = "mean",
    divisor: str = "keys",
    scale: float | None = None,
    generator: torch.Generator | None = None,
    return_index: bool = False,
):
    """ProbSparse self- or cross-attention. q [B,H,Tq,D], k/v [B,Hkv,Tk,D|Dv] -> out [B,H,Tq,Dv]
    (and the active query indices [B, H, u] with return_index)."""
    if lazy not in LAZY:
        raise InputError(f"lazy must be one of {LAZY}, got {lazy!r}")
    if divisor not in DIVISORS:
        raise InputError(f"divisor must be one of {DIVISORS}, got {divisor!r}")
    B, H, Hkv, L_Q, L_K, D, Dv = validate_qkv(q, k, v)
    if causal and L_Q != L_K:
        raise InputError(f"causal ProbSparse needs L_Q == L_K (running means over the keys), got {L_Q} and {L_K}")
    if Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)  # (B, H, L_K, D)
        v = v.repeat_interleave(H // Hkv, dim=1)  # (B, H, L_K, Dv)
    U_part, u = probsparse_sizes(L_Q, L_K, factor)
    top = sparsity_measure(q, k, U_part, divisor, generator).topk(u, dim=-1).indices  # (B, H, u)
    q_active = torch.gather(q, 2, top[..., None].expand(-1, -1, -1, D))  # (B, H, u, D)
    keep = None
    if causal:
        rows = causal_mask().materialize(1, 1, L_Q, L_K, q.device)[0, 0]  # (L_Q, L_K)
        keep = rows[top]  # (B, H, u, L_K)
    s = scale_and_mask(score(q_active, k), default_scale(D) if scale is None else scale, keep)
    weights, _ = normalize(s)
    active_out = aggregate(weights, v)  # (B, H, u, Dv)
    out = lazy_context(v, L_Q, causal, lazy)
    out = out.scatter(2, top[..., None].expand(-1, -1, -1, Dv), active_out)  # (B, H, L_Q, Dv)
    return (out, top) if return_index else out
