"""Texts as token ids: what the model reads (the repeated-token stimulus lives in engine/repeats.py)."""

from __future__ import annotations

import torch


def encode_text(tokenizer, text: str, max_tokens: int | None, add_bos: bool = True):
    """Token ids [1, T] and what was cut. Causal LMs get BOS prepended (Llama-style) when the
    tokenizer does not add one itself."""
    enc = tokenizer(text, return_tensors="pt", add_special_tokens=True)
    ids = enc.input_ids
    bos = tokenizer.bos_token_id
    if add_bos and bos is not None and (ids.shape[1] == 0 or int(ids[0, 0]) != bos) and tokenizer.cls_token_id is None:
        ids = torch.cat([torch.tensor([[bos]]), ids], dim=1)
    cut = 0
    if max_tokens is not None and ids.shape[1] > max_tokens:
        cut = ids.shape[1] - max_tokens
        ids = ids[:, :max_tokens]
    return ids, cut


def tokens_of(tokenizer, ids) -> list[str]:
    """Each token as text (' Mary', not the BPE spelling 'ĠMary'); special tokens such as the BOS by name."""
    return [tokenizer.decode([int(i)]) for i in ids]


def tokens(model, text: str) -> list[str]:
    """The tokens every attnroute verb runs for ``text`` (the BOS it prepends included), as the command line
    prints them. ``model``: anything the model door takes (models.door; a name or path: only its tokenizer is read)."""
    from ..models import facts_of, load

    facts = facts_of(model)  # only the tokenizer is read for a name, when it can be
    if facts is None:
        loaded = load(model)
        tokenizer, kind = loaded.tokenizer, loaded.kind
    else:
        tokenizer, kind = facts.tokenizer, facts.kind
    ids, _ = encode_text(tokenizer, text, None, add_bos=kind == "causal")
    return tokens_of(tokenizer, ids[0])


__all__ = ["encode_text", "tokens", "tokens_of"]
