"""Pass 1 of a read (heads.py): the text's statistics per head — entropy, sink, punctuation and local mass,
value-norm-weighted mass, the max weight and its offsets — read block by block from the engine's probes (the
fused kernel where every statistic is linear in the weights, the blocked path where one is not), never the
n×n matrix of a whole model. Also the key sets a statistic reads (sinks, punctuation) and the model's body
(its forward without the output head)."""

from __future__ import annotations

import functools
import inspect
import string

import numpy as np
import torch

from ..engine import UnsupportedRequest
from ..engine.fused_probes import FusedKeyMass, FusedRowStats
from ..engine.probes import KeyVectors, PerLayer, Probe, row_stats_probe, value_norms
from ..engine.repeats import special_ids
from ..models import LoadedModel
from ..models.offload import param
from ..progress import reporter
from .adapter import routed
from .ground.speech import speech_batch
from .headtable import OFFSET_BUCKETS
from .verify import model_inputs


def key_sets(tokenizer, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sink keys, punctuation keys), bool [B, T]: sinks are the first position and special tokens
    (BOS, [CLS], [SEP]); punctuation is any token that decodes to punctuation only."""
    specials = special_ids(tokenizer)
    flat = ids.flatten().tolist()
    is_special = torch.tensor([t in specials for t in flat]).view(ids.shape)
    sink = is_special.clone()
    sink[:, 0] = True
    punct_chars = set(string.punctuation)
    words = tokenizer.convert_ids_to_tokens(flat)
    is_punct = torch.tensor([bool(w.strip("Ġ▁ ")) and set(w.strip("Ġ▁ ")) <= punct_chars for w in words]).view(
        ids.shape
    )
    return sink, is_punct & ~sink


def frame_sets(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A speech encoder's keys are frames: the first is the sink position; no frame is punctuation."""
    n = features.shape[-1] // 2  # the stride-2 convolution halves the mel frames (3,000 → 1,500)
    sink = torch.zeros(1, n, dtype=torch.bool)
    sink[:, 0] = True
    return sink, torch.zeros_like(sink)


FUSED_COLUMNS = ("entropy", "entropy_norm", "sink_mass", "punct_mass", "local", "norm_mass")
MAX_COLUMNS = ("max_weight",)  # and the argmax offsets: not linear in the weights, the blocked path only


class AfterLayer(Probe):
    """Calls ``fn(layer)`` in a fused call after the probes listed before it have read the layer (a fused
    call hands its block to the probes in list order, once per layer)."""

    reads_fused = True
    needs_key_sums = False

    def __init__(self, fn):
        self.fn = fn

    def update(self, block) -> None:
        raise UnsupportedRequest("AfterLayer runs in fused calls only; with impl='blocked' reduce after the forward")

    def update_fused(self, block) -> None:
        self.fn(block.layer)


