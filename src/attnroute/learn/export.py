"""A trained TinyTransformer saved where `--model` reads it: a transformers directory, checked.

The learn models are attention-only, pre-LN, with rotary positions — what transformers' Starcoder2 computes
when its MLPs are zero: LayerNorm before the attention, q/k/v/o projections (their biases zero), rotary
q and k (half-split pairs, base 10,000), 1/√d scaling, a final LayerNorm and an untied unembedding. The
weights are copied into that architecture and the tokenizer is a word-level one over the model's alphabet
("t0" … "t63", no BOS: the model never saw one). The saved model is then loaded the way a user's would be
and its logits compared with the TinyTransformer's on a batch of the task: a copy that differs is refused,
never written as if it were the model.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import InputError

TOL = 1e-4


def token(i: int) -> str:
    return f"t{i}"


def save_hf(model, path: Path, check_ids: torch.Tensor) -> Path:
    """Write ``model`` (a rotary TinyTransformer) to ``path`` and check it against ``check_ids`` [B, T]."""
    from transformers import Starcoder2Config, Starcoder2ForCausalLM

    cfg = model.cfg
    if cfg.positions != "rope" or cfg.d_ff or not cfg.scaled:
        raise InputError(
            "only an attention-only, scaled model with rotary positions is saved for --model (this one has "
            f"positions={cfg.positions}, d_ff={cfg.d_ff}, scaled={cfg.scaled})",
            field="out",
        )
    hf_cfg = Starcoder2Config(
        vocab_size=cfg.vocab,
        hidden_size=cfg.d_model,
        intermediate_size=4,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads or cfg.n_heads,
        head_dim=cfg.d_head,
        max_position_embeddings=cfg.max_len,
        rope_theta=10000.0,
        norm_epsilon=model.norm.eps,
        use_bias=True,
        sliding_window=None,
        tie_word_embeddings=False,
        residual_dropout=0.0,
        embedding_dropout=0.0,
        attention_dropout=0.0,
        bos_token_id=None,
        eos_token_id=None,
    )
    hf = Starcoder2ForCausalLM(hf_cfg).eval()
    hf.load_state_dict(_weights(model, hf), strict=True)
    path.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(path, safe_serialization=True)
    _tokenizer(cfg.vocab).save_pretrained(path)
    _check(model, path, check_ids)
    return path


def _weights(model, hf) -> dict[str, torch.Tensor]:
    """Starcoder2's state dict from the TinyTransformer's; every bias and MLP weight zero, every norm copied."""
    out = {k: torch.zeros_like(v) for k, v in hf.state_dict().items()}
    out["model.embed_tokens.weight"] = model.embed.weight
    out["model.norm.weight"], out["model.norm.bias"] = model.norm.weight, model.norm.bias
    out["lm_head.weight"] = model.unembed.weight
    for i, b in enumerate(model.blocks):
        at = f"model.layers.{i}."
        out[at + "input_layernorm.weight"], out[at + "input_layernorm.bias"] = b.norm1.weight, b.norm1.bias
        out[at + "post_attention_layernorm.weight"] = torch.ones_like(out[at + "post_attention_layernorm.weight"])
        for p in ("q", "k", "v", "o"):
            out[at + f"self_attn.{p}_proj.weight"] = getattr(b.attn, f"{p}_proj").weight
    return {k: v.detach().clone() for k, v in out.items()}


def _tokenizer(vocab: int):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({token(i): i for i in range(vocab)}, unk_token=token(0)))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


@torch.no_grad()
def _check(model, path: Path, ids: torch.Tensor) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer  # as any reader of the folder loads it

    saved = AutoModelForCausalLM.from_pretrained(str(path), torch_dtype="auto").eval()
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    want = model(ids, impl="eager")
    got = saved(input_ids=ids).logits
    gap = float((got - want).abs().max())
    if gap > TOL * max(1.0, float(want.abs().max())):
        msg = f"the saved model's logits differ from the trained model's by {gap:.3g}: not saved"
        raise InputError(msg, field="out")
    text = " ".join(token(int(i)) for i in ids[0])
    if tokenizer(text, add_special_tokens=True)["input_ids"] != ids[0].tolist():
        raise InputError("the saved tokenizer does not give back the model's token ids: not saved", field="out")


__all__ = ["save_hf", "token"]
