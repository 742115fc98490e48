"""Route attribution: the first-order effect on your metric of removing each single query→key route.

Removing route i→j of one head and renormalizing row i over what stays (what `knockout` does) changes the
row's output exactly to (o_i − A_ij v_j) / (1 − A_ij), a move of A_ij (o_i − v_j) / (1 − A_ij); only what
follows the head's output is linearized (AtP*'s QK fix, Kramár et al. 2024), so the metric moves by

    est_ij = −A_ij · (dP_ij − D_i) / (1 − A_ij),   dP = dO·vᵀ,  D_i = dO_i·o_i

The numerator is minus FlashAttention's dS_ij, the first-order estimate, which falls short by 1/(1 − A_ij)
where the weight is large — exactly the routes that matter (estimates 1.1–2.2× too small were seen). A row
whose whole weight is on j (A_ij ≥ 1 − 1e-6) is divided by 1e-6 at most. It is computed in two passes,
never holding a [T, T] matrix beyond one block of rows:

    1  forward + backward of the model (its fused attention where it has one; blocks checkpointed past
       8,192 tokens): dO, the metric's gradient at every head's output, [B, H, T, Dv] per layer
    2  forward through the blocked engine: each block of query rows gets its weights P [B, H, bq, kspan];
       dP = dO_block · v_blockᵀ, D = Σ_k P ∘ dP, est = −P ∘ (dP − D), and the top K routes by |est|
       are kept while streaming (the rest are dropped with their block)

Beside each kept route: its weight A_ij, its norm-weighted weight A_ij·‖v_j W_O^h‖ (Kobayashi et al.
2020, "Attention is not only a weight"), the estimate, and for the top N the exact effect of knocking
the route out (engine KnockoutEdges: −inf before the softmax, the row renormalized).
"""

from __future__ import annotations

import torch

from ...engine import KnockoutEdges, Probe
from ...models.offload import param
from ..adapter import routed
from ..effects import layer_stack, rows_of
from ..ground.batches import metric_input, no_cache
from ..ground.recompute import checkpointed
from ..hooks import recorded

SATURATED = 1e-6  # 1 − A_ij below this: the row's weight is all on one key
CHECKPOINT_FROM = 8192  # tokens (prompts × length): past this the backward recomputes each block instead of storing it
MAX_TOKENS = 32_768  # tokens (prompts × length) one attribution reads in bounded memory (≈ 6 GiB on SmolLM2)


def complement(P: torch.Tensor, sink_mass: torch.Tensor | None = None) -> torch.Tensor:
    """1 − P_ij for every weight of complete rows [..., Tk], without the cancellation of 1 − P where P is near
    1: a row's largest weight gets the sum of the others (plus the sinks' mass), the rest Σ_k P_ik − P_ij
    (no cancellation below 1/2, and only one weight per row can be above it)."""
    rest = P.sum(-1, keepdim=True) - P
    top = P.argmax(-1, keepdim=True)
    rest.scatter_(-1, top, P.scatter(-1, top, 0.0).sum(-1, keepdim=True))
    return rest if sink_mass is None else rest.add_(sink_mass.unsqueeze(-1))