class TextPass:
    """The probes of one text-statistics pass and the per-layer reduction of what they read (memory: one
    layer's rows at a time). ``impl``: "fused" (the flash kernel with each row's log-sum-exp) or "blocked"
    (the weights themselves: the row maximum and argmax offsets)."""

    def __init__(self, loaded: LoadedModel, sets: dict, impl: str, entropy: bool, say):
        self.loaded, self.sets, self.impl, self.entropy, self.say = loaded, sets, impl, entropy, say
        blocked = impl == "blocked"
        self.rows = row_stats_probe(band=4) if blocked else PerLayer(lambda: FusedRowStats(band=4, entropy=entropy))
        # Key vectors: indicators are the same for every head (fused: 2 columns per kv head), the value norms
        # differ per query head (fused: 2 columns per query head, side by side in their kv head's columns).
        self.keyind = PerLayer(KeyVectors if blocked else FusedKeyMass)
        self.keynorm = PerLayer(KeyVectors if blocked else FusedKeyMass)
        L, H = loaded.n_layers, loaded.n_heads
        self.has_sinks = blocked and any(getattr(m, "sinks", None) is not None for m in loaded.attention_modules)
        self.cols = {c: np.full((L, H), np.nan) for c in FUSED_COLUMNS + MAX_COLUMNS + ("sink_logit_mass",)}
        self.offsets = np.full((L, H, len(OFFSET_BUCKETS)), np.nan)

    def probes(self) -> list:
        """Fused probes run in list order within a layer's call: the reduction comes right after them."""
        out = [self.rows, self.keyind, self.keynorm]
        return out + [AfterLayer(self.reduce)] if self.impl == "fused" else out

    def set_key_vectors(self, layer, module, q, k, v) -> None:
        """Before each layer's call: the sink and punctuation indicators of its keys, and each head's value
        norms ‖f(x_j)‖ (alone, and on the sinks)."""
        loaded = self.loaded
        sink_keys, punct_keys = self.sets.get(loaded.attention_kinds[layer], self.sets["self"])
        proj, H = loaded.out_projections[layer], loaded.n_heads
        if proj is not None:
            fn = value_norms(v, param(proj), H)  # (B, H, T)
        else:
            fn = torch.full(v.shape[:1] + (H, v.shape[2]), float("nan"))
        self.keyind.for_layer(layer).vectors = torch.stack([sink_keys, punct_keys], -1).float()[:, None]  # (B,1,T,2)
        self.keynorm.for_layer(layer).vectors = torch.stack([fn, fn * sink_keys[:, None]], -1)  # (B, H, T, 2)
        self.say("layer", done=layer + 1, total=loaded.n_layers)

    def reduce(self, layer) -> None:
        """The layer's per-head means, then its per-row tensors are dropped."""
        r, ind, nrm = self.rows[layer], self.keyind[layer].rows(), self.keynorm[layer].rows()  # (B, H, T, 2) each
        valid = (r.get("n_visible") >= 2).float()  # (B, H, T): rows with a choice to make

        def mean(x):  # over the rows with a choice to make, per head
            return ((x.float() * valid).sum((0, 2)) / valid.sum((0, 2)).clamp_min(1)).numpy()

        cols = self.cols
        if self.impl == "blocked" or self.entropy:
            cols["entropy"][layer], cols["entropy_norm"][layer] = mean(r.get("entropy")), mean(r.entropy_norm())
        cols["local"][layer] = mean(r.get("band_mass"))
        cols["sink_mass"][layer], cols["punct_mass"][layer] = mean(ind[..., 0]), mean(ind[..., 1])
        share = torch.where(nrm[..., 0] > 0, nrm[..., 1] / nrm[..., 0].clamp_min(1e-30), torch.zeros_like(nrm[..., 0]))
        cols["norm_mass"][layer] = mean(share)
        if self.has_sinks:
            cols["sink_logit_mass"][layer] = mean(r.get("sink_logit_mass"))
        if self.impl == "blocked":
            cols["max_weight"][layer] = mean(r.get("max_weight"))
            self.offsets[layer] = offset_histogram(r.get("argmax"), r.get("argmax").shape[-1], valid)
        for probe in (self.rows, self.keyind, self.keynorm):
            probe.drop(layer)

    def paths(self) -> dict:
        """Which backend (or reason) computed each column."""
        paths = {c: self.impl for c in FUSED_COLUMNS}
        paths["sink_logit_mass"] = self.impl if self.has_sinks else "not applicable (the model has no sink logits)"
        if self.impl == "fused" and not self.entropy:
            paths.update({c: "not computed (entropy=False)" for c in ("entropy", "entropy_norm")})
        blocked_only = "blocked" if self.impl == "blocked" else "not computed (ask for max_weight)"
        paths.update({c: blocked_only for c in MAX_COLUMNS + ("argmax_offsets",)})
        return paths


