"""Will it fit? A verb's peak memory predicted from a model's config alone, before any weight loads.

    peak = runtime + weights + working(verb)
    runtime = RUNTIME_BASE + TOKENIZER_PER_VOCAB · V           (on the host: Python, torch, transformers, the tokenizer)
    weights = parameters · bytes of the dtype                  (counted on a meta-device copy of the config's model)
    working = A + (B + C · V) · (bytes of the dtype / 4) + long(T)

V is the vocabulary. A, B and C are each verb's working memory at attnroute's default batching budgets
(read/ground/budget.py): a part no dtype or vocabulary changes, a part held in the model's dtype (activations
kept for a backward or a patch), and a part per vocabulary entry, also in the model's dtype (logits and their
gradients: what is summed in float32 is widened a block at a time, ground/metrics.py, so no whole float32 copy
of them is held). They were measured on SmolLM2-135M and Gemma 3 270M, in float32 and bfloat16, as
whole-command peak RSS (benchmarks/fit.py; its results/fit.json holds each run, and the error of each prediction
made without that run: docs/cost.md). ``long(T)`` is what one sequence longer than the
measured ones needs beyond that working memory, once its own forward and backward outgrow the batches.

These are the host's figures (the machine's RAM); on a GPU the runtime stays on the host and the rest is device
memory. ``make gpu-check`` measures a GPU's peaks; until one has, a GPU prediction is the same formula unverified.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import settings
from .arithmetic import CHUNK

GIB = 2**30
RUNTIME_BASE = int(0.384 * GIB)  # Python + torch + transformers resident, before any model (measured)
TOKENIZER_PER_VOCAB = 1_332  # bytes a fast tokenizer holds per vocabulary entry (SmolLM2 49k, Gemma 3 262k)

# verb -> (A bytes, B bytes at float32, C bytes per vocabulary entry at float32, the tokens of the runs measured):
# benchmarks/fit.py fits A, B and C to each verb's runs (non-negative least squares; results/fit.json, "fitted")
WORKING = {
    "heads": (0, int(1.111 * GIB), 7_205, 25),  # A fits to 0: all of heads' working memory scales with the dtype
    "patch": (int(0.143 * GIB), int(0.940 * GIB), 0, 16),  # C fits to 0: one prompt's logits row at a time
    "circuit": (int(0.048 * GIB), int(2.331 * GIB), 1_579, 16),
    "routes": (int(0.02 * GIB), 0, 0, 16),
    "why": (int(0.05 * GIB), 0, 0, 25),
}
# what the prompt-pair verbs were measured on: their runs grow with the prompt set up to RUN_TOKENS (1,024 tokens
# a run), and the runs kept up to KEEP_BYTES, so a larger set needs more (docs/cost.md, "Other prompt sets")
CALIBRATED_ON = {"patch": "48 prompt pairs of ~16 tokens (IOI)", "circuit": "48 prompt pairs of ~16 tokens (IOI)"}
# each verb's settings (heads -> HeadsSettings), and which compute in float32 whatever the weights' dtype
VERB_SETTINGS = {v: getattr(settings, f"{v.capitalize()}Settings") for v in settings.FIT_VERBS}
FLOAT32_ARITHMETIC = tuple(v for v, cls in VERB_SETTINGS.items() if cls.ARITHMETIC == "float32")
BYTES = {name: getattr(torch, name).itemsize for name in ("float32", "bfloat16", "float16")}


@dataclass(frozen=True)
class Shape:
    """What the formula reads from a config."""

    parameters: int
    vocab: int
    layers: int
    hidden: int
    heads: int

    @classmethod
    def of(cls, config) -> Shape:
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        return cls(
            parameters=count_parameters(config),
            vocab=int(getattr(text, "vocab_size", 0) or 0),
            layers=int(getattr(text, "num_hidden_layers", 0) or getattr(text, "n_layer", 0) or 0),
            hidden=int(getattr(text, "hidden_size", 0) or getattr(text, "n_embd", 0) or 0),
            heads=int(getattr(text, "num_attention_heads", 0) or getattr(text, "n_head", 0) or 0),
        )


def count_parameters(config) -> int:
    """The parameters the config's model holds (tied weights once), counted on the meta device: no memory."""
    from transformers import AutoModel, AutoModelForCausalLM

    from .discovery import model_kind

    cls = AutoModelForCausalLM if model_kind(config) == "causal" else AutoModel
    with torch.device("meta"):
        model = cls.from_config(config, trust_remote_code=False)
    return sum(p.numel() for p in model.parameters())


def predict(shape: Shape, verb: str, dtype: str = "float32", tokens: int | None = None, host: bool = True) -> dict:
    """The predicted peak in bytes and its parts. ``host``: the runtime counts (False: a GPU's memory)."""
    measured = WORKING[verb][3]
    size = BYTES[dtype]
    weights = shape.parameters * size
    runtime = RUNTIME_BASE + TOKENIZER_PER_VOCAB * shape.vocab if host else 0
    working = batched(shape, verb, size) + long_sequence(shape, verb, size, tokens or measured, measured)
    working += cast_while_running(shape, verb, size)
    return {"runtime": runtime, "weights": weights, "working": working, "peak": runtime + weights + working}


def batched(shape: Shape, verb: str, size: int) -> int:
    """The verb's working memory at its batching budgets (A, B and C above), for weights of ``size`` bytes."""
    a, b, c, _ = WORKING[verb]
    return a + (b + c * shape.vocab) * size // 4


def cast_while_running(shape: Shape, verb: str, size: int) -> int:
    """A verb that computes in float32 from bf16 or fp16 weights (routes; models/arithmetic.py) holds a float32
    copy of the weights that run: the largest is the output head's, cast CHUNK weights at a time (64 MB)."""
    return 4 * min(shape.vocab * shape.hidden, CHUNK) if verb in FLOAT32_ARITHMETIC and size < 4 else 0


def long_sequence(shape: Shape, verb: str, size: int, tokens: int, measured: int) -> int:
    """What a sequence of ``tokens`` adds to the working memory measured at ``measured`` tokens. The batching
    budgets hold the working memory flat as sequences grow (fewer copies, fewer rows a batch: measured, heads on
    SmolLM2 in float32 peaked at 2.44, 2.42 and 2.42 GiB at 25, 512 and 1,024 tokens) until one sequence's own
    forward and backward outgrows it: every layer's activations (about 16 hidden-size vectors a token, in the
    dtype), one layer's attention weights and the logits with their gradient, in the dtype (the loss keeps no
    log-softmax: it is read a block at a time, read/ground/metrics.token_loss)."""
    if verb in ("routes", "why") or tokens <= measured:
        return 0
    single = 16 * shape.layers * shape.hidden * size * tokens + 4 * shape.heads * tokens * tokens
    single += 2 * size * shape.vocab * tokens
    return max(0, single - batched(shape, verb, size))


def gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


__all__ = [
    "BYTES",
    "CALIBRATED_ON",
    "FLOAT32_ARITHMETIC",
    "GIB",
    "VERB_SETTINGS",
    "WORKING",
    "Shape",
    "count_parameters",
    "gib",
    "predict",
]
