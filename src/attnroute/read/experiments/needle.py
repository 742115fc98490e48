"""Dilution: does a long context dilute or misroute attention? A needle-retrieval probe on a real model.

A key fact ("The secret code is 4729.") is placed at a random depth (seeded) in distractor text of
growing length; the prompt ends with the question ("… The secret code is"). Per length, for the
last query (the one that must retrieve): every head's weight on the needle's answer tokens and its
entropy (fused backend: FusedKeyMass with the needle as a key indicator, FusedRowStats' entropy — no
[T, T] matrix, so 8,192 tokens cost about one SDPA forward), and whether the model still answers
(greedy decoding from the same forward's KV cache contains the code). The retrieval heads are the
``top`` heads with the most weight on the needle at the shortest length; they are followed across
lengths, beside the best head at each length.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ...engine import InputError
from ...engine.fused_probes import FusedKeyMass, FusedRowStats
from ...engine.jsonable import Result
from ...engine.probes import PerLayer
from ...models import LoadedModel
from ...progress import reporter
from ...settings import NeedleSettings, verb
from ..adapter import routed
from ..stimuli import encode_text
from ..study import causal_only
from .common import load_checked

NEEDLE = " The secret code is {code}."
QUESTION = " What is the secret code? The secret code is"
FILLER = (
    "The river bends past the old mill, where the farmers bring their grain each autumn. "
    "Children play by the water while the miller counts the sacks and the wheel turns slowly. "
    "In the evening the lamps are lit along the road and the carts return to the village. "
)


def haystack(loaded: LoadedModel, length: int, code: str, seed: int) -> tuple[torch.Tensor, list[int]]:
    """Token ids [1, ≈ length] with the needle at a random depth, and the positions of the code's tokens."""
    tok = loaded.tokenizer
    filler = tok(FILLER, add_special_tokens=False)["input_ids"]
    needle = tok(NEEDLE.format(code=code), add_special_tokens=False)["input_ids"]
    question = tok(QUESTION, add_special_tokens=False)["input_ids"]
    bos, _ = encode_text(tok, "", None)  # BOS/[CLS] as this model's texts start
    room = length - bos.shape[1] - len(needle) - len(question)
    if room < 8:
        raise InputError(f"length {length} is too short for the needle and the question", field="lengths")
    body = (filler * (room // len(filler) + 1))[:room]
    depth = int(np.random.default_rng(seed).integers(0, room + 1))
    ids = bos[0].tolist() + body[:depth] + needle + body[depth:] + question
    code_ids = tok(" " + code, add_special_tokens=False)["input_ids"]
    start = bos.shape[1] + depth
    code_pos = [
        start + i for i in range(len(needle)) if needle[i : i + len(code_ids)] == code_ids or needle[i] in code_ids
    ]
    return torch.tensor([ids]), sorted(set(code_pos))


ANSWER_TOKENS = 6  # tokens decoded after the question: the code, and a little room


@torch.no_grad()
def probe_length(
    loaded: LoadedModel, ids: torch.Tensor, code_pos: list[int], code: str, answer_tokens: int = ANSWER_TOKENS
):
    """(needle mass [L, H] and entropy [L, H] of the last query, the greedy continuation, answered?)."""
    from transformers import DynamicCache

    T, H = ids.shape[1], loaded.n_heads
    indicator = torch.zeros(1, 1, T, 1)
    indicator[0, 0, code_pos, 0] = 1.0
    rows = PerLayer(lambda: FusedRowStats(entropy=True))
    mass = PerLayer(FusedKeyMass)

    def set_needle(layer, module, q, k, v):
        mass.for_layer(layer).vectors = indicator.to(q.dtype).expand(1, H, T, 1)

    cache = DynamicCache(config=loaded.model.config)
    with routed(loaded, probes=[rows, mass], impl="fused", before_attend=[set_needle]):
        logits = loaded.model(input_ids=ids, attention_mask=torch.ones_like(ids), cache=cache, use_cache=True).logits
    L = loaded.n_layers
    needle_mass = np.stack([mass[layer].rows()[0, :, -1, 0].numpy() for layer in range(L)])  # (L, H)
    entropy = np.stack([rows[layer].get("entropy")[0, :, -1].numpy() for layer in range(L)])
    out = []
    with routed(loaded, impl="auto"):
        for _ in range(answer_tokens):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            out.append(int(nxt))
            logits = loaded.model(input_ids=nxt, cache=cache, use_cache=True).logits
    text = loaded.tokenizer.decode(out)
    return needle_mass, entropy, text, code in text.replace(" ", "")


@verb(NeedleSettings)
def needle(
    model=None, lengths=None, *, settings: NeedleSettings | None = None, progress=None, **fields
) -> NeedleResult:
    """The probe at each length (see the module docstring). The fields are NeedleSettings' (lengths, seed,
    code, top), or pass ``settings``."""
    s = NeedleSettings.of(settings, model, fields, **({} if lengths is None else {"lengths": tuple(lengths)}))
    say = reporter(progress)
    not_one = "the needle probe asks a causal LM to answer; {} is not one"
    loaded = load_checked(s, say, causal_only(lambda name: InputError(not_one.format(name), field="model")))
    per = []
    for n in _lengths(loaded, list(s.lengths), say):
        say("stage", f"needle at {n} tokens")
        ids, pos = haystack(loaded, n, s.code, s.seed)
        m, e, text, ok = probe_length(loaded, ids, pos, s.code)
        per.append(
            {
                "length": int(ids.shape[1]),
                "needle_positions": pos,
                "mass": m,
                "entropy": e,
                "answer": text,
                "answered": bool(ok),
            }
        )
    H = loaded.n_heads
    heads = [(int(i // H), int(i % H)) for i in np.argsort(-per[0]["mass"].ravel())[: s.top]]
    return NeedleResult(loaded.name, s.code, s.seed, heads, [_row(p, heads, H) for p in per])


def _lengths(loaded, lengths: list[int], say) -> list[int]:
    """The context lengths to probe, the longest fitted to the model and cut so the answer still fits."""
    loaded.fit(lengths[-1], "lengths", "the longest context")
    room = (loaded.max_positions or lengths[-1] + ANSWER_TOKENS) - ANSWER_TOKENS  # the answer is decoded after
    if lengths[-1] <= room:
        return lengths
    say("warn", f"contexts cut to {room} tokens so that the {ANSWER_TOKENS}-token answer fits the model's positions")
    return sorted({min(n, room) for n in lengths})


def _row(p: dict, heads: list[tuple[int, int]], H: int) -> dict:
    """One length's row: the answer, each retrieval head's weight on the needle, the best head."""
    best = int(np.argmax(p["mass"].ravel()))
    return {
        "length": p["length"],
        "answered": p["answered"],
        "answer": p["answer"],
        "needle_positions": p["needle_positions"],
        "retrieval_heads": [
            {
                "layer": layer,
                "head": h,
                "needle_weight": float(p["mass"][layer, h]),
                "entropy": float(p["entropy"][layer, h]),
            }
            for layer, h in heads
        ],
        "best_head": {"layer": best // H, "head": best % H, "needle_weight": float(p["mass"].ravel()[best])},
        "mean_needle_weight": float(p["mass"].mean()),
    }


@dataclass(repr=False)
class NeedleResult(Result):
    """Per context length (tokens): whether the model answered, each retrieval head's weight on the needle
    (the last query's row, a share in 0–1) and that row's entropy (nats), and the head with most weight
    on the needle at that length. ``retrieval_heads``: [[layer, head]], chosen at the shortest length."""

    KIND = "needle"
    TABLE = "lengths"  # its table's key before format 1 (an alias of rows until 0.3)

    SCHEMA = {
        "experiment": str,
        "verdict": {"lines": [str]},
        "summary": dict,
        "model": str,
        "retrieval_heads": [[int]],
        "rows": [
            {
                "length": int,
                "answered": bool,
                "answer": str,
                "retrieval_heads": [{"layer": int, "head": int, "needle_weight": float, "entropy": float}],
                "best_head": {"layer": int, "head": int, "needle_weight": float},
            }
        ],
    }

    model: str
    code: str
    seed: int
    retrieval_heads: list[tuple[int, int]]
    lengths: list[dict] = field(default_factory=list)

    def payload(self) -> dict:
        lines = [
            f"{r['length']:,} tokens: {'answered' if r['answered'] else 'missed'}; best head "
            f"L{r['best_head']['layer']}.H{r['best_head']['head']} puts {r['best_head']['needle_weight']:.2f} "
            "on the needle"
            for r in self.lengths
        ]
        return {
            "experiment": "needle",
            "verdict": {"lines": lines},
            "summary": {"lengths": len(self.lengths), "answered": sum(r["answered"] for r in self.lengths)},
            "model": self.model,
            "code": self.code,
            "seed": self.seed,
            "retrieval_heads": self.retrieval_heads,
            "lengths": self.lengths,
        }

    @classmethod
    def from_dict(cls, data: dict) -> NeedleResult:
        out = super().from_dict(data)
        out.retrieval_heads = [tuple(h) for h in out.retrieval_heads]
        return out


__all__ = ["NeedleResult", "haystack", "needle", "probe_length"]
