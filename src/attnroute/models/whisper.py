"""Whisper from a CTranslate2 folder (``model.bin``, ``tokenizer.json``, ``config.json``) as transformers'
WhisperForConditionalGeneration: the fp16 weights OpenAI released, mapped one to one (no loss), checked
against the file's own metadata, and cached as safetensors (models.write_cache) like a GGUF model.

CTranslate2 → transformers (per layer N; the decoder alike, plus its cross-attention):

    encoder/conv{1,2}/{weight,bias}                      model.encoder.conv{1,2}
    encoder/position_encodings/encodings [1500, d]        model.encoder.embed_positions.weight
    …/layer_N/self_attention/linear_0 [3d, d]             self_attn.{q,k,v}_proj  (fused, split in three)
    …/layer_N/self_attention/linear_1                     self_attn.out_proj
    …/layer_N/self_attention/layer_norm/{gamma,beta}      self_attn_layer_norm.{weight,bias}
    …/layer_N/ffn/{layer_norm, linear_0, linear_1}        final_layer_norm, fc1, fc2
    decoder/layer_N/attention/linear_0                    encoder_attn.q_proj
    decoder/layer_N/attention/linear_1 [2d, d]            encoder_attn.{k,v}_proj (fused, split in two)
    decoder/layer_N/attention/linear_2, layer_norm        encoder_attn.out_proj, encoder_attn_layer_norm
    decoder/embeddings/weight (= decoder/projection)       model.decoder.embed_tokens (tied to proj_out)

Whisper's key projections have no bias; CTranslate2 stores a fused bias whose key slice must then be
zero — checked, never assumed (a nonzero slice would be a bias transformers' k_proj cannot hold).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import torch

from .ct2 import CT2Error, CT2Model, read_ct2

SPEC = "WhisperSpec"
FILES = ("model.bin", "tokenizer.json", "config.json")
_LAYER = re.compile(r"^(encoder|decoder)/layer_(\d+)/")


def check_folder(path: Path) -> None:
    """A CTranslate2 Whisper folder has its three files; refused by name otherwise."""
    missing = [f for f in FILES if not (path / f).is_file()]
    if missing:
        raise CT2Error(f"{path}: a CTranslate2 Whisper folder holds {', '.join(FILES)}; missing {', '.join(missing)}")


def _n_layers(ct2: CT2Model, stream: str) -> int:
    found = {int(m.group(2)) for name in ct2.variables if (m := _LAYER.match(name)) and m.group(1) == stream}
    if not found or sorted(found) != list(range(len(found))):
        raise CT2Error(f"the CTranslate2 file's {stream} layers are not numbered 0 … n−1: {sorted(found)}")
    return len(found)


def _scalar(ct2: CT2Model, name: str) -> int:
    return int(ct2.get(name).reshape(()))


def whisper_config(ct2: CT2Model, tokenizer, meta: dict):
    """The WhisperConfig the weights describe: every size read from a tensor's shape or a scalar."""
    from transformers import WhisperConfig

    emb = ct2.get("decoder/embeddings/weight")
    heads = _scalar(ct2, "encoder/num_heads")
    if heads != _scalar(ct2, "decoder/num_heads"):
        raise CT2Error("the CTranslate2 file gives the encoder and the decoder different head counts")
    if not _scalar(ct2, "decoder/pre_norm") or _scalar(ct2, "decoder/scale_embeddings"):
        raise CT2Error("the CTranslate2 decoder is not Whisper's (pre-norm, unscaled embeddings)")
    ids = tokenizer.convert_tokens_to_ids
    eot, sot, nots = ids("<|endoftext|>"), ids("<|startoftranscript|>"), ids("<|notimestamps|>")
    return WhisperConfig(
        vocab_size=int(emb.shape[0]),
        num_mel_bins=int(ct2.get("encoder/conv1/weight").shape[1]),
        d_model=int(emb.shape[1]),
        encoder_layers=_n_layers(ct2, "encoder"),
        decoder_layers=_n_layers(ct2, "decoder"),
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=int(ct2.get("encoder/layer_0/ffn/linear_0/weight").shape[0]),
        decoder_ffn_dim=int(ct2.get("decoder/layer_0/ffn/linear_0/weight").shape[0]),
        max_source_positions=int(ct2.get("encoder/position_encodings/encodings").shape[0]),
        max_target_positions=int(ct2.get("decoder/position_encodings/encodings").shape[0]),
        decoder_start_token_id=sot,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        suppress_tokens=[int(t) for t in meta.get("suppress_ids", [])],  # what greedy decoding never emits
        begin_suppress_tokens=[int(t) for t in meta.get("suppress_ids_begin", [])],  # … as its first token
        tie_word_embeddings=True,
        alignment_heads=[list(map(int, h)) for h in meta.get("alignment_heads", [])],  # OpenAI's (read/audio)
        no_timestamps_token_id=nots,
        architectures=["WhisperForConditionalGeneration"],
    )


