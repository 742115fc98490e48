"""A transformers model directory (config.json + safetensors), read with every check first; and its tokenizer,
read once per process while its files are unchanged."""

from __future__ import annotations

import functools
from pathlib import Path

from .discovery import model_kind
from .loaded import ModelLoadError
from .placement import Placement
from .safety import (
    PICKLE_SUFFIXES,
    _pickle_refusal,
    check_safetensors,
    check_size,
    not_an_interrupt,
    refuse_partial_weights,
    regular_file,
)

DEFAULT = Placement()


def _load_dir(path: Path, say, place: Placement = DEFAULT, tokenizer_from: Path | None = None):
    """``tokenizer_from``: the directory whose tokenizer to share (a cache's bf16 entry shares its float32 one's)."""
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    if not (path / "config.json").exists():
        raise ModelLoadError(f"{path} is not a model directory: it has no config.json")
    safes = list(path.glob("*.safetensors"))
    if not safes:
        pickles = [p for p in path.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES]
        if pickles:
            raise ModelLoadError(_pickle_refusal(pickles[0]))
        raise ModelLoadError(f"{path} has a config.json but no .safetensors weights")
    for f in [path / "config.json", *safes]:
        regular_file(f)
    tensors = {name: n for f in safes for name, n in check_safetensors(f).items()}
    say(f"loading {path.name}")
    config = _config(path)
    place = place.resolved(config)  # auto: the dtype the checkpoint stores
    # before anything is built: a config can ask for 100,000 layers
    check_size(path, config, tensors, place.dtype, place.host_only)
    kind = model_kind(config)
    cls = {"causal": AutoModelForCausalLM, "seq2seq": AutoModelForSeq2SeqLM, "encoder": AutoModel}[kind]
    if config.model_type == "whisper":
        from transformers import AutoModelForSpeechSeq2Seq as cls
    try:
        kwargs = place.pretrained()  # straight into the dtype, onto the device or over the map: no CPU copy
        model, info = cls.from_pretrained(
            path, use_safetensors=True, trust_remote_code=False, output_loading_info=True, **kwargs
        )
        model = place.placed(model, kwargs)
        tokenizer = directory_tokenizer(tokenizer_from or path)
    except Exception as e:  # noqa: BLE001  (transformers raises many kinds for a bad directory; each is a refusal)
        not_an_interrupt()
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelLoadError(f"transformers could not load {path}: {type(e).__name__}: {first[:200]}") from None
    refuse_partial_weights(path, info)
    return model.eval(), tokenizer, kind


def _config(path: Path):
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001  (transformers raises many kinds for a bad config)
        not_an_interrupt()
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelLoadError(
            f"transformers could not read {path}/config.json: {type(e).__name__}: {first[:200]}"
        ) from None


def directory_tokenizer(path: Path):
    """A model directory's tokenizer, read once per process while its files are unchanged: the checks before
    the weights load (model_facts) and the load itself share it. Gemma 3's 262k-token tokenizer takes ~5 s to
    read, and every Gemma command read it twice (measured: load 6.2 s, of which the tokenizer 5.4 s). The
    object is shared by every load of the directory; attnroute sets nothing on it (a fast tokenizer sets its
    padding and truncation per call)."""
    files = sorted(p for p in Path(path).iterdir() if p.is_file() and p.suffix in (".json", ".model", ".txt"))
    stamp = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)  # edited files: read again
    return _directory_tokenizer(str(path), stamp)


@functools.lru_cache(maxsize=8)
def _directory_tokenizer(path: str, stamp: tuple):
    return read_tokenizer(path)


def read_tokenizer(*args, **kwargs):
    """AutoTokenizer.from_pretrained for every tokenizer attnroute reads itself (a directory's, a GGUF's, one found
    from a model's name_or_path): no remote code, and the copies below shed."""
    from transformers import AutoTokenizer

    return shed_build_copies(AutoTokenizer.from_pretrained(*args, trust_remote_code=False, **kwargs))


def shed_build_copies(tokenizer):
    """The tokenizer without the Python copies of its vocabulary and merges that transformers' BPE classes (Gemma,
    Llama, GPT-2) keep after building their Rust backend from them, and never read again: Gemma 3's are 262,144
    strings and 514,906 pairs, 0.13 GiB of this process (measured) for nothing. A later reader of them fails
    loudly (AttributeError), never on an empty copy. Only a tokenizer attnroute read itself is changed."""
    if getattr(tokenizer, "_tokenizer", None) is not None:  # the Rust backend encodes and decodes alone
        for name in ("_vocab", "_merges"):
            if isinstance(getattr(tokenizer, name, None), (dict, list)):
                delattr(tokenizer, name)
    return tokenizer
