"""The type every verb reads: a model, its tokenizer, and where its attention lives (LoadedModel); and the
refusal of a model that cannot be read (ModelLoadError, an InputError naming `model`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..errors import InputError
from .gradient_layout import column_major_gradients, needs_layout


def held_dtypes(model: torch.nn.Module) -> list[torch.dtype]:
    """The floating-point dtypes a model's parameters are held in (one, unless the model mixes them)."""
    return sorted({p.dtype for p in model.parameters() if p.is_floating_point()}, key=str)


def dtype_names(model: torch.nn.Module) -> list[str]:
    """held_dtypes as the messages and names say them: 'bfloat16', 'float32'."""
    return [str(d).removeprefix("torch.") for d in held_dtypes(model)]


class ModelLoadError(InputError):
    """A model name or path that cannot be loaded; the message says why and what to do."""

    def __init__(self, message: str, *, field: str = "model"):
        super().__init__(message, field=field)


@dataclass(repr=False)
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    name: str
    kind: str  # "causal" (next-token loss), "encoder" (sentence-embedding effect) or "seq2seq"
    attention_modules: list = field(default_factory=list)  # one per attention layer: encoder, decoder-self, cross
    out_projections: list = field(default_factory=list)  # per layer: the Linear after the heads (or None)
    attention_kinds: list = field(default_factory=list)  # per layer: "self", "decoder-self" or "cross"
    view: Callable | None = None  # what a verb enters while it reads the model (a PEFT model's merged adapters)
    computes_in: torch.dtype | None = None  # set while a verb reads a bf16 model in float32 (models/arithmetic.py)

    def __repr__(self) -> str:  # one line, never the module tree (that is .model)
        return (
            f"<LoadedModel {self.name}: {self.kind}, {self.n_layers} layers × {self.n_heads} heads "
            f"({self.n_kv_heads} kv), {self.max_positions or 'unbounded'} positions>"
        )

    @contextlib.contextmanager
    def reading(self):
        """The context a verb reads the model in (read/study.Study enters it): the model as attnroute reads it
        inside, as the user left it outside — for a PEFT model, its adapters merged (adapters.py); a bf16 or
        fp16 model on the CPU, its Linears' input gradients column-major (gradient_layout.py)."""
        with contextlib.ExitStack() as stack:
            if self.view is not None:
                stack.enter_context(self.view())
            if needs_layout(self.model):
                stack.enter_context(column_major_gradients(self.model))
            yield

    @property
    def dtype(self) -> torch.dtype:
        """What the model computes in: its floating-point parameters' dtype (the least precise when they differ),
        or the dtype a verb reads it in (``computes_in``: float32 arithmetic on bf16 weights)."""
        if self.computes_in is not None:
            return self.computes_in
        return max(held_dtypes(self.model) or [torch.float32], key=lambda d: torch.finfo(d).eps)

    @property
    def causal(self) -> bool:
        return self.kind == "causal"

    @property
    def seq2seq(self) -> bool:
        return self.kind == "seq2seq"

    @property
    def audio(self) -> bool:
        """The encoder reads log-mel features (Whisper), not tokens: the text is the decoder's."""
        return getattr(self.model, "main_input_name", "input_ids") == "input_features"

    def mode(self, layer: int) -> str:
        """The attention mode of ``layer``: encoder (bidirectional self), decoder (causal self) or cross."""
        kind = self.attention_kinds[layer] if self.attention_kinds else "self"
        if kind == "self":
            return "decoder" if self.causal else "encoder"
        return {"decoder-self": "decoder", "cross": "cross"}[kind]

    def stream_layer(self, layer: int) -> int:
        """The index of ``layer`` among the layers of its own attention kind (encoder layer 0, cross layer 0 …)."""
        return self.attention_kinds[:layer].count(self.attention_kinds[layer])

    @property
    def n_layers(self) -> int:
        return len(self.attention_modules)

    @property
    def n_heads(self) -> int:
        heads = {
            int(getattr(m, "num_heads", 0) or self.model.config.num_attention_heads) for m in self.attention_modules
        }
        return heads.pop() if len(heads) == 1 else int(self.model.config.num_attention_heads)

    @property
    def n_kv_heads(self) -> int:
        return int(getattr(self.model.config, "num_key_value_heads", None) or self.n_heads)

    def fit(self, n: int, field: str, what: str) -> int:
        """``n`` tokens, refused when they exceed the model's positions (a learned position table would
        raise an IndexError mid-forward; a rotary model would read past its training). The one check and
        message of every verb: ``what`` names the tokens, ``field`` the setting that decides them."""
        limit = self.max_positions
        if limit and n > limit:
            raise InputError(
                f"{what} ({n} tokens) is longer than the model's {limit} positions; `{field}` must fit in {limit}",
                field=field,
            )
        return n

    @property
    def max_positions(self) -> int:
        """Tokens the model can take: its position table's size less any offset the table reserves
        (RoBERTa-style learned positions start at padding_idx + 1, so 514 entries hold 512 tokens)."""
        cfg = self.model.config  # Whisper: the decoder's table (the encoder always takes 1,500 frames)
        n = int(getattr(cfg, "max_position_embeddings", 0) or getattr(cfg, "max_target_positions", 0) or 0)
        for name, module in self.model.named_modules():
            if name.endswith("position_embeddings") and isinstance(module, torch.nn.Embedding):
                if module.padding_idx is not None:
                    n = min(n, module.num_embeddings - (module.padding_idx + 1)) if n else 0
                break
        return n
