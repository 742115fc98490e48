"""What is known of a model before its weights load — its tokenizer, its kind, its config — so prompts,
answers and flags are checked first (model_facts), read once per process."""

from __future__ import annotations

import functools
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..bundled import MODELS, model_path
from ..errors import InputError
from .caches import ct2_cache, gguf_cache, is_ct2, one_gguf_parse
from .directory import directory_tokenizer, read_tokenizer
from .discovery import model_kind
from .sources import quiet_transformers


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

    @property
    def audio(self) -> bool | None:
        """Whether the model hears log-mel features (Whisper), as LoadedModel.audio says after the load: its
        transformers class's main input, read from the class the config maps to (nothing is built). None when
        no class is known for the config: a refusal before the load takes only True or False."""
        if self.config is None:
            return None
        try:
            from transformers.models.auto.modeling_auto import MODEL_MAPPING

            return MODEL_MAPPING[type(self.config)].main_input_name == "input_features"
        except Exception:  # noqa: BLE001  (a config transformers maps to no model: the load says what it is)
            return None


def model_facts(name_or_path: str) -> Facts | None:
    """Facts of a model by name or path, read once per process (a tokenizer takes ~0.4 s to load); None
    when the name needs load()'s own checks first (load then refuses it properly)."""
    try:
        path = model_path(name_or_path) if name_or_path in MODELS else Path(name_or_path)
        st = os.stat(path)
    except (OSError, InputError):
        return None  # not there: load() says why
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return None  # a device or a pipe is never hashed or opened here: load() refuses it by name
    return _facts(name_or_path, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _facts(name_or_path: str, stamp: int) -> Facts | None:
    from transformers import AutoConfig

    quiet_transformers()
    try:
        path = model_path(name_or_path) if name_or_path in MODELS else Path(name_or_path)
        if path.suffix.lower() == ".gguf":
            target = gguf_cache(path)
            if (target / "attnroute-complete").exists():
                config = AutoConfig.from_pretrained(target, trust_remote_code=False)
                return Facts(directory_tokenizer(target), "causal", config)
            with one_gguf_parse():  # the tokenizer and the config from one parse of the file: 8 s, not 16 (SmolLM2)
                tokenizer = read_tokenizer(path.parent, gguf_file=path.name)
                config = AutoConfig.from_pretrained(path.parent, gguf_file=path.name, trust_remote_code=False)
            return Facts(tokenizer, "causal", config)
        if is_ct2(path):
            return _ct2_facts(path)
        if not (path / "config.json").is_file():
            return None
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
        return Facts(directory_tokenizer(path), model_kind(config), config)
    except Exception:  # noqa: BLE001  (any problem here is load()'s to name, with its own message)
        return None


def _ct2_facts(path: Path) -> Facts:
    """A CTranslate2 Whisper folder (whisper-tiny): its converted cache entry's config and tokenizer once it
    has one, else the config its file describes (a read of its tensors' shapes, 0.3 s) and its tokenizer."""
    from transformers import AutoConfig

    from .whisper import read_folder

    folder = path.parent if path.is_file() else path
    target = ct2_cache(folder)
    if (target / "attnroute-complete").exists():
        return Facts(directory_tokenizer(target), "seq2seq", AutoConfig.from_pretrained(target))
    _, tokenizer, config = read_folder(folder)
    return Facts(tokenizer, "seq2seq", config)


def facts_of(model, tokenizer=None) -> Facts | None:
    """Facts of whatever a verb was given: a name or path (model_facts, before the weights load), or what is
    already in memory — a LoadedModel or a transformers object whose tokenizer can be found. None when load()
    must say why first. The one pre-load check every verb makes, whatever it was given."""
    from .door import is_loaded_or_object, load

    if isinstance(model, str | os.PathLike):
        return None if tokenizer is not None else model_facts(os.fspath(model))  # load() refuses the pair
    if not is_loaded_or_object(model):
        return None  # load() refuses it by name
    try:
        loaded = load(model, tokenizer=tokenizer)
    except InputError:
        return None  # load() refuses it again, at its own turn
    return Facts(loaded.tokenizer, loaded.kind, loaded.model.config)


def config_of(name_or_path: str):
    """A model's config without its weights, or None: the facts' (a GGUF's is its cache's once it has been
    loaded, before that its own metadata, read with its tokenizer)."""
    facts = facts_of(name_or_path)
    return None if facts is None else facts.config


def load_tokenizer(name_or_path: str):
    """(tokenizer, kind) without the weights (facts_of), or None."""
    facts = facts_of(name_or_path)
    return None if facts is None else (facts.tokenizer, facts.kind)
