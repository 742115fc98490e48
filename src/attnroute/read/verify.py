"""Right or refused, at run time: before a read, the model's output through attnroute's routed
attention is compared with the model's own eager attention on a short padded batch.

    check = routing_check(loaded)        # {"max_abs_diff": …, "tolerance": …, "layer": …, …}

The batch is two texts of different lengths, padded on the right, so that padding masks are
exercised; only real (non-padding) positions are compared. Compared: the logits of a causal LM or an
encoder-decoder (the model's own head: soft-caps and logit scaling included), the last hidden state
of an encoder. Every attention layer's output is compared too, so a mismatch names the first layer
that differs. Above the tolerance the read stops (RoutingMismatch, one line, exit 2).

Tolerance (absolute, on values of magnitude ``scale`` = max |reference|): REL[dtype] · max(1, scale).
fp32: 1e-4 — the two paths sum in different orders; measured differences on the support matrix
are ≤ 1e-5 relative (docs/support-matrix.md).
"""

from __future__ import annotations

import contextlib

import torch

from ..audio import audio
from ..engine import InputError
from .adapter import routed
from .ground.speech import clip_batch
from .hooks import recorded
from .stimuli import encode_text

REL = {torch.float32: 1e-4, torch.float64: 1e-9, torch.float16: 2e-2, torch.bfloat16: 5e-2}
TEXTS = (
    "The quick brown fox jumps over the lazy dog, and the dog sleeps on in the warm afternoon sun.",
    "Alice gave Bob the book.",
)


class RoutingMismatch(InputError):
    """attnroute's routed attention does not reproduce the model's own attention."""


CLIPS = ("paris", "stella")  # a speech model's check: two bundled clips, transcripts of 8 and 16 tokens


def check_batch(loaded, texts=TEXTS) -> dict:
    """The model's inputs for ``texts``, right-padded: input_ids, attention_mask (+ decoder ids for seq2seq).
    A speech model hears two bundled clips, their transcripts right-padded in the decoder."""
    if loaded.audio:
        return speech_check_batch(loaded)
    encoded = [encode_text(loaded.tokenizer, t, loaded.max_positions or None)[0][0] for t in texts]
    T = max(len(e) for e in encoded)
    ids = torch.zeros(len(encoded), T, dtype=torch.long)
    mask = torch.zeros(len(encoded), T, dtype=torch.long)
    for i, e in enumerate(encoded):
        ids[i, : len(e)], mask[i, : len(e)] = e, 1
    return model_inputs(loaded, ids, mask)


def window(loaded) -> int | None:
    """The sliding window of a model that has one on some layers (Gemma 3: 512), when its positions exceed it."""
    w = getattr(loaded.model.config, "sliding_window", None)
    return int(w) if w and (not loaded.max_positions or loaded.max_positions > w) else None


def longer_than(loaded, n: int) -> str:
    """TEXTS[0] repeated until it is 32 tokens past ``n``: every local layer's window is then full and moving."""
    text = TEXTS[0]
    while len(loaded.tokenizer(text).input_ids) < n + 32:
        text += " " + TEXTS[0]
    return text


def windowed(loaded, per_layer: list) -> dict | None:
    """The check's worst difference on the local (windowed) and the global layers, apart."""
    types = getattr(loaded.model.config, "layer_types", None)
    if not window(loaded) or not types or len(types) != len(per_layer):
        return None
    local = [d for d, t in zip(per_layer, types) if d is not None and t == "sliding_attention"]
    full = [d for d, t in zip(per_layer, types) if d is not None and t != "sliding_attention"]
    return {
        "sliding_window": window(loaded),
        "local_layers": sum(t == "sliding_attention" for t in types),
        "local_max_abs_diff": max(local, default=None),
        "global_max_abs_diff": max(full, default=None),
    }


def speech_check_batch(loaded) -> dict:
    return clip_batch(loaded, [audio(name) for name in CLIPS])


def model_inputs(loaded, ids: torch.Tensor, mask: torch.Tensor) -> dict:
    """input_ids and attention_mask; for an encoder-decoder also the decoder's ids: the text shifted right,
    as the model's own loss does (prepare_decoder_input_ids_from_labels)."""
    batch = {"input_ids": ids, "attention_mask": mask}
    if loaded.seq2seq:
        labels = ids.masked_fill(mask == 0, -100)
        batch["decoder_input_ids"] = loaded.model.prepare_decoder_input_ids_from_labels(labels=labels)
        batch["decoder_attention_mask"] = mask
    return batch


@contextlib.contextmanager
def _implementation(model, name: str):
    previous = model.config._attn_implementation
    model.set_attn_implementation(name)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


def long_batch(loaded) -> dict | None:
    """A windowed model's second check: one text past its window (local layers must then drop keys the global
    ones keep), unpadded; its logits are compared at the last position only (every attention layer's output
    at every position): [T, vocab] logits of Gemma's 262,144 tokens would cost 0.6 GB for nothing."""
    if not window(loaded):
        return None
    ids, _ = encode_text(loaded.tokenizer, longer_than(loaded, window(loaded)), loaded.max_positions or None)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "logits_to_keep": 1}


