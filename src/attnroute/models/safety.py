"""Refusals before anything is built or run: never a pickle, never a device or FIFO read as weights, never a
checkpoint that lacks weights (random weights give plausible numbers), never a model that does not fit."""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path

from ..errors import was_interrupted
from .loaded import ModelLoadError

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


def _pickle_refusal(path: Path) -> str:
    return (
        f"refusing to load {path}: pickle checkpoints (.bin/.pt/.pth/.ckpt) can run arbitrary code when loaded. "
        "Convert it to safetensors (safetensors.torch.save_model) and point attnroute at that directory"
    )


def not_an_interrupt() -> None:
    """Inside an `except` of a library's error: if the user pressed Ctrl-C, the error is its aftermath."""
    if was_interrupted():
        raise KeyboardInterrupt from None


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


def check_size(path: Path, config, tensors: dict[str, int], dtype=None, host: bool = True) -> None:
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
    import torch

    dtype = dtype or torch.float32
    need = dtype.itemsize * sum(tensors.values())  # in the dtype the weights are loaded into
    free = available_memory() if host else None  # placed on a device or over a map: accelerate checks it
    if free and need > free:
        raise ModelLoadError(
            f"{path}: the weights take {need / 1e9:.1f} GB in {str(dtype).removeprefix('torch.')} and "
            f"{free / 1e9:.1f} GB of memory are available"
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


def _first_line(e: Exception) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:160]}"
