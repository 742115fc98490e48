"""Converted models kept as safetensors under the cache folder: a GGUF dequantized once (11 s for SmolLM2 on one
core), a CTranslate2 Whisper converted once; keyed by the source's content, written atomically, one converter
at a time. transformers refuses save_pretrained on a GGUF-loaded model ("quantized with gguf … not
serializable"), so the cache is written with safetensors plus the config without its quantization_config."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import torch

from ..bundled import cache_dir
from ..files import umask
from .directory import _load_dir, read_tokenizer
from .loaded import ModelLoadError
from .placement import Placement
from .safety import check_gguf, not_an_interrupt, refuse_partial_weights, regular_file


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


DEFAULT = Placement()


def gguf_cache(gguf: Path) -> Path:
    """The folder a GGUF file's conversion is cached in: its name and the first digits of its bytes' hash."""
    return cache_dir() / f"{Path(gguf).stem}-{content_key(gguf)}"


def ct2_cache(folder: Path) -> Path:
    """The folder a CTranslate2 Whisper's conversion is cached in: keyed by its model.bin's bytes."""
    return cache_dir() / f"whisper-{content_key(Path(folder) / 'model.bin')}"


def _load_gguf_cached(gguf: Path, say, place: Placement = DEFAULT):
    # The cache is keyed by content, so a complete cache entry means these very bytes parsed and
    # converted before: the header check (2-3 s of GGUFReader) is only paid when converting.
    regular_file(gguf)
    target = gguf_cache(gguf)
    if (hit := _in_dtype(target, gguf.name, say, place)) is not None:
        return hit
    check_gguf(gguf)
    from transformers import AutoModelForCausalLM

    with one_converter(target, say):
        if (hit := _from_cache(target, gguf.name, say, place)) is not None:  # converted while this process waited
            return hit
        say(f"dequantizing {gguf.name} (once, then cached: 11 s for SmolLM2, 31 s for Gemma 3 on one core)")
        try:
            with one_gguf_parse():
                model, info = AutoModelForCausalLM.from_pretrained(
                    gguf.parent, gguf_file=gguf.name, dtype=torch.float32, output_loading_info=True
                )
                tokenizer = read_tokenizer(gguf.parent, gguf_file=gguf.name)
        except Exception as e:  # noqa: BLE001  (a malformed GGUF fails in many ways inside transformers)
            not_an_interrupt()
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ModelLoadError(
                f"{gguf}: not a readable GGUF file (transformers could not load it: {first[:200]})"
            ) from None
        refuse_partial_weights(gguf, info)
        write_cache(target, model, tokenizer, say)
    if place.host_only:  # converted in float32 (the cache's), once: then cast (auto: the cache's float32)
        return model.to(place.dtype or torch.float32).eval(), tokenizer, "causal"
    del model  # placed on a device or over a map: loaded from the cache as asked
    return _converted(target, gguf.name, say, place)


def _converted(target: Path, name: str, say, place: Placement, tokenizer_from: Path | None = None):
    """The entry just written, loaded as asked; one that cannot be read back is refused, not retried."""
    hit = _from_cache(target, name, say, place, tokenizer_from)
    if hit is None:
        raise ModelLoadError(f"{name}: converted into {target}, and the cache could not be read back")
    return hit


def _from_cache(target: Path, name: str, say, place: Placement = DEFAULT, tokenizer_from: Path | None = None):
    """(model, tokenizer, kind) from a complete cache entry; None when there is none. A damaged entry is
    removed (and rebuilt by the caller), not reported forever. ``tokenizer_from``: _load_dir's."""
    if not (target / "attnroute-complete").exists():
        return None
    say(f"loading {name} from the safetensors cache {target}")
    try:
        return _load_dir(target, lambda m: None, place, tokenizer_from)
    except ModelLoadError as e:
        not_an_interrupt()  # a Ctrl-C mid-read is not damage
        say(f"the cache {target} could not be read ({e}); rebuilding it")
        shutil.rmtree(target, ignore_errors=True)
        return None


HALF = (torch.bfloat16, torch.float16)


