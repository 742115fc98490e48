"""Repeated random tokens: the stimulus that makes previous-token, duplicate and induction routes
visible, and the three scores read off it.

Repeated random tokens (TransformerLens' induction stimulus; docs/head-scores.md): S tokens
drawn uniformly from the vocabulary's ordinary range, repeated twice, with the model's BOS (or
[CLS]) prepended when it has one and [SEP] appended for BERT-style encoders. With P prefix
positions (1 with BOS, else 0) and q the absolute query position:

    previous-token score  mean of A[q, q−1]      over q ∈ [P+1, P+2S−1]
    duplicate score       mean of A[q, q−S]      over q ∈ [P+S, P+2S−1]
    induction score       mean of A[q, q−S+1]    over q ∈ [P+S, P+2S−1]

(the induction stripe starts at the second repeat's first token, which attends to the token after
its earlier copy; TransformerLens' stripe also includes q = S−1, a non-induction position.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .probes import Diagonals, PerLayer

DEFAULT_LEN = 40  # 8 sequences × 40 tokens, repeated twice (the effect batch)
DEFAULT_BATCH = 8


@dataclass
class Repeated:
    input_ids: torch.Tensor  # (B, P + 2S [+ 1])
    attention_mask: torch.Tensor
    S: int
    prefix: int  # positions before the first repeat (BOS / [CLS])
    seed: int

    def second_rows(self) -> torch.Tensor:
        return torch.arange(self.prefix + self.S, self.prefix + 2 * self.S)

    def describe(self) -> str:
        return (
            f"{self.input_ids.shape[0]} sequences of {self.S} random tokens repeated twice, seed {self.seed}, "
            f"{'BOS/[CLS] prepended' if self.prefix else 'no BOS'}"
        )


def special_ids(tokenizer) -> set[int]:
    return {int(i) for i in (tokenizer.all_special_ids or [])}


def repeated_random_tokens(
    tokenizer, S: int = DEFAULT_LEN, batch: int = DEFAULT_BATCH, seed: int = 0, causal: bool = True
) -> Repeated:
    """[BOS] r r (causal LMs) or [CLS] r r [SEP] (encoders), r uniform over ordinary token ids."""
    vocab = len(tokenizer)
    specials = special_ids(tokenizer)
    low = min(1000, vocab // 10)  # skip the byte/special region at the start of BPE vocabularies
    g = torch.Generator().manual_seed(seed)
    r = torch.randint(low, vocab, (batch, S), generator=g)
    for sid in specials:  # never draw a special token
        r[r == sid] = low
    start = tokenizer.bos_token_id if causal else tokenizer.cls_token_id
    parts = ([torch.full((batch, 1), start)] if start is not None else []) + [r, r]
    if not causal and tokenizer.sep_token_id is not None:
        parts.append(torch.full((batch, 1), tokenizer.sep_token_id))
    ids = torch.cat(parts, dim=1)
    return Repeated(ids, torch.ones_like(ids), S, 1 if start is not None else 0, seed)


def repeated_random_ids(vocab: int, S: int, batch: int = DEFAULT_BATCH, seed: int = 0) -> Repeated:
    """r r with r uniform over [0, vocab): the same stimulus for a model with no tokenizer and no
    BOS (learn/'s TinyTransformer)."""
    g = torch.Generator().manual_seed(seed)
    r = torch.randint(0, vocab, (batch, S), generator=g)
    ids = torch.cat([r, r], dim=1)
    return Repeated(ids, torch.ones_like(ids), S, 0, seed)


def repeat_probe(S: int) -> PerLayer:
    """The probe repeated_scores reads: per layer, the diagonals at offsets 1, S and S − 1."""
    return PerLayer(lambda: Diagonals([1, S, S - 1]))


def diagonal_scores(diag: PerLayer, stim: Repeated, n_layers: int, n_heads: int, layers=None) -> dict:
    """prev_token, duplicate, induction [L, H] from a PerLayer(Diagonals([1, S, S − 1])) that read
    ``stim`` (shared by read/ on real models and learn/ on TinyTransformer). ``layers``: the layers whose
    rows are tokens of ``stim`` (default: all); every other layer's scores are NaN, not read."""
    S, P = stim.S, stim.prefix
    first = torch.arange(P + 1, P + 2 * S)  # every row with a previous token inside the repeats
    second = stim.second_rows()
    out = {k: np.full((n_layers, n_heads), np.nan) for k in ("prev_token", "duplicate", "induction")}
    for layer in range(n_layers) if layers is None else layers:
        d = diag[layer]
        out["prev_token"][layer] = d.rows(1)[:, :, first].mean((0, 2)).numpy()
        out["duplicate"][layer] = d.rows(S)[:, :, second].mean((0, 2)).numpy()
        out["induction"][layer] = d.rows(S - 1)[:, :, second].mean((0, 2)).numpy()
    return out


__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_LEN",
    "Repeated",
    "diagonal_scores",
    "repeat_probe",
    "repeated_random_ids",
    "repeated_random_tokens",
    "special_ids",
]
