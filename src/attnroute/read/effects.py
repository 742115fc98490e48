"""Weight versus effect: what happens downstream when a head is ablated, measured and estimated.

Ablation happens at the head's slice of the output-projection input (the head's own output,
before W_O mixes heads), never after the projection; in grouped-query models a head is a query
head, not its kv group.

    zero     the head's output is 0 (Michel et al. 2019's head mask)
    mean     the head's output is its mean over the effect batch (positions and examples)
    uniform  the head's weights are uniform over the keys it may see

Effect: next-token loss for causal LMs; for encoders, 1 − cosine between the clean and the
ablated mean-pooled sentence embedding. Δ = ablated − clean (higher = the head mattered).

The exact sweep ("exact_sweep") reuses the clean residual stream up to the ablated layer (for
Llama-style decoders) and batches several ablations per forward by repeating the batch, one
copy per ablated head. The estimate ("gradient_estimate") gates each head's output with g = 1
and takes one forward and one backward: −∂L/∂g is the first-order change of the loss when g
goes to 0 (attribution patching; Michel et al.'s importance is |∂L/∂g|).
"""

from __future__ import annotations

import numpy as np
import torch

from ..engine import Intervention
from ..engine.interventions import uniform_over_visible
from .adapter import routed

MODES = ("zero", "mean", "uniform")


class BatchedAblation(Intervention):
    """Copy c of a repeated batch (rows c·B … (c+1)·B − 1) ablates head heads[c] of ``layer``."""

    def __init__(self, layer: int, heads: list[int], batch: int, mode: str, mean_out: torch.Tensor | None = None):
        super().__init__([], layer)
        self.copy_heads, self.batch, self.mode, self.mean_out = list(heads), batch, mode, mean_out

    def _mask(self, H: int, device) -> torch.Tensor:
        m = torch.zeros(len(self.copy_heads) * self.batch, H, dtype=torch.bool, device=device)
        for c, h in enumerate(self.copy_heads):
            m[c * self.batch : (c + 1) * self.batch, h] = True
        return m[:, :, None, None]  # (kB, H, 1, 1)

    def edit_out(self, out, q0, q1):
        if self.mode == "zero":
            return torch.where(self._mask(out.shape[1], out.device), torch.zeros_like(out), out)
        if self.mode == "mean":
            mean = self.mean_out.to(out.dtype)[None, :, None, :]  # (1, H, 1, Dv)
            return torch.where(self._mask(out.shape[1], out.device), mean.expand_as(out), out)
        return out

    def edit_weights(self, weights, block):
        if self.mode != "uniform":
            return weights
        H = weights.shape[1]
        return torch.where(self._mask(H, weights.device), uniform_over_visible(weights, block), weights)


class HeadGate(Intervention):
    """out_h ← g[layer, h] · out_h, with g a leaf tensor [L, H] of ones that requires grad."""

    def __init__(self, gates, layer):
        super().__init__([], layer)
        self.gates = gates

    def edit_out(self, out, q0, q1):
        return out * self.gates[self.layer].view(1, -1, 1, 1).to(out.dtype)


class OutputMean(Intervention):
    """Records the mean output of every head of one layer (for mean ablation); changes nothing."""

    def __init__(self, layer: int):
        super().__init__([], layer)
        self.sum, self.count = 0, 0

    def edit_out(self, out, q0, q1):
        self.sum = self.sum + out.detach().float().sum(dim=(0, 2))  # (H, Dv)
        self.count += out.shape[0] * out.shape[2]
        return out

    @property
    def mean(self) -> torch.Tensor:
        return self.sum / max(1, self.count)


# ------------------------------------------------------------------------------------ effect metric


