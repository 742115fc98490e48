"""Where and in what a model attnroute loads is put: its dtype, its device, or accelerate's device map — read
from what a user asked (``dtype=``, ``device=``, ``device_map=``; ``--dtype``, ``--device``, ``--device-map``)
and checked before anything loads. A model the user holds is never moved or cast: a device it is not on is
refused, like a dtype it does not compute in (door.py).

- dtype: float32, bfloat16, float16, or auto (None): the dtype the checkpoint stores (stored_dtype). A verb
  that computes in float32 whatever the weights (``Settings.ARITHMETIC``: routes) reads bf16 weights in float32
  arithmetic (models/arithmetic.py), so it loads them as stored too.
- device: ``cpu`` (the default), ``cuda``, ``cuda:N``, ``mps``, or ``auto`` (the first of cuda, mps and cpu that
  torch sees). A device torch does not see is refused by name; so, until a GPU run has verified them
  (``make gpu-check``, docs/precision.md), are CUDA and MPS themselves, unless ATTNROUTE_UNVERIFIED_DEVICES=1
  is set (what gpu-check sets to run that verification). A refusal says so; a verb never runs where its
  numbers are unchecked without being told to.
- device_map: accelerate's big-model dispatch, as transformers' ``from_pretrained(device_map=)`` takes it:
  ``auto``, ``balanced``, ``balanced_low_0``, ``sequential``, a dict, or a JSON file of {module: device}
  whose devices are ``cpu``, ``disk``, a GPU index or ``cuda:N``. Layers sent to ``disk`` are written to an
  offload folder under attnroute's cache, removed with the model. With a device map, ``device`` stays unset.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..errors import InputError, InputTypeError

MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
UNVERIFIED = "ATTNROUTE_UNVERIFIED_DEVICES"  # set to 1: run on CUDA/MPS before a GPU run has verified them


STORED = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Placement:
    dtype: torch.dtype | None = None  # None: auto, the dtype the checkpoint stores (stored_dtype)
    device: str = "cpu"
    device_map: str | dict | None = None

    def resolved(self, config) -> Placement:
        """This placement with auto's dtype read from the checkpoint's config."""
        return self if self.dtype is not None else replace(self, dtype=stored_dtype(config))

    def pretrained(self) -> dict:
        """from_pretrained's keyword arguments: the dtype, and where the weights go straight to (no CPU copy)."""
        kwargs: dict = {"dtype": self.dtype}
        if self.device_map is not None:
            kwargs["device_map"] = self.device_map
            kwargs["offload_folder"] = tempfile.mkdtemp(prefix="offload-", dir=_offload_root())
        elif self.device != "cpu":
            kwargs["device_map"] = {"": self.device}
        return kwargs

    def placed(self, model, kwargs: dict):
        """The loaded model; its offload folder (if any) removed when the model is collected."""
        folder = kwargs.get("offload_folder")
        if folder is not None:
            weakref.finalize(model, shutil.rmtree, folder, True)
        return model

    @property
    def host_only(self) -> bool:
        """True when every weight is loaded into this machine's memory (the size check counts it there)."""
        return self.device_map is None and self.device == "cpu"


def _offload_root() -> str:
    from ..bundled import cache_dir

    root = cache_dir() / "offload"
    root.mkdir(parents=True, exist_ok=True)
    return str(root)


def resolve(dtype=None, device=None, device_map=None) -> Placement:
    """The placement asked for, checked (each refusal names its field); dtype: a torch dtype (door.resolve_dtype)."""
    place = Placement(dtype, resolve_device(device), resolve_map(device_map))
    if place.device_map is not None and device not in (None, "cpu", "auto"):
        raise InputTypeError(
            f"device {device!r} and a device_map were both given: the map says where every layer goes; give one",
            field="device_map",
        )
    return place


def stored_dtype(config) -> torch.dtype:
    """The dtype a checkpoint's config says its weights are stored in (``dtype``, formerly ``torch_dtype``), when
    it is float32, bfloat16 or float16; else float32 (a config that says nothing, or float64). The bundled GGUFs
    are cached dequantized in float32 (exact for their 4-bit blocks), so auto reads them in float32."""
    stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    name = str(stored).removeprefix("torch.") if stored is not None else ""
    return STORED.get(name, torch.float32)


