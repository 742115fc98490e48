"""Every layer's weights of one text, kept: what the report page, the explorer and a map swap show.

    weights = capture_weights(loaded, ids)                 # L × [H, T, T] float32 (eager backend)
    ids, weights = generate_with_weights(loaded, ids, n)   # greedy decoding, every query's row kept

Reading a long text's statistics never needs these (read/heads.py streams them); a picture does.
"""

from __future__ import annotations

import numpy as np
import torch

from ..engine import CallbackProbe
from ..engine.probes import value_norms
from ..models import LoadedModel
from ..models.offload import param
from .adapter import routed
from .textpass import body, key_sets
from .verify import model_inputs


@torch.no_grad()
def capture_weights(
    loaded: LoadedModel, ids: torch.Tensor, norms: dict | None = None, select=None, batch: dict | None = None
) -> list:
    """Every layer's weights for one text: L × [H, T, T] float32 (eager backend). ``norms``: a dict to
    fill with each layer's value norms ‖v_j W_O^h‖ [H, T] (NaN without an output projection).
    ``select(layer, weights [H, Tq, Tk]) -> array`` keeps only what it returns per layer (the explorer's
    rows and columns of one token: a long text's L × H × T² weights are never held at once). ``batch``: the
    model's inputs when they are not the text's alone (a speech model's features and decoder ids)."""
    per_layer: dict[int, np.ndarray] = {}
    keep = select or (lambda layer, w: w)
    probe = CallbackProbe(lambda block: per_layer.__setitem__(block.layer, keep(block.layer, block.weights[0].float())))

    def value_norm(layer, module, q, k, v):
        proj = loaded.out_projections[layer]
        if proj is None:
            norms[layer] = np.full((loaded.n_heads, v.shape[2]), np.nan, np.float32)
        else:
            norms[layer] = value_norms(v[:1], param(proj), loaded.n_heads)[0].float().numpy()

    with routed(loaded, probes=[probe], impl="eager", before_attend=[value_norm] if norms is not None else []):
        body(loaded)(**(batch if batch is not None else model_inputs(loaded, ids, torch.ones_like(ids))))
    return [_numpy(per_layer.get(layer)) for layer in range(loaded.n_layers)]  # None: a layer that did not run


def _numpy(x):
    return x.numpy() if isinstance(x, torch.Tensor) else x


@torch.no_grad()
def generate_with_weights(loaded: LoadedModel, ids: torch.Tensor, n: int) -> tuple[torch.Tensor, list[np.ndarray]]:
    """Greedy-decode ``n`` tokens with the model's KV cache and keep the weights of every query on the
    way — the prompt's rows from the prefill, each generated token's row from its own decoding step
    (probes on the cached path: nothing is recomputed). Every generated token is fed back once, so its
    own row exists. Returns (prompt + continuation ids [1, T + n], L × [H, T + n, T + n] float32)."""
    from transformers import DynamicCache

    rows: dict[int, list] = {layer: [] for layer in range(loaded.n_layers)}
    probe = CallbackProbe(lambda b: rows[b.layer].append((b.q0, b.Tq, b.Tk, b.weights[0].float().numpy().copy())))
    cache = DynamicCache(config=loaded.model.config)
    out_ids = ids
    with routed(loaded, probes=[probe], impl="eager"):
        logits = loaded.model(input_ids=ids, cache=cache, use_cache=True).logits
        for _ in range(n):
            nxt = logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
            out_ids = torch.cat([out_ids, nxt], dim=1)
            logits = loaded.model(input_ids=nxt, cache=cache, use_cache=True).logits
    T, P = out_ids.shape[1], ids.shape[1]
    weights = []
    for layer in range(loaded.n_layers):
        full = np.zeros((loaded.n_heads, T, T), dtype=np.float32)
        # eager: one block per call, in order — the prefill (queries 0 … P − 1), then one query per step.
        # The keys of a call are the Tk positions ending at its last query: a sliding-window cache keeps
        # only the most recent ones.
        for call, (_q0, tq, tk, w) in enumerate(rows[layer]):
            start = 0 if call == 0 else P + call - 1
            end = start + tq  # one past the last query
            full[:, start : start + w.shape[1], end - tk : end - tk + w.shape[2]] = w
        weights.append(full)
    return out_ids, weights


def sink_positions(tokenizer, ids: torch.Tensor) -> list[int]:
    """The positions read.heads counts as sinks (the first, and special tokens), of a [1, T] text."""
    return [int(i) for i in torch.nonzero(key_sets(tokenizer, ids)[0][0]).flatten()]


__all__ = ["capture_weights", "generate_with_weights", "sink_positions"]