def _in_dtype(target: Path, name: str, say, place: Placement):
    """The cached model read in the dtype asked. A half-precision read comes from its own entry beside the float32
    one (``…-bfloat16``), written once from it: loading the float32 entry into bf16 read every float32 weight on
    the way (SmolLM2's patch peaked at 1.19 GiB during the load, 0.69 GiB after it). The values are the same: the
    float32 entry rounded to the dtype, as a cast rounds it. Its tokenizer is the float32 entry's object, which the
    checks before the load read (Gemma 3's holds 0.3 GiB). None when there is no float32 entry yet."""
    if place.dtype not in HALF:
        return _from_cache(target, name, say, place)
    half = target.with_name(f"{target.name}-{str(place.dtype).removeprefix('torch.')}")
    if (hit := _from_cache(half, name, say, place, target)) is not None:
        return hit
    if not (target / "attnroute-complete").exists():
        return None
    with one_converter(half, say):
        if (hit := _from_cache(half, name, say, place, target)) is not None:  # written while this process waited
            return hit
        full = _from_cache(target, name, say, Placement(dtype=torch.float32))
        if full is None:
            return None
        model, tokenizer, _ = full
        say(f"writing {name} in {place.dtype} beside its float32 cache (once)")
        write_cache(half, model.to(place.dtype), tokenizer, say)
        del model, full
    return _converted(half, name, say, place, target)


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
    call), each of Gemma 3's 262,144 vocabulary strings read one by one. The reader only reads (a read-only
    memory map), so the three share one — and it reads a plain array over the map (_plain_reader). Likewise
    gguf's tensor name map of an architecture: transformers builds it again for every module of the model
    (``from gguf import get_tensor_name_map`` at each call), 313 times for Gemma 3, and only reads it."""
    import gguf

    original, names, readers = gguf.GGUFReader, gguf.get_tensor_name_map, {}
    plain = _plain_reader(original)

    def reader(path, mode="r"):
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = plain(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.cache(names)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = original, names


@functools.cache
def _plain_reader(base: type) -> type:
    """GGUFReader over a plain ndarray view of its memory map instead of the np.memmap itself: the reader slices
    its data once per value (over 2 million slices for Gemma 3's vocabulary), and every slice of a memmap runs
    numpy's Python-level memmap.__getitem__ and __array_finalize__. The view reads the same mapped bytes (it
    keeps the memmap alive as its base), so every field and tensor is the same; Gemma 3's parse went 24.8 s →
    9.4 s, and each of transformers' passes over the parsed fields 4.5 s → 2.2 s (one core)."""

    class PlainReader(base):
        @property
        def data(self):
            return self._plain

        @data.setter
        def data(self, value):
            self._plain = value.view(np.ndarray) if isinstance(value, np.memmap) else value

    return PlainReader


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
        cfg["dtype"] = str(next(model.parameters()).dtype).removeprefix("torch.")  # a half entry's own
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


def is_ct2(path: Path) -> bool:
    """A CTranslate2 model (a folder holding model.bin, or the file): its first bytes are binary version 6
    and a spec name. Not a pickle, so not refused as one; read by ct2.py, never unpickled."""
    f = path / "model.bin" if path.is_dir() else path
    if not f.is_file():  # a pipe or a device is never opened: it could block, or never end
        return False
    try:
        with open(f, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return False
    return f.name == "model.bin" and head[:4] == b"\x06\x00\x00\x00"


def _load_ct2_cached(folder: Path, say, place: Placement = DEFAULT):
    """Whisper from a CTranslate2 folder: converted once (whisper.py, a few seconds) and cached as safetensors."""
    from .whisper import build, check_folder

    check_folder(folder)
    regular_file(folder / "model.bin")
    target = ct2_cache(folder)
    if (hit := _in_dtype(target, folder.name, say, place)) is not None:
        return hit
    with one_converter(target, say):
        if (hit := _from_cache(target, folder.name, say, place)) is not None:  # converted while this process waited
            return hit
        say(f"converting the CTranslate2 Whisper in {folder} (once; a few seconds)")
        model, tokenizer = build(folder)
        write_cache(target, model, tokenizer, say)
    if place.host_only:
        return model.to(place.dtype or torch.float32), tokenizer, "seq2seq"
    del model
    return _converted(target, folder.name, say, place)