def resolve_device(device) -> str:
    """'cpu', 'cuda:N' or 'mps' for what was asked; a device torch does not see, or one not yet verified, refused."""
    if device is None or device == "cpu":
        return "cpu"
    if isinstance(device, torch.device):
        device = str(device)
    if not isinstance(device, str):
        raise InputTypeError(f"device must be cpu, cuda, cuda:N, mps or auto, got {device!r}", field="device")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "mps" if _mps() else "cpu"
        if device == "cpu":
            return device
    kind, _, index = device.partition(":")
    if kind == "cuda" and (index == "" or index.isdigit()):
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        i = int(index or 0)
        if i >= n:
            raise InputError(f"device {device} was asked and torch sees {n} CUDA device(s) here", field="device")
        return _verified(f"cuda:{i}")
    if device == "mps":
        if not _mps():
            raise InputError("device mps was asked and torch sees no MPS device here", field="device")
        return _verified("mps")
    raise InputTypeError(f"device must be cpu, cuda, cuda:N, mps or auto, got {device!r}", field="device")


def _mps() -> bool:
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def _verified(device: str) -> str:
    if os.environ.get(UNVERIFIED) == "1":
        return device
    raise InputError(
        f"device {device}: attnroute's verbs are verified on the CPU, and no GPU run has verified them on "
        f"{device.split(':')[0]} yet (make gpu-check does); read on the CPU, or set {UNVERIFIED}=1 to run unverified",
        field="device",
    )


def resolve_map(device_map):
    """None, one of accelerate's strategies, or a {module: device} dict (from a dict or a .json file), checked."""
    if device_map is None:
        return None
    if isinstance(device_map, str) and device_map in MAPS:
        return device_map
    if isinstance(device_map, str | os.PathLike) and str(device_map).endswith(".json"):
        device_map = _read_map(Path(device_map))
    if not isinstance(device_map, dict) or not device_map:
        raise InputTypeError(
            f"device_map must be one of {', '.join(MAPS)}, a {{module: device}} dict or a .json file of one, "
            f"got {device_map!r}",
            field="device_map",
        )
    return {str(k): _map_device(k, v) for k, v in device_map.items()}


def _read_map(path: Path) -> dict:
    try:
        found = json.loads(path.read_text())
    except OSError as e:
        raise InputError(f"device_map {path}: cannot be read ({e.strerror})", field="device_map") from None
    except ValueError as e:
        raise InputError(f"device_map {path}: not JSON ({e})", field="device_map") from None
    if not isinstance(found, dict):
        raise InputError(f"device_map {path}: expected a JSON object of module: device", field="device_map")
    return found


def _map_device(module, device):
    """A device map's entry: 'cpu' and 'disk' as they are, a GPU (index or cuda:N) checked like ``device``."""
    if device in ("cpu", "disk"):
        return device
    if isinstance(device, int) and not isinstance(device, bool):
        device = f"cuda:{device}"
    if isinstance(device, str) and (device.startswith("cuda") or device == "mps"):
        try:
            return resolve_device(device)
        except InputError as e:
            raise InputError(f"device_map entry {module!r}: {e}", field="device_map") from None
    raise InputError(
        f"device_map entry {module!r}: expected cpu, disk, a GPU index or cuda:N, got {device!r}", field="device_map"
    )


def check_held(model, place: Placement, asked_device, asked_map) -> None:
    """A model the user holds stays where it is: a device_map is refused (it is placed already), a device it
    is not on is refused (never moved), and so is a device not yet verified that it is on."""
    if asked_map is not None:
        raise InputTypeError(
            "device_map was given with a model you hold: it is used where it is; dispatch it yourself, or give "
            "attnroute a name or path to load with the map",
            field="device_map",
        )
    on = sorted({p.device.type for p in model.parameters() if p.device.type != "meta"})
    if asked_device not in (None, "auto") and on != [place.device.split(":")[0]]:
        raise InputError(
            f"device {place.device} was asked, and the model you hold is on {', '.join(on)}: attnroute never "
            "moves your model; move a copy, or leave device unset",
            field="device",
        )
    for kind in on:
        if kind != "cpu":
            _verified(kind)


__all__ = ["MAPS", "Placement", "check_held", "resolve", "resolve_device", "resolve_map", "stored_dtype"]