def _linear(out: dict, prefix: str, ct2: CT2Model, name: str) -> None:
    out[f"{prefix}.weight"] = ct2.get(f"{name}/weight")
    out[f"{prefix}.bias"] = ct2.get(f"{name}/bias")


def _norm(out: dict, prefix: str, ct2: CT2Model, name: str) -> None:
    out[f"{prefix}.weight"] = ct2.get(f"{name}/gamma")
    out[f"{prefix}.bias"] = ct2.get(f"{name}/beta")


def _split(out: dict, prefixes: list[str], ct2: CT2Model, name: str, keyless: int | None) -> None:
    """A fused projection split along its output axis; ``keyless``: the part that has no bias (the key)."""
    w, b = ct2.get(f"{name}/weight"), ct2.get(f"{name}/bias")
    n = len(prefixes)
    for i, (pw, pb) in enumerate(zip(np.split(w, n, 0), np.split(b, n, 0))):
        out[f"{prefixes[i]}.weight"] = pw
        if i != keyless:
            out[f"{prefixes[i]}.bias"] = pb
        elif np.any(pb != 0):
            raise CT2Error(f"{name}: the key slice of the fused bias is not zero; Whisper's keys have no bias")


def _layer(out: dict, ct2: CT2Model, stream: str, n: int) -> None:
    src, dst = f"{stream}/layer_{n}", f"model.{stream}.layers.{n}"
    attn = [f"{dst}.self_attn.{p}_proj" for p in "qkv"]
    _split(out, attn, ct2, f"{src}/self_attention/linear_0", keyless=1)
    _linear(out, f"{dst}.self_attn.out_proj", ct2, f"{src}/self_attention/linear_1")
    _norm(out, f"{dst}.self_attn_layer_norm", ct2, f"{src}/self_attention/layer_norm")
    _norm(out, f"{dst}.final_layer_norm", ct2, f"{src}/ffn/layer_norm")
    _linear(out, f"{dst}.fc1", ct2, f"{src}/ffn/linear_0")
    _linear(out, f"{dst}.fc2", ct2, f"{src}/ffn/linear_1")
    if stream == "decoder":
        _linear(out, f"{dst}.encoder_attn.q_proj", ct2, f"{src}/attention/linear_0")
        kv = [f"{dst}.encoder_attn.{p}_proj" for p in "kv"]
        _split(out, kv, ct2, f"{src}/attention/linear_1", keyless=0)
        _linear(out, f"{dst}.encoder_attn.out_proj", ct2, f"{src}/attention/linear_2")
        _norm(out, f"{dst}.encoder_attn_layer_norm", ct2, f"{src}/attention/layer_norm")


def state_dict(ct2: CT2Model, config) -> dict[str, torch.Tensor]:
    """transformers' names for every weight (fp16 as stored; the caller casts)."""
    out: dict[str, np.ndarray] = {}
    for conv in ("conv1", "conv2"):
        _linear(out, f"model.encoder.{conv}", ct2, f"encoder/{conv}")
    out["model.encoder.embed_positions.weight"] = ct2.get("encoder/position_encodings/encodings")
    out["model.decoder.embed_positions.weight"] = ct2.get("decoder/position_encodings/encodings")
    out["model.decoder.embed_tokens.weight"] = ct2.get("decoder/embeddings/weight")
    for stream, n in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        _norm(out, f"model.{stream}.layer_norm", ct2, f"{stream}/layer_norm")
        for i in range(n):
            _layer(out, ct2, stream, i)
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in out.items()}


def read_folder(path: Path):
    """(the CTranslate2 file read, its tokenizer, the WhisperConfig it describes) from a Whisper folder: what
    the facts before a load need (0.3 s for whisper-tiny), and the start of build()."""
    from transformers import WhisperTokenizerFast

    check_folder(path)
    ct2 = read_ct2(path / "model.bin", expect_spec=SPEC)
    try:
        meta = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise CT2Error(f"{path}/config.json: not readable JSON ({e})") from None
    tokenizer = WhisperTokenizerFast(tokenizer_file=str(path / "tokenizer.json"))
    return ct2, tokenizer, whisper_config(ct2, tokenizer, meta)


def build(path: Path):
    """(WhisperForConditionalGeneration in float32, its tokenizer) from a CTranslate2 Whisper folder."""
    from transformers import WhisperForConditionalGeneration

    ct2, tokenizer, config = read_folder(path)
    model = WhisperForConditionalGeneration(config).float()
    weights = {k: v.float() for k, v in state_dict(ct2, config).items()}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if k != "proj_out.weight"]  # tied to the embeddings
    if missing or unexpected:
        raise CT2Error(f"{path}: the weights do not fill Whisper (missing {missing[:3]}, unexpected {unexpected[:3]})")
    model.tie_weights()
    if model.proj_out.weight.data_ptr() != model.model.decoder.embed_tokens.weight.data_ptr():
        raise CT2Error(f"{path}: Whisper's output projection is not tied to its embeddings")
    return model.eval(), tokenizer


__all__ = ["build", "check_folder", "read_folder", "state_dict", "whisper_config"]
