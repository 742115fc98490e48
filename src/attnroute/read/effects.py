"""Weight versus effect: what happens downstream when a head is ablated, measured and estimated.

Ablation happens at the head's slice of the output-projection input (the head's own output,
before W_O mixes heads), never after the projection; in grouped-query models a head is a query
head, not its kv group.

    zero     the head's output is 0 (Michel et al. 2019's head mask)
    mean     the head's output is its mean over the effect batch (positions and examples)
    uniform  the head's weights are uniform over the keys it may see

Effect: next-token loss for causal LMs; for encoders, 1 − cosine between the clean and the
ablated mean-pooled sentence embedding. Δ = ablated − clean (higher = the head mattered).

The exact sweep ("exact_sweep") restarts from the ablated layer: the blocks before it are replaced
by their recorded clean outputs and the rest is the model's own forward (its masks, position
embeddings and output head, soft-caps and logit scaling included); a built-in check compares the
shortcut's clean effect with the full forward's and falls back to full forwards when they differ.
Several ablations share one forward by repeating the batch, one copy per ablated head.

The estimate ("gradient_estimate") gates each head's output with g = 1 and takes one forward and
one backward: −∂L/∂g is the first-order change of the loss when g goes to 0 (attribution
patching; Michel et al.'s importance is |∂L/∂g|).
"""

from __future__ import annotations

import numpy as np
import torch

from ..engine import HeadGate, Intervention
from ..engine.interventions import uniform_over_visible
from .adapter import routed
from .ground.budget import scaled
from .ground.copies import batch_rows, metric_of_copies, repeat_batch, repeat_output
from .ground.metrics import token_loss
from .ground.settle import SettleRule, settle
from .ground.speech import text_loss
from .hooks import forwards_replaced, recorded

MODES = ("zero", "mean", "uniform")
# Every forward of a sweep (the clean pass, its restart check, the ablated runs, the gradient's) lets "auto"
# pick the backend: zero and mean ablation, the head gates and the recorders edit head outputs only, so torch's
# fused kernel serves them as it serves the clean pass; uniform ablation needs the weights and "auto" runs
# the engine's eager path on the one layer it touches. Eager everywhere cost Whisper's 1,500-frame encoder
# most of its time; the effects agree with one plain-hooks forward per head within 1e-5 (tests/read/test_heads.py).
IMPL = "auto"
SIGNED = SettleRule(signed=True)  # heads: the exact top is the largest Δ effect, signed


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

    def needs_weights(self) -> bool:
        return self.mode == "uniform"

    def edit_weights(self, weights, block):
        if self.mode != "uniform":
            return weights
        H = weights.shape[1]
        return torch.where(self._mask(H, weights.device), uniform_over_visible(weights, block), weights)


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
    """Per example: next-token cross-entropy (causal LM), the decoder's cross-entropy against the text
    (encoder-decoder: the model's own loss), or 1 − cos(clean, ablated) pooled embedding (encoder)."""
    if loaded.causal:
        ce = token_loss(outputs.logits[:, :-1], batch["input_ids"][:, 1:])  # (B, T−1)
        m = batch["attention_mask"][:, 1:].float()
        return (ce * m).sum(1) / m.sum(1)
    if loaded.audio:  # a speech model: the transcript behind Whisper's prompt, row t predicting token t + 1
        return text_loss(loaded, batch, outputs.logits)
    if loaded.seq2seq:
        ce = token_loss(outputs.logits, batch["input_ids"])  # (B, T): row t predicts token t of the text
        m = batch["decoder_attention_mask"].float()
        return (ce * m).sum(1) / m.sum(1)
    emb = pooled(outputs.last_hidden_state, batch["attention_mask"])
    if clean_embedding is None:
        return torch.zeros(emb.shape[0])
    copies = emb.shape[0] // clean_embedding.shape[0]  # a repeated batch: copy c holds rows c·B … (c+1)·B − 1
    return 1 - torch.nn.functional.cosine_similarity(emb, clean_embedding.repeat(copies, 1), dim=-1)


class MetricEffect:
    """A metric (read/ground/metrics.py) as an ablation effect: per example, M on the ablated run, with the
    metric's fields (answer, wrong, the clean run's references) repeated for a batch of ablated copies."""

    def __init__(self, metric, fields: dict):
        self.metric, self.fields = metric, {k: v for k, v in fields.items() if v is not None}

    def __call__(self, loaded, batch: dict, outputs, clean_embedding=None) -> torch.Tensor:
        x = outputs.logits if loaded.kind != "encoder" else pooled(outputs.last_hidden_state, batch["attention_mask"])
        n = next(iter(self.fields.values())).shape[0] if self.fields else x.shape[0]  # x: copies of n prompts
        return metric_of_copies(self.metric, x, batch, self.fields, n)


