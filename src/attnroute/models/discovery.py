"""Architecture discovery: a model's kind from transformers' own registries, its attention modules by stream,
the projection after its heads, and the LoadedModel built from them (finish)."""

from __future__ import annotations

import torch

from .loaded import LoadedModel, ModelLoadError, dtype_names

NON_TEXT = {  # transformers registries of models whose input is not text -> what they take
    "MODEL_FOR_IMAGE_MAPPING_NAMES": "images",
    "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES": "images",
    "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES": "audio",
    "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES": "audio",
    "MODEL_FOR_CTC_MAPPING_NAMES": "audio",
    "MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES": "video",
}


def model_kind(config) -> str:
    """causal / encoder / seq2seq from transformers' own registries (never from a class-name suffix:
    GPT2LMHeadModel is a causal LM). Non-text models are refused in one line."""
    from transformers.models.auto import modeling_auto as auto

    mt = config.model_type
    if mt == "whisper":  # speech in, text out: read with audio input (attnroute.audio)
        return "seq2seq"
    for registry, takes in NON_TEXT.items():
        if mt in getattr(auto, registry, {}):
            raise ModelLoadError(
                f"{mt} takes {takes}; attnroute reads text models (causal LMs, encoders, encoder-decoders)"
            )
    if getattr(config, "is_encoder_decoder", False) and mt in auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return "seq2seq"
    if mt in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(config, "is_decoder", False):
        return "encoder"
    if mt in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return "causal"
    if mt in getattr(auto, "MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES", {}):
        return "encoder"
    raise ModelLoadError(
        f"{mt} is not in transformers' causal-LM, masked-LM or seq2seq registries; attnroute reads text models"
    )


WHISPER_TOKENS = ("<|startoftranscript|>", "<|notimestamps|>", "<|endoftext|>")


def _speech_tokenizer(model, tokenizer) -> None:
    """A Whisper is read with Whisper's decoder prompt: a tokenizer without its special tokens is refused."""
    if model.config.model_type != "whisper":
        return
    vocab = tokenizer.get_vocab()  # (not the unknown-token id: Whisper's <|endoftext|> is its unk token too)
    missing = [t for t in WHISPER_TOKENS if t not in vocab]
    if missing:
        raise ModelLoadError(
            f"this Whisper's tokenizer has no {', '.join(missing)}: attnroute builds Whisper's decoder prompt "
            "from them; give the model's own tokenizer files"
        )


def _finish(loaded, name: str) -> LoadedModel:
    model, tokenizer, kind = loaded
    _speech_tokenizer(model, tokenizer)
    found = attention_modules(model, kind)
    if not found:
        alibi = "alibi" in model.config.to_dict() or model.config.model_type in ("bloom", "mpt")
        why = "it computes ALiBi attention itself, " if alibi else ""
        raise ModelLoadError(
            f"{type(model).__name__} does not call transformers' AttentionInterface ({why}no *Attention module "
            "with a `scaling` attribute); attnroute cannot route it"
        )
    attn = [m for m, _ in found]
    kinds = [k for _, k in found]
    return LoadedModel(
        model, tokenizer, _named(name, model), kind, attn, [out_projection(model, m) for m in attn], kinds
    )


def _named(name: str, model: torch.nn.Module) -> str:
    """The model's name as every result states it: with the dtype it computes in when that is not float32
    ("smollm2 (bfloat16)"), so that a low-precision reading never passes for a float32 one."""
    held = dtype_names(model)
    return name if held in ([], ["float32"]) else f"{name} ({', '.join(held)})"


CROSS_NAMES = ("encoder_attn", "encdecattention", "crossattention", "cross_attn", "encoder_decoder_attention")


def attention_modules(model: torch.nn.Module, kind: str = "causal") -> list[tuple[torch.nn.Module, str]]:
    """(module, attention kind) for every attention layer: classes named *Attention carrying `scaling`
    (what transformers' attention-interface models set before calling the interface). Encoder-decoders
    are ordered by stream — encoder self-attention, decoder self-attention, cross-attention — each in
    layer order; a decoder-only or encoder model's layers are all "self"."""
    found = {k: [] for k in ("self", "decoder-self", "cross")}
    for path, module in model.named_modules():
        name = type(module).__name__
        if not (name.endswith("Attention") and hasattr(module, "scaling")):
            continue
        parts = path.lower().split(".")
        if kind != "seq2seq":
            if "Cross" not in name and not any(p in CROSS_NAMES for p in parts):
                found["self"].append(module)
            continue
        if "decoder" not in parts:
            found["self"].append(module)
        elif "Cross" in name or any(p in CROSS_NAMES for p in parts):
            found["cross"].append(module)
        else:
            found["decoder-self"].append(module)
    return [(m, k) for k, mods in found.items() for m in mods]


def out_projection(model: torch.nn.Module, attn: torch.nn.Module):
    """The Linear that follows the concatenated heads: o_proj (Llama), output.dense (BERT)."""
    for attr in ("o_proj", "out_proj", "dense"):
        if isinstance(getattr(attn, attr, None), torch.nn.Linear):
            return getattr(attn, attr)
    for _, parent in model.named_modules():
        if any(child is attn for child in parent.children()):
            dense = getattr(getattr(parent, "output", None), "dense", None)
            return dense if isinstance(dense, torch.nn.Linear) else None
    return None
