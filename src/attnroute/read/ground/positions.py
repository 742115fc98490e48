"""Token positions from what a person types: indices ("7", "3,4") or a word of the text.

    positions, matches = resolve_positions(tokenizer, text, ids, "Maya", field="target")

A word matches whole words only (case-sensitive), and every token that overlaps an occurrence is a
position; every occurrence is used and ``matches`` says how many there were (0 for indices), so a
caller can say "'Maya' occurs 2 times: all are used; give indices to pick one". Refusals are one line
naming ``field``: an index outside the text, a word that is not in it. The one resolver of knockout,
patch --positions, why --query/--key and every verb that places a position.
"""

from __future__ import annotations

import re

import torch

from ...errors import InputError

INDICES = re.compile(r"\s*\d+(\s*,\s*\d+)*\s*")


class PositionError(InputError):
    """A position that cannot be placed on the text; the message names the word or index."""


def resolve_positions(tokenizer, text: str, ids: torch.Tensor, spec: str, field: str) -> tuple[list[int], int]:
    """(sorted positions in ids [1, T], how many times the word occurs; 0 for indices)."""
    T = ids.shape[1]
    if INDICES.fullmatch(spec):
        idx = [int(x) for x in spec.split(",")]
        bad = [i for i in idx if not 0 <= i < T]
        if bad:
            raise PositionError(f"{field}: position {bad[0]} is outside the {T} tokens of the text", field=field)
        return sorted(set(idx)), 0
    spans = [m.span() for m in re.finditer(rf"(?<!\w){re.escape(spec.strip())}(?!\w)", text)]
    if not spans:
        raise PositionError(
            f"{field} {spec!r} is not a word of the text; give a word of it or token indices", field=field
        )
    enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=True)
    shift = T - len(enc["input_ids"])  # a BOS encode_text prepended itself
    found = {
        i + shift for i, (a, b) in enumerate(enc["offset_mapping"]) if b > a and any(a < e and s < b for s, e in spans)
    }
    return sorted(p for p in found if 0 <= p < T), len(spans)


def said(spec: str, found: list[int], matches: int) -> dict:
    """What a position spec resolved to, as the JSON and the terminal say it."""
    line = f"{spec!r} resolved to positions {found}"
    if matches > 1:
        line += f" ({spec!r} occurs {matches} times: all are used; give indices to pick one)"
    return {"spec": spec, "positions": found, "matches": matches, "said": line}


__all__ = ["PositionError", "resolve_positions", "said"]