def rows_of(batch: dict) -> torch.Tensor:
    """The token ids [B, T] whose rows a batch holds: the text's, or a speech model's decoder's."""
    return batch["input_ids"] if "input_ids" in batch else batch["decoder_input_ids"]


def pooled(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean pooling over real tokens, what sentence-transformers does for all-MiniLM-L6-v2: in float32 whatever
    the model's dtype (a sum over the tokens; a bf16 encoder's effects and metrics came out bf16, which numpy
    cannot hold)."""
    m = attention_mask[..., None].float()
    return (hidden.float() * m).sum(1) / m.sum(1).clamp_min(1)


# ------------------------------------------------------------------------------------ the layer stack


def layer_stack(loaded) -> list | None:
    """The block (an element of the model's ModuleList of layers) that holds each attention layer, in
    order; None for encoder-decoders (two stacks) or when the layers are not one ModuleList."""
    if loaded.seq2seq:
        return None
    for module in loaded.model.modules():
        if not isinstance(module, torch.nn.ModuleList) or len(module) != loaded.n_layers:
            continue
        blocks = []
        for attn, block in zip(loaded.attention_modules, module):
            if not any(m is attn for m in block.modules()):
                break
            blocks.append(block)
        if len(blocks) == loaded.n_layers:
            return blocks
    return None


def encoder_stack(loaded) -> list | None:
    """An encoder–decoder's encoder blocks in order (each holding its encoder layer's attention), or None: the
    stack an ablation in the encoder restarts in, as a single-stack model restarts in layer_stack. Encoder
    layers come first in the model's layer numbering (global layer i is encoder block i)."""
    if not loaded.seq2seq:
        return None
    enc = [a for i, a in enumerate(loaded.attention_modules) if loaded.mode(i) == "encoder"]
    if not enc or any(loaded.mode(i) != "encoder" for i in range(len(enc))):
        return None
    for module in loaded.model.get_encoder().modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == len(enc):
            if all(any(m is a for m in b.modules()) for a, b in zip(enc, module, strict=True)):
                return list(module)
    return None


def restart_stack(loaded) -> list | None:
    """The blocks an exact ablation restarts in: every layer's (one stack), the encoder's (an encoder–decoder,
    whose decoder-side ablations read one clean encoding instead: clean_encoding), or None."""
    return layer_stack(loaded) or encoder_stack(loaded)


@torch.no_grad()
def clean_pass(loaded, batch: dict, effect=effect_loss):
    """Clean loss per example, per-head mean outputs, each block's output (for the restart shortcut)
    and the clean embedding (encoders)."""
    recs = [OutputMean(layer) for layer in range(loaded.n_layers)]
    with recorded(restart_stack(loaded) or []) as outputs, routed(loaded, interventions=recs, impl=IMPL):
        out = loaded.model(**batch)
    clean_emb = None if loaded.kind != "encoder" else pooled(out.last_hidden_state, batch["attention_mask"])
    base = effect(loaded, batch, out, clean_emb)
    return base, {r.layer: r.mean for r in recs}, outputs, clean_emb


@torch.no_grad()
def forward_from(
    loaded,
    start: int,
    stored: dict,
    batch: dict,
    *,
    interventions,
    copies: int,
    clean_emb=None,
    blocks=None,
    effect=effect_loss,
    **model_kwargs,
):
    """The model's own forward on ``batch`` (``copies`` repeats of the effect batch), with blocks 0 … start−1
    replaced by their clean outputs: everything else — masks, position embeddings, the output head with
    its soft-cap or logit scaling — is the model's own code. Returns the effect per example."""
    result = run_from(
        loaded,
        start,
        stored,
        batch,
        interventions=interventions,
        copies=copies,
        blocks=blocks,
        impl=IMPL,
        **model_kwargs,
    )
    return effect(loaded, batch, result, clean_emb)


@torch.no_grad()
def clean_encoding(loaded, batch: dict) -> torch.Tensor | None:
    """An encoder–decoder model's encoder output on ``batch`` [B, S, d], under the engine every ablation runs
    (IMPL): an ablation in the decoder (its self or cross layers) cannot change it, so one encoding serves them
    all, bit for bit the one each full forward would compute. None for a model of one stack."""
    if "cross" not in loaded.attention_kinds:
        return None
    keys = ("input_features",) if "input_features" in batch else ("input_ids", "attention_mask")
    with routed(loaded, impl=IMPL):
        return loaded.model.get_encoder()(**{k: batch[k] for k in keys if k in batch}).last_hidden_state