def effect_loss(loaded, batch: dict, outputs, clean_embedding=None) -> torch.Tensor:
    """Per example: next-token cross-entropy (causal) or 1 − cos(clean, ablated) pooled embedding."""
    if loaded.causal:
        logits = outputs.logits[:, :-1].float()  # (B, T−1, V)
        target = batch["input_ids"][:, 1:]
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")  # (B, T−1)
        m = batch["attention_mask"][:, 1:].float()
        return (ce * m).sum(1) / m.sum(1)
    emb = pooled(outputs.last_hidden_state, batch["attention_mask"])
    if clean_embedding is None:
        return torch.zeros(emb.shape[0])
    return 1 - torch.nn.functional.cosine_similarity(emb, clean_embedding.expand_as(emb), dim=-1)


def pooled(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean pooling over real tokens, what sentence-transformers does for all-MiniLM-L6-v2."""
    m = attention_mask[..., None].to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp_min(1)


def _repeat(batch: dict, k: int) -> dict:
    return {key: val.repeat(k, *([1] * (val.dim() - 1))) for key, val in batch.items()}


# ------------------------------------------------------------------------------------ clean pass


@torch.no_grad()
def clean_pass(loaded, batch: dict):
    """Clean loss per example, per-head mean outputs, and each decoder layer's input hidden states."""
    recs = [OutputMean(layer) for layer in range(loaded.n_layers)]
    inputs: dict[int, torch.Tensor] = {}
    hooks = []
    layers = decoder_layers(loaded)
    for i, layer in enumerate(layers or []):
        hooks.append(
            layer.register_forward_pre_hook(
                lambda mod, args, kwargs, i=i: inputs.__setitem__(i, (args[0] if args else kwargs["hidden_states"])),
                with_kwargs=True,
            )
        )
    try:
        with routed(loaded, interventions=recs, impl="eager"):
            out = loaded.model(**batch)
    finally:
        for h in hooks:
            h.remove()
    clean_emb = None if loaded.causal else pooled(out.last_hidden_state, batch["attention_mask"])
    base = effect_loss(loaded, batch, out, clean_emb)
    return base, {r.layer: r.mean for r in recs}, inputs, clean_emb


def decoder_layers(loaded):
    """Llama-style decoders expose model.model.layers, rotary_emb, norm and lm_head: the exact
    sweep can restart from any layer. Other architectures return None (full forwards)."""
    inner = getattr(loaded.model, "model", None)
    needed = ("layers", "rotary_emb", "norm")
    if (
        loaded.causal
        and inner is not None
        and all(hasattr(inner, a) for a in needed)
        and hasattr(loaded.model, "lm_head")
    ):
        return list(inner.layers)
    return None


@torch.no_grad()
def _forward_from(loaded, layer: int, hidden: torch.Tensor, batch: dict, interventions, chunk: int) -> torch.Tensor:
    """Run decoder layers layer… from a stored residual stream; return the next-token loss per example.

    The LM head and the loss run ``chunk`` examples at a time: the logits of a whole repeated batch
    (copies × B × T × vocab: 1.1 GB for SmolLM2's 72 × 81 × 49,152) would cost more in memory
    traffic than the layers themselves."""
    inner = loaded.model.model
    T = hidden.shape[1]
    position_ids = torch.arange(T)[None]
    pos = inner.rotary_emb(hidden, position_ids=position_ids)
    with routed(loaded, interventions=interventions, impl="eager"):
        for block in inner.layers[layer:]:
            hidden = block(hidden, attention_mask=None, position_ids=position_ids, position_embeddings=pos)
    hidden = inner.norm(hidden)
    losses = []
    for i in range(0, hidden.shape[0], chunk):
        part = {k: v[i : i + chunk] for k, v in batch.items()}
        losses.append(effect_loss(loaded, part, _Logits(loaded.model.lm_head(hidden[i : i + chunk]))))
    return torch.cat(losses)


class _Logits:
    def __init__(self, logits):
        self.logits = logits


# ------------------------------------------------------------------------------------ the sweeps


@torch.no_grad()
def exact_sweep(
    loaded, batch: dict, modes=MODES, heads_per_forward: int | None = None, progress=None, reuse_residual: bool = True
) -> dict:
    """Δ effect for every (layer, head) and mode: {mode: np.ndarray [L, H]}."""
    L, H = loaded.n_layers, loaded.n_heads
    B = batch["input_ids"].shape[0]
    k = heads_per_forward or H
    base, means, inputs, clean_emb = clean_pass(loaded, batch)
    fast = reuse_residual and decoder_layers(loaded) is not None and bool(batch["attention_mask"].all())
    deltas = {m: np.full((L, H), np.nan) for m in modes}
    for mode in modes:
        for layer in range(L):
            for start in range(0, H, k):
                heads = list(range(start, min(H, start + k)))
                iv = BatchedAblation(layer, heads, B, mode, means.get(layer))
                rep = _repeat(batch, len(heads))
                if fast:
                    per = _forward_from(loaded, layer, inputs[layer].repeat(len(heads), 1, 1), rep, [iv], chunk=B)
                else:
                    with routed(loaded, interventions=[iv], impl="eager"):
                        per = effect_loss(loaded, rep, loaded.model(**rep), clean_emb)
                per = per.view(len(heads), B)  # (k, B)
                deltas[mode][layer, heads] = (per - base[None]).mean(1).numpy()
            if progress:
                progress(mode, layer)
    return deltas


@torch.no_grad()
def plain_sweep(loaded, batch: dict, heads=None, progress=None) -> np.ndarray:
    """One full forward per head, zero ablation (what TransformerLens' patching utility does).
    ``heads``: optional list of (layer, head) to visit; the rest stay NaN."""
    from ..engine import ZeroHead

    L, H = loaded.n_layers, loaded.n_heads
    base, _, _, clean_emb = clean_pass(loaded, batch)
    out_d = np.full((L, H), np.nan)
    for layer, head in heads or [(l, h) for l in range(L) for h in range(H)]:
        with routed(loaded, interventions=[ZeroHead([head], layer=layer)], impl="eager"):
            out = loaded.model(**batch)
        out_d[layer, head] = float((effect_loss(loaded, batch, out, clean_emb) - base).mean())
        if progress:
            progress(layer, head)
    return out_d


def gradient_estimate(loaded, batch: dict) -> np.ndarray:
    """−∂L/∂g for head gates g = 1: the linear estimate of Δ loss under zero ablation, [L, H]."""
    L, H = loaded.n_layers, loaded.n_heads
    gates = torch.ones(L, H, requires_grad=True)
    ivs = [HeadGate(gates, layer) for layer in range(L)]
    clean_emb = None
    if not loaded.causal:
        with torch.no_grad(), routed(loaded, impl="eager"):
            clean_emb = pooled(loaded.model(**batch).last_hidden_state, batch["attention_mask"])
    with torch.enable_grad(), routed(loaded, interventions=ivs, impl="eager"):
        out = loaded.model(**batch)
        if loaded.causal:
            loss = effect_loss(loaded, batch, out).mean()
        else:  # 1 − cos is flat (zero gradient) at the clean point; use the embedding's distance instead
            emb = pooled(out.last_hidden_state, batch["attention_mask"])
            loss = -(emb * clean_emb.detach()).sum(-1).mean()
        (grad,) = torch.autograd.grad(loss, gates)
    return (-grad).numpy()


def rank_agreement(estimate: np.ndarray, exact: np.ndarray, k: int = 10) -> dict:
    """Spearman correlation and top-k overlap between two [L, H] effect maps."""
    a, b = estimate.ravel(), exact.ravel()
    ok = ~(np.isnan(a) | np.isnan(b))
    a, b = a[ok], b[ok]
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    spearman = float(np.corrcoef(ra, rb)[0, 1]) if len(a) > 2 else float("nan")
    top_a, top_b = set(np.argsort(-a)[:k]), set(np.argsort(-b)[:k])
    return {"spearman": spearman, f"top{k}_overlap": len(top_a & top_b), "k": k}