class RouteProbe(Probe):
    """Streams −dS block by block and keeps the top ``top`` routes by |estimate| (means over the batch)."""

    def __init__(self, grads: dict, grams: dict, top: int, kv_groups: int, exclude=(), causal: bool = True):
        self.grads, self.grams, self.top, self.G = grads, grams, top, kv_groups
        self.v: dict[int, torch.Tensor] = {}  # the current pass's values per layer, set before each call
        self.best = None  # (values [k], keys [k, 4] = layer, head, query, key, weights [k], norm weights [k])
        self.exclude = sorted(set(exclude))  # key positions whose routes are not kept (sinks, for content routes)
        self.causal = causal
        self.taken = torch.zeros(0, dtype=torch.float64)  # per key position: Σ weight it took (layer, head, row)
        self.seen = torch.zeros(0, dtype=torch.float64)  # per key position: how many (layer, head, row) see it

    def capture(self, layer, module, q, k, v) -> None:
        if layer in self.grads:
            self.v[layer] = v.detach()

    def update(self, block) -> None:
        l = block.layer
        if l not in self.grads:
            return
        P = block.weights.float()  # (B, H, bq, kspan)
        B, H, bq, kspan = P.shape
        v = self.v[l][:, :, block.kv0 : block.kv1].float()  # (B, Hkv, kspan, Dv): query heads g·G … read kv head g
        dO = self.grads[l][:, :, block.q0 : block.q1].float()  # (B, H, bq, Dv)
        dP = (dO.reshape(B, H // self.G, self.G * bq, -1) @ v.transpose(-1, -2)).view(B, H, bq, kspan)
        D = (P.unsqueeze(-2) @ dP.unsqueeze(-1)).squeeze(-1)  # (B, H, bq, 1) = Σ_k P_ik dP_ik = dO_i · o_i
        # the row renormalized exactly (AtP*'s QK fix): o_i moves by A_ij (o_i − v_j) / (1 − A_ij)
        R = complement(P, block.sink_mass).clamp_min_(SATURATED)
        minus = dP.sub_(D).mul_(P).div_(R)  # −est per prompt, in place: each pass over a block costs what a matmul does
        minus = minus[0] if B == 1 else minus.mean(0)  # (H, bq, kspan): minus the mean over prompts
        self._count_keys(P, block)
        for j in self.exclude:
            if block.kv0 <= j < block.kv1:
                minus[:, :, j - block.kv0] = 0.0
        flat = self._candidates(minus.abs().flatten())
        if flat is None:
            return
        h, rest = flat // (bq * kspan), flat % (bq * kspan)
        i, j = rest // kspan, rest % kspan
        weight = P[:, h, i, j].mean(0)
        norm_w = self._norm_weight(l, P, v, h, i, j)
        keys = torch.stack([torch.full_like(h, l), h, i + block.q0, j + block.kv0], 1)
        self._merge(-minus[h, i, j], keys, weight, norm_w)

    def _count_keys(self, P: torch.Tensor, block) -> None:
        """Each key's weight (mean over prompts) summed over the heads and rows of this block that can see it."""
        B, H, bq, kspan = P.shape
        if self.taken.numel() < block.kv1:
            grow = block.kv1 - self.taken.numel()
            self.taken = torch.cat([self.taken, torch.zeros(grow, dtype=torch.float64)])
            self.seen = torch.cat([self.seen, torch.zeros(grow, dtype=torch.float64)])
        rows = torch.arange(block.q0, block.q1)[:, None]
        cols = torch.arange(block.kv0, block.kv1)[None, :]
        sees = (cols <= rows) if self.causal else torch.ones(bq, kspan, dtype=torch.bool)
        self.taken[block.kv0 : block.kv1] += P.mean(0).sum((0, 1)).double()
        self.seen[block.kv0 : block.kv1] += H * sees.sum(0).double()

    def key_share(self) -> dict[int, float]:
        """Key position -> the mean weight it takes from the (layer, head, row) that can attend to it."""
        return {j: float(self.taken[j] / self.seen[j]) for j in range(self.taken.numel()) if self.seen[j] > 0}

    def _candidates(self, size: torch.Tensor) -> torch.Tensor | None:
        """Indices of this block's routes that can enter the top: once ``top`` are kept, only those larger
        than the smallest kept (a comparison instead of a top-k over every route of the block)."""
        k = min(self.top, size.numel())
        if self.best is None or self.best[0].numel() < self.top:
            return size.topk(k).indices
        cand = torch.nonzero(size > self.best[0].abs().min()).flatten()
        if cand.numel() == 0:
            return None
        return cand if cand.numel() <= k else cand[size[cand].topk(k).indices]

    def _norm_weight(self, l, P, v, h, i, j):
        """mean over prompts of A_ij · ‖W_O^h v_j‖, with ‖W_O^h x‖² = xᵀ (W_O^hᵀ W_O^h) x."""
        gram = self.grams.get(l)
        if gram is None:
            return torch.full(h.shape, float("nan"))
        vj = v[:, h // self.G, j]  # (B, k, Dv)
        quad = torch.einsum("bkd,kde,bke->bk", vj, gram[h], vj).clamp_min(0).sqrt()
        return (P[:, h, i, j] * quad).mean(0)

    def _merge(self, values, keys, weight, norm_w) -> None:
        if self.best is not None:
            values, keys, weight, norm_w = (
                torch.cat([a, b]) for a, b in zip(self.best, (values, keys, weight, norm_w))
            )
        k = min(self.top, values.numel())
        _, idx = values.abs().topk(k)
        self.best = (values[idx], keys[idx], weight[idx], norm_w[idx])

    def routes(self) -> list[dict]:
        if self.best is None:
            return []
        values, keys, weight, norm_w = self.best
        order = values.abs().argsort(descending=True)
        return [
            {
                "layer": int(keys[o, 0]),
                "head": int(keys[o, 1]),
                "query": int(keys[o, 2]),
                "key": int(keys[o, 3]),
                "estimate": float(values[o]),
                "weight": float(weight[o]),
                "norm_weight": _num(norm_w[o]),
            }
            for o in order.tolist()
        ]


def _num(x) -> float | None:
    x = float(x)
    return x if x == x else None


def grams(loaded, n_heads: int) -> dict:
    """Per layer: W_O^hᵀ W_O^h [H, Dv, Dv] from the output projection (None where it is not a Linear)."""
    out = {}
    for l, proj in enumerate(loaded.out_projections):
        if proj is None:
            continue
        W = param(proj).float()  # (d_model, H·Dv)
        Dv = W.shape[1] // n_heads
        Wh = W.view(W.shape[0], n_heads, Dv).permute(1, 0, 2)  # (H, d_model, Dv)
        out[l] = Wh.transpose(1, 2) @ Wh  # (H, Dv, Dv)
    return out


def output_gradients(loaded, batch: dict, metric, fields: dict, kwargs: dict, layers) -> tuple[dict, torch.Tensor]:
    """Pass 1: ({layer: ∂ΣM/∂out [B, H, T, Dv]}, M per prompt) from one forward and one backward.

    Each tapped output gets a zero *scalar* leaf added (so every layer is on a path to a requested input,
    encoder–decoder streams included) and a hook that keeps its gradient: nothing of size [B, H, T, Dv]
    is held but the gradients themselves (a zero tensor per layer would be another 1.1 GB at 16,384)."""
    leaves: dict[int, torch.Tensor] = {}
    grads: dict[int, torch.Tensor] = {}

    def keep(layer):
        def hook(g):
            grads[layer] = g.detach()

        return hook

    def tap(layer, out):
        if layer not in layers or layer in leaves:  # a checkpointed recomputation calls it again: the first counts
            return out
        leaves[layer] = torch.zeros((), dtype=out.dtype, requires_grad=True)
        y = out + leaves[layer]
        y.register_hook(keep(layer))
        return y

    tokens = rows_of(batch).numel()  # the backward holds activations for every prompt's every token
    with torch.enable_grad(), checkpointed(loaded, tokens > CHECKPOINT_FROM), routed(loaded, after_attend=[tap]):
        outputs = loaded.model(**batch, **{**no_cache(loaded), **kwargs})
        M = metric(metric_input(loaded, outputs, batch), {**batch, **fields})
        torch.autograd.grad(M.sum(), [leaves[l] for l in sorted(leaves)])
    return {l: grads[l] for l in sorted(grads)}, M.detach().float()


@torch.no_grad()
def stream_routes(
    loaded, batch: dict, grads: dict, top: int, kwargs: dict, *, record_blocks: bool, exclude=(), shares=None
) -> tuple:
    """Pass 2: (the top routes, each block's output on this run, base) — for the exact checks, when
    ``record_blocks``: ``base`` = (every layer's keys and values [B, Hkv, T, D], the logits) of a causal LM,
    what the knockouts' KV cache reads (suffix.py), recorded here instead of by another forward; else None.
    ``exclude``: key positions whose routes are not kept (the content routes' pass); ``shares``: a dict that
    receives each key's mean weight (RouteProbe.key_share: what sink detection reads)."""
    G = loaded.n_heads // loaded.n_kv_heads
    probe = RouteProbe(grads, grams(loaded, loaded.n_heads), top, G, exclude, causal=bool(loaded.causal))
    kv: dict[int, tuple] = {}
    keep_kv = record_blocks and loaded.causal
    blocks = (layer_stack(loaded) or []) if record_blocks else []
    seen = [probe.capture] + ([lambda layer, m, q, k, v: kv.setdefault(layer, (k, v))] if keep_kv else [])
    with recorded(blocks) as stored, routed(loaded, probes=[probe], impl="blocked", before_attend=seen):
        out = loaded.model(**batch, **{**no_cache(loaded), **kwargs})
    base = ([kv[l] for l in sorted(kv)], out.logits) if keep_kv and len(kv) == loaded.n_layers else None
    if shares is not None:
        shares.update(probe.key_share())
    return probe.routes(), stored, base


def knockout_one(route: dict, kinds: list[str], batch=None) -> KnockoutEdges:
    """The route cut exactly; a cross-attention route's query is its decoder row (``by_row``), as the probe
    that found it counted it (RouteProbe keys a route by q0 + row). ``batch``: the items it cuts (its copy's)."""
    cross = kinds[route["layer"]] == "cross" if kinds else False
    return KnockoutEdges(
        [route["query"]], [route["key"]], heads=[route["head"]], layer=route["layer"], by_row=cross, batch=batch
    )


__all__ = [
    "CHECKPOINT_FROM",
    "MAX_TOKENS",
    "RouteProbe",
    "complement",
    "grams",
    "knockout_one",
    "output_gradients",
    "stream_routes",
]