@torch.no_grad()
def run_from(
    loaded,
    start: int,
    stored: dict,
    batch: dict,
    *,
    interventions,
    copies: int,
    blocks=None,
    impl="eager",
    **model_kwargs,
):
    """The model's outputs on ``batch`` with blocks 0 … start−1 answering with ``stored`` (their outputs on
    the run being edited, repeated ``copies`` times): an edit at layer ``start`` cannot change them."""
    blocks = (blocks or layer_stack(loaded)) if start > 0 else []  # callers in a loop pass theirs
    # one stack: only the last answer is read. An encoder–decoder restarts in its encoder, whose later blocks
    # may read an earlier one's output too (T5's position bias, from block 0): every answer is repeated
    every = loaded.seq2seq
    answers = {}
    for j in range(start):
        out = repeat_output(stored[j], copies) if every or j == start - 1 else stored[j]
        answers[blocks[j]] = lambda *a, _out=out, **k: _out
    with forwards_replaced(answers), routed(loaded, interventions=interventions, impl=impl):
        return loaded.model(**batch, **model_kwargs)


def restart_check(
    loaded, stored: dict, batch: dict, value, base: torch.Tensor, blocks=None, impl="eager", **model_kwargs
) -> dict:
    """The restart shortcut must reproduce the full forward before it is trusted: rerun from the middle
    layer (blocks before it answering with ``stored``) and compare ``value(outputs)`` with ``base``, the
    full forward's value per example. The one check of every verb that restarts from a layer."""
    blocks = blocks or layer_stack(loaded)
    if blocks is None:
        return {"used": False, "reason": "no single stack of layers (encoder-decoder): full forwards"}
    start = max(1, len(blocks) // 2)
    out = run_from(loaded, start, stored, batch, interventions=[], copies=1, blocks=blocks, impl=impl, **model_kwargs)
    diff = float((value(out) - base).abs().max())
    tol = 1e-4 * max(1.0, float(base.abs().max()))
    if diff <= tol:
        return {"used": True, "restart_check_max_abs_diff": diff, "tolerance": tol}
    return {
        "used": False,
        "reason": f"the layer restart differed from the full forward by {diff:.3g} (tolerance {tol:.3g}): full "
        "forwards instead",
        "restart_check_max_abs_diff": diff,
    }


def shortcut_check(loaded, batch: dict, base: torch.Tensor, stored: dict, clean_emb, effect=effect_loss) -> dict:
    """The ablation sweep's restart check: its clean effect through the shortcut equals the full forward's (an
    encoder–decoder's: restarted in its encoder, the decoder run whole)."""
    value = lambda out: effect(loaded, batch, out, clean_emb)  # noqa: E731
    blocks = restart_stack(loaded)
    if blocks is None:
        return {"used": False, "reason": "no stack of layers to restart in: full forwards"}
    return restart_check(loaded, stored, batch, value, base, blocks, impl=IMPL)


COPIES_BYTES = 512 << 20  # the logits of one forward's ablated copies (copies × B × T × vocab fp32)


def copies_per_forward(loaded, batch: dict, budget_bytes: int | None = None) -> int:
    """How many ablated copies of the batch one forward carries: the logits of all copies
    (copies × B × T × vocab fp32) stay under ``budget_bytes`` (default COPIES_BYTES under the memory cap in
    force: 1.1 GB for 9 SmolLM2 copies otherwise)."""
    budget_bytes = scaled(COPIES_BYTES) if budget_bytes is None else budget_bytes
    if loaded.kind == "encoder":
        return loaded.n_heads
    B, T = rows_of(batch).shape
    vocab = int(getattr(loaded.model.config, "vocab_size", 50_000) or 50_000)
    per_copy = B * T * vocab * 4
    if "input_features" in batch:  # a speech encoder's eager scores and weights: H × 1,500² per example, twice
        frames = batch["input_features"].shape[-1] // 2
        per_copy = max(per_copy, B * loaded.n_heads * frames * frames * 4 * 2)
    return int(max(1, min(loaded.n_heads, budget_bytes // max(1, per_copy))))


# ------------------------------------------------------------------------------------ the sweeps


class Sweep:
    """Exact ablations on one effect batch: the clean pass and the shortcut check once, then
    ``measure(pairs)`` as many times as needed (the fast default measures in rounds)."""

    def __init__(
        self, loaded, batch: dict, modes=("zero",), reuse_residual: bool = True, progress=None, effect=effect_loss
    ):
        self.loaded, self.batch, self.modes, self.progress, self.effect = loaded, batch, tuple(modes), progress, effect
        self.B = rows_of(batch).shape[0]
        self.base, self.means, self.stored, self.clean_emb = clean_pass(loaded, batch, effect)
        self.check = (
            shortcut_check(loaded, batch, self.base, self.stored, self.clean_emb, effect)
            if reuse_residual
            else {"used": False}
        )
        self.k = copies_per_forward(loaded, batch)
        self.blocks = restart_stack(loaded)  # found once, not once per forward
        # an encoder-decoder's encoder runs once for every decoder-side ablation (a Whisper encoder's 1,500
        # frames were most of each forward, run once per copy); an encoder-side one restarts at its layer
        self.encoded = clean_encoding(loaded, batch) if loaded.seq2seq else None
        L, H = loaded.n_layers, loaded.n_heads
        self.deltas = {m: np.full((L, H), np.nan) for m in self.modes}
        self.measured: list[tuple[int, int]] = []

    @property
    def info(self) -> dict:
        return {"shortcut": self.check, "copies_per_forward": self.k, "heads_measured": len(self.measured)}

    @torch.no_grad()
    def measure(self, pairs) -> None:
        """Exact Δ effect of every (layer, head) in ``pairs``, in each mode, into self.deltas."""
        by_layer: dict[int, list[int]] = {}
        for layer, h in pairs:
            by_layer.setdefault(layer, []).append(h)
        done, total = 0, len(pairs) * len(self.modes)
        for mode in self.modes:
            for layer in sorted(by_layer):
                hs = by_layer[layer]
                for i in range(0, len(hs), self.k):
                    chunk = hs[i : i + self.k]
                    iv = BatchedAblation(layer, chunk, self.B, mode, self.means.get(layer))
                    rep = repeat_batch(self.batch, len(chunk))
                    start = self._start(layer)
                    per = forward_from(
                        self.loaded,
                        start,
                        self.stored,
                        rep,
                        interventions=[iv],
                        copies=len(chunk),
                        clean_emb=self.clean_emb,
                        blocks=self.blocks,
                        effect=self.effect,
                        **self._encoder_outputs(layer, len(chunk)),
                    )
                    per = per.view(len(chunk), self.B)  # (k, B)
                    self.deltas[mode][layer, chunk] = (per - self.base[None]).mean(1).numpy()
                    done += len(chunk)
                    if self.progress:
                        self.progress(mode, layer, done, total)
        self.measured += [p for p in pairs if p not in self.measured]

    def _start(self, layer: int) -> int:
        """The block an ablation of ``layer`` restarts at: its own (one stack; an encoder–decoder's encoder
        layer, in the encoder's stack), else 0 (a decoder-side layer of an encoder–decoder: the decoder runs whole
        on the clean encoding)."""
        if not self.check["used"]:
            return 0
        if not self.loaded.seq2seq:
            return layer
        return self.loaded.stream_layer(layer) if self.loaded.mode(layer) == "encoder" else 0

    def _encoder_outputs(self, layer: int, copies: int) -> dict:
        """The clean encoding for the copies of an ablation in the decoder; {} (the encoder runs) in the encoder."""
        if self.encoded is None or self.loaded.mode(layer) == "encoder":
            return {}
        return {"encoder_outputs": (self.encoded.repeat(copies, 1, 1),)}


def exact_sweep(
    loaded,
    batch: dict,
    modes=("zero",),
    heads: list[tuple[int, int]] | None = None,
    *,
    progress=None,
    reuse_residual: bool = True,
    info: dict | None = None,
    effect=effect_loss,
) -> dict:
    """Δ effect for the (layer, head) pairs ``heads`` (default: all) and each mode: {mode: np.ndarray [L, H]},
    NaN where not measured. ``info`` (a dict) receives how it was computed (shortcut or full forwards)."""
    L, H = loaded.n_layers, loaded.n_heads
    pairs = heads if heads is not None else [(layer, h) for layer in range(L) for h in range(H)]
    sweep = Sweep(loaded, batch, modes, reuse_residual, progress, effect)
    sweep.measure(pairs)
    if info is not None:
        info.update(sweep.info)
    return sweep.deltas


def settled_sweep(
    loaded,
    batch: dict,
    ranking: np.ndarray,
    modes=("zero",),
    *,
    rule: SettleRule = SIGNED,
    progress=None,
    effect=effect_loss,
    sweep=None,
) -> tuple[dict, dict]:
    """Exact ablation in the order of ``ranking`` (an [L, H] score, largest first) under the settle rule
    (ground/settle.py), its exact top ranked by the first mode's Δ, largest first. Returns (deltas, info)."""
    L, H = ranking.shape
    order = np.argsort(-np.nan_to_num(ranking.ravel(), nan=-np.inf), kind="stable")
    sweep = sweep or Sweep(loaded, batch, modes, progress=progress, effect=effect)  # or the caller's (groups)
    info = settle(
        order,
        lambda idx: sweep.measure([(i // H, i % H) for i in idx]),
        lambda idx: sweep.deltas[sweep.modes[0]].ravel()[idx],
        rule,
    )
    return sweep.deltas, {
        **sweep.info,
        "rounds": info["rounds"],
        "first": rule.first,
        "step": rule.step,
        "top": rule.top,
    }


@torch.no_grad()
def plain_sweep(loaded, batch: dict, heads=None, progress=None) -> np.ndarray:
    """One full forward per head, zero ablation (what TransformerLens' patching utility does).
    ``heads``: optional list of (layer, head) to visit; the rest stay NaN."""
    from ..engine import ZeroHead

    L, H = loaded.n_layers, loaded.n_heads
    base, _, _, clean_emb = clean_pass(loaded, batch)
    out_d = np.full((L, H), np.nan)
    for layer, head in heads or [(l, h) for l in range(L) for h in range(H)]:
        with routed(loaded, interventions=[ZeroHead([head], layer=layer)], impl=IMPL):
            out = loaded.model(**batch)
        out_d[layer, head] = float((effect_loss(loaded, batch, out, clean_emb) - base).mean())
        if progress:
            progress(layer, head)
    return out_d


def gradient_estimate(loaded, batch: dict, effect=None) -> np.ndarray:
    """−∂L/∂g for head gates g = 1: the linear estimate of Δ loss under zero ablation, [L, H]; with ``effect``
    (a MetricEffect), of Δ that metric."""
    L, H = loaded.n_layers, loaded.n_heads
    if effect is not None:
        gates = torch.ones(L, H, requires_grad=True)
        with torch.enable_grad(), routed(loaded, interventions=[HeadGate(gates, l) for l in range(L)], impl=IMPL):
            value = effect(loaded, batch, loaded.model(**batch)).mean()
            (grad,) = torch.autograd.grad(value, gates)
        return (-grad).numpy()
    gates = torch.ones(L, H, requires_grad=True)
    ivs = [HeadGate(gates, layer) for layer in range(L)]
    clean_emb = None
    encoder = loaded.kind == "encoder"
    if encoder:
        with torch.no_grad(), routed(loaded, impl=IMPL):
            clean_emb = pooled(loaded.model(**batch).last_hidden_state, batch["attention_mask"])
    B = rows_of(batch).shape[0]
    step = B if encoder or not loaded.causal else max(1, scaled(GRAD_TOKENS) // rows_of(batch).shape[1])
    grad = torch.zeros(L, H)
    for a in range(0, B, step):  # rows at a time under a memory cap: the mean over rows, summed by parts
        part = batch_rows(batch, a, min(B, a + step), B)
        with torch.enable_grad(), routed(loaded, interventions=ivs, impl=IMPL):
            out = loaded.model(**part)
            if not encoder:
                loss = effect_loss(loaded, part, out).sum() / B
            else:  # 1 − cos is flat (zero gradient) at the clean point; use the embedding's distance instead
                emb = pooled(out.last_hidden_state, part["attention_mask"])
                loss = -(emb * clean_emb.detach()).sum(-1).mean()
            grad += torch.autograd.grad(loss, gates)[0]
    return (-grad).numpy()


GRAD_TOKENS = 1024  # rows × tokens of the effect batch in one gradient pass (scaled under a memory cap)


def rank_agreement(estimate: np.ndarray, exact: np.ndarray, k: int = 10) -> dict:
    """Spearman correlation and top-k overlap between two [L, H] effect maps."""
    a, b = estimate.ravel(), exact.ravel()
    ok = ~(np.isnan(a) | np.isnan(b))
    a, b = a[ok], b[ok]
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    spearman = float(np.corrcoef(ra, rb)[0, 1]) if len(a) > 2 else float("nan")
    top_a, top_b = set(np.argsort(-a)[:k]), set(np.argsort(-b)[:k])
    return {"spearman": spearman, f"top{k}_overlap": len(top_a & top_b), "k": k}
