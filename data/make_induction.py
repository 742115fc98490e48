"""Writes src/attnroute/data/induction.jsonl: 20 prompt pairs of repeated random words, for induction heads.

    python data/make_induction.py

clean    " w1 … w10 w1 … w6"   (ten random words, then the first six again): the next word is w7
corrupt  " u1 … u10 w1 … w6"   (the first half other random words): nothing earlier says what follows w6
answer   " w7", wrong " u7"    (what an induction head would copy on each side)

Words come from a list of common nouns below, kept where they are one token with their leading space in
SmolLM2's tokenizer (so clean and corrupt have the same length). Seeded: the same file on every machine.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from attnroute.models import model_facts

OUT = Path(__file__).resolve().parents[1] / "src" / "attnroute" / "data" / "induction.jsonl"
N, HALF, SHOWN = 20, 10, 6


NOUNS = """
apple arm baby bag ball bank bed bell bird boat body bone book boot bottle box boy bread bridge brother
brush bucket cake camera car card carpet cat chain chair cheese chicken church circle clock cloud coat
coffee coin cow cup curtain dog door dress drum ear egg engine eye face farm feather finger fish flag
floor flower fly foot fork fruit garden girl glass glove goat gold hair hammer hand hat head heart horse
hospital house island jacket jewel key king kitten knee knife lamp leaf leg library lion lock map milk
monkey moon mountain mouth nail neck needle nest night nose nut ocean office orange oven owl page pan
paper park pen pencil piano picture pig pin pipe plane plate pocket potato prison queen rabbit rain ring
river road rock roof room root rope salt school scissors sea seed sheep shelf ship shirt shoe sister skin
sky snake snow sock soup spoon square stamp star station stone street sun table tail teacher tent thread
throat thumb ticket tiger toe tongue tooth towel town toy train tree truck umbrella village wall watch
water wheel whistle window wing wire wolf woman worm
""".split()


def words(tokenizer) -> list[str]:
    """The nouns that are one token with a leading space."""
    return [f" {w}" for w in NOUNS if len(tokenizer(f" {w}", add_special_tokens=False)["input_ids"]) == 1]


def main() -> None:
    vocab = words(model_facts("smollm2").tokenizer)
    rng = random.Random(0)
    rows = []
    for _ in range(N):
        drawn = rng.sample(vocab, 2 * HALF)
        w, u = drawn[:HALF], drawn[HALF:]
        rows.append(
            {
                "clean": "".join(w + w[:SHOWN]),
                "corrupt": "".join(u + w[:SHOWN]),
                "answer": w[SHOWN],
                "wrong": u[SHOWN],
            }
        )
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} pairs from {len(vocab)} words -> {OUT}")


if __name__ == "__main__":
    main()
