"""What the routing report shows, gathered by running the model: the HeadTable, the tokens and
every layer's weights for one short text. show/report.py renders it and runs nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from ..engine import CallbackProbe
from .adapter import routed
from .heads import DEFAULT_TEXT, body, read_heads
from .headtable import HeadTable
from .models import LoadedModel, load
from .stimuli import encode_text
from .verify import model_inputs


@dataclass
class RoutingView:
    """One text read by one model: everything the report page needs, as data."""

    table: HeadTable
    tokens: list[str]  # the tokenizer's own strings, one per position (the encoder's, for an encoder-decoder)
    weights: list[np.ndarray]  # per layer [H, T, T] float32
    config: object  # the model's transformers config (for the KV-cache card)
    kv_heads: int
    context: int  # the model's context length (0 when the config has none)
    seconds: float
    decoder_tokens: list[str] | None = None  # an encoder-decoder's decoder input (the text shifted right)
    corpus: HeadTable | None = None  # a corpus read (read_corpus): means, intervals, significance


@torch.no_grad()
def capture_weights(loaded: LoadedModel, ids: torch.Tensor) -> list[np.ndarray]:
    """Every layer's weights for one text: L × [H, T, T] float32 (short texts; eager backend)."""
    per_layer: dict[int, np.ndarray] = {}
    probe = CallbackProbe(lambda block: per_layer.__setitem__(block.layer, block.weights[0].float().numpy()))
    with routed(loaded, probes=[probe], impl="eager"):
        body(loaded)(**model_inputs(loaded, ids, torch.ones_like(ids)))
    return [per_layer[layer] for layer in range(loaded.n_layers)]


def routing_view(
    model="smollm2",
    text: str | None = None,
    *,
    ablation: bool = True,
    max_tokens: int = 256,
    verify: bool = True,
    progress=None,
) -> RoutingView:
    """Read the model on the text and capture its weights (the `attnroute report` pipeline)."""
    t0 = time.perf_counter()
    say = progress or (lambda *a: None)
    loaded = model if isinstance(model, LoadedModel) else load(model, progress=lambda m: say("load", m))
    text = DEFAULT_TEXT if text is None else text
    # Sized for a one-minute page on 2 cores: 2 probe seeds of 4 sequences, zero ablation on one
    # sequence of 16 tokens repeated (`attnroute heads` runs the full 8 × 40 sweep in all modes).
    table = read_heads(
        loaded,
        text,
        max_tokens=max_tokens,
        seeds=(0, 1),
        ablation=ablation,
        effect_batch=1,
        effect_len=16,
        modes=("zero",),
        exact="all",  # the page's effect figure shows every head: on 16 tokens the full sweep is cheap
        stimulus_batch=4,
        verify=verify,
        progress=say,
    )
    ids, _ = encode_text(loaded.tokenizer, text, max_tokens)
    weights = capture_weights(loaded, ids)
    tokens = loaded.tokenizer.convert_ids_to_tokens(ids[0].tolist())
    decoder_tokens = None
    if loaded.seq2seq:
        dec = model_inputs(loaded, ids, torch.ones_like(ids))["decoder_input_ids"]
        decoder_tokens = loaded.tokenizer.convert_ids_to_tokens(dec[0].tolist())
    return RoutingView(
        table,
        tokens,
        weights,
        loaded.model.config,
        loaded.n_kv_heads,
        loaded.max_positions,
        time.perf_counter() - t0,
        decoder_tokens,
    )


__all__ = ["RoutingView", "capture_weights", "routing_view"]