@torch.no_grad()
def text_statistics(
    loaded: LoadedModel,
    ids: torch.Tensor,
    progress=None,
    max_weight: bool = False,
    entropy: bool = True,
    features: torch.Tensor | None = None,
):
    """One forward of the text; no LM head (no logits are needed).

    Default: the fused backend — the flash kernel with each row's log-sum-exp, whose one call per layer
    takes the values [V | K | sink, punctuation | ‖f(x_j)‖, ‖f(x_j)‖·sink for each head of the kv group]
    — gives the output, entropy, masses and the local band; named weights are dot products.
    ``max_weight`` adds the row maximum and argmax offsets, which need the weights themselves: then the
    blocked backend reads every column.
    ``progress`` receives progress.Event objects (a warning when the fused path cannot read the model, a
    counter per layer). ``features``: a speech model's log-mel input (``ids`` are then its decoder's).
    Returns (columns, offsets, path per column)."""
    say = reporter(progress)
    if features is not None:  # a speech model: frames in the encoder, the transcript in the decoder
        batch = speech_batch(features, ids)
        sets = {"self": frame_sets(features), "decoder-self": key_sets(loaded.tokenizer, ids)}
    else:
        batch = model_inputs(loaded, ids, torch.ones_like(ids))
        sets = {"self": key_sets(loaded.tokenizer, ids)}  # (sink keys, punctuation keys), (B, T) each
    if loaded.seq2seq and features is None:  # the decoder's keys are its own (shifted) tokens; cross: the encoder's
        sets["decoder-self"] = key_sets(loaded.tokenizer, batch["decoder_input_ids"])
    impl = "blocked" if max_weight else "fused"
    if impl == "fused" and (reason := _fused_refusal(loaded)):
        say("warn", f"statistics through the blocked backend: {reason}")
        impl = "blocked"
    tp = TextPass(loaded, sets, impl, entropy, say)
    with routed(loaded, probes=tp.probes(), impl=impl, before_attend=[tp.set_key_vectors]):
        body(loaded)(**batch)
    if impl == "blocked":  # blocked probes see a layer block by block: reduce once the forward is done
        for layer in range(loaded.n_layers):
            tp.reduce(layer)
    return tp.cols, tp.offsets, tp.paths()


def _fused_refusal(loaded: LoadedModel) -> str | None:
    """Why the fused path cannot read this model: soft-capped scores, a score bias (T5) and sink logits
    (gpt-oss) are not linear in q·k, which the fused statistics assume."""
    cfg = loaded.model.config
    if getattr(cfg, "attn_logit_softcapping", None):
        return "the model soft-caps its attention scores, which the fused kernel cannot"
    if any(getattr(m, "has_relative_attention_bias", False) for m in loaded.attention_modules) or loaded.seq2seq:
        return "the model adds a position bias to its scores (or is an encoder-decoder); fused does not read it"
    if any(getattr(m, "sinks", None) is not None for m in loaded.attention_modules):
        return "the model has sink logits in its softmax, which the fused kernel cannot"
    return None


def body(loaded: LoadedModel):
    """What to call for statistics: the model without its LM head (no logits needed), except for
    encoder-decoders, whose bare model needs the decoder inputs anyway. Called without a KV cache where
    the model takes ``use_cache``: one reading pass never reuses it (at 4,096 tokens SmolLM2's cache is
    189 MB: 30 layers × K and V × 3 kv heads × 4,096 × 64 × 4 B, held to the end of the forward)."""
    module = loaded.model if loaded.seq2seq else loaded.model.base_model
    if "use_cache" not in inspect.signature(module.forward).parameters:
        return module
    return functools.partial(module, use_cache=False)


def offset_histogram(argmax: torch.Tensor, T: int, valid: torch.Tensor) -> np.ndarray:
    """Fraction of rows per OFFSET_BUCKETS bucket of (query position − argmax key), [H, buckets]."""
    qpos = torch.arange(argmax.shape[-1]) + (T - argmax.shape[-1])
    off = qpos - argmax  # (B, H, Tq)
    buckets = [
        argmax == 0,
        (off == 0) & (argmax != 0),
        off == 1,
        (off >= 2) & (off <= 4),
        (off >= 5) & (off <= 16),
        off >= 17,
        off < 0,
    ]
    taken = torch.zeros_like(off, dtype=torch.bool)
    out = []
    for b in buckets:  # first match wins ("first" before "self" etc.)
        b = b & ~taken
        taken |= b
        out.append(((b.float() * valid).sum((0, 2)) / valid.sum((0, 2)).clamp_min(1)).numpy())
    return np.stack(out, axis=-1)


# ------------------------------------------------------------------------------------ pass 2: repeats


__all__ = [
    "AfterLayer",
    "body",
    "frame_sets",
    "FUSED_COLUMNS",
    "key_sets",
    "MAX_COLUMNS",
    "offset_histogram",
    "text_statistics",
    "TextPass",
]