def _run(loaded, batch: dict, context) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(final output, each attention layer's output) for one forward under ``context``."""
    with torch.no_grad(), recorded(loaded.attention_modules, first=True) as outs, context:
        result = loaded.model(**batch)
    final = result.logits if getattr(result, "logits", None) is not None else result.last_hidden_state
    return final.float(), [outs.get(i) for i in range(loaded.n_layers)]


def _rows(loaded, batch: dict, layer_kind: str | None = None) -> torch.Tensor:
    """Which (example, position) rows are real for an output of this kind, bool [B, T]."""
    if layer_kind == "logits" and "logits_to_keep" in batch:  # the last position's logits only
        return batch["attention_mask"][:, -batch["logits_to_keep"] :].bool()
    if loaded.seq2seq and layer_kind != "self":
        return batch["decoder_attention_mask"].bool()
    if "attention_mask" not in batch:  # a speech encoder: every frame is real (Whisper pads with silence)
        return slice(None)
    return batch["attention_mask"].bool()


def _described(batch: dict) -> str:
    if "attention_mask" not in batch:
        m = batch["decoder_attention_mask"].sum(1)
        lengths = " and ".join(str(int(x)) for x in m)
        return f"{len(CLIPS)} clips ({', '.join(CLIPS)}), transcripts of {lengths} tokens, right-padded"
    lengths = ", ".join(str(int(x)) for x in batch["attention_mask"].sum(1))
    return f"{batch['attention_mask'].shape[0]} texts of {lengths} tokens, right-padded"


def _compare(loaded, batch: dict, impl: str) -> tuple[float, float, list, list]:
    """(max |Δ final output|, its scale, per layer max |Δ| (None: not run), each layer's reference output)."""
    ref, ref_layers = _run(loaded, batch, _implementation(loaded.model, "eager"))
    ours, our_layers = _run(loaded, batch, routed(loaded, impl=impl))
    rows = _rows(loaded, batch, "logits")
    diff, scale = float((ours - ref).abs()[rows].max()), float(ref.abs()[rows].max())
    per_layer = []
    for i, (a, b) in enumerate(zip(our_layers, ref_layers)):
        r = _rows(loaded, batch, loaded.attention_kinds[i])
        per_layer.append(None if a is None or b is None else float((a.float() - b.float()).abs()[r].max()))
    return diff, scale, per_layer, ref_layers


def _worst(a: list, b: list) -> list:
    return [x if y is None else y if x is None else max(x, y) for x, y in zip(a, b)]


def routing_check(loaded, impl: str = "blocked") -> dict:
    """Compare the routed model with its own eager attention; raise RoutingMismatch beyond tolerance."""
    batch = check_batch(loaded)
    diff, scale, per_layer, ref_layers = _compare(loaded, batch, impl)
    if (long := long_batch(loaded)) is not None:
        d, sc, pl, _ = _compare(loaded, long, impl)
        diff, scale, per_layer = max(diff, d), max(scale, sc), _worst(per_layer, pl)
    dtype = next(loaded.model.parameters()).dtype
    tol = REL.get(dtype, 1e-4) * max(1.0, scale)
    out = {
        "compared": "logits" if loaded.kind != "encoder" else "last hidden state",
        "against": "the model's own eager attention",
        "batch": _described(batch),
        "impl": impl,
        "max_abs_diff": diff,
        "scale": scale,
        "tolerance": tol,
        "per_layer_max_abs_diff": per_layer,
    }
    if (split := windowed(loaded, per_layer)) is not None:
        out["window"] = {**split, "longest_text_tokens": int(long["input_ids"].shape[1])}
        out["batch"] += f"; and {long['input_ids'].shape[1]} tokens past the {window(loaded)}-token window"
    if not diff <= tol:
        layer_tol = [REL.get(dtype, 1e-4) * max(1.0, float(b.float().abs().max())) for b in ref_layers if b is not None]
        bad = next((i for i, (d, t) in enumerate(zip(per_layer, layer_tol)) if d is not None and d > t), None)
        where = (
            f"first at layer {bad} ({loaded.attention_kinds[bad]}-attention, max |Δ| {per_layer[bad]:.3g})"
            if bad is not None
            else "no single attention layer differs beyond tolerance; the difference builds up across layers"
        )
        raise RoutingMismatch(
            f"{loaded.name}: attnroute's routed attention does not reproduce the model's own: "
            f"max |Δ {out['compared']}| = {diff:.3g} > tolerance {tol:.3g}, {where}; "
            "this model cannot be read correctly (skipping this check, verify=False, reads it unverified)",
            field="model",
        )
    return out


__all__ = ["REL", "RoutingMismatch", "check_batch", "model_inputs", "routing_check"]
