"""Every rank's value, gathered as tensors — never pickled objects.

    parts = gather(value, world)   # [rank 0's value, rank 1's, …], the same on every rank

torch.distributed.all_gather_object pickles each rank's object into a byte tensor of its own size and
gathers those; under gloo on a loaded machine a rank of a corpus read died in it by SIGABRT
("terminate called without an active exception", docs/corpus.md says what was measured). Here a value
travels as plain bytes in two gathers of fixed-shape uint8/int64 tensors (lengths first, then the
bytes padded to the longest), and it is written without pickle: a JSON skeleton whose arrays
(numpy or torch, any dtype safetensors holds) travel as one safetensors blob beside it. Values: None,
bool, int, float (NaN and inf kept), str, lists, tuples (back as lists), dicts with str keys, numpy
arrays, CPU or device tensors (back on the CPU), torch dtypes.
"""

from __future__ import annotations

import json

import numpy as np
import torch

_ARRAY, _TENSOR, _DTYPE = "__array__", "__tensor__", "__dtype__"


def gather(value, world: int) -> list:
    """``value`` of every rank, in rank order (``world`` == 1: [value], no collective)."""
    if world == 1:
        return [value]
    return [decode(b) for b in gather_bytes(encode(value), world)]


def gather_bytes(data: bytes, world: int) -> list[bytes]:
    """Every rank's bytes: the lengths gathered as int64, then the bytes padded to the longest as uint8."""
    dist = torch.distributed
    device = _device()
    size = torch.tensor([len(data)], dtype=torch.int64, device=device)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
    dist.all_gather(sizes, size)
    longest = max(int(s.item()) for s in sizes)
    mine = torch.zeros(longest, dtype=torch.uint8, device=device)
    if data:
        mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    parts = [torch.empty(longest, dtype=torch.uint8, device=device) for _ in range(world)]
    dist.all_gather(parts, mine)
    return [bytes(p[: int(s.item())].cpu().numpy().tobytes()) for p, s in zip(parts, sizes)]


def _device() -> torch.device:
    """nccl gathers tensors on this rank's GPU; gloo on the CPU."""
    if torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def encode(value) -> bytes:
    """A value as bytes: 8 bytes of skeleton length, the JSON skeleton, the arrays' safetensors blob."""
    from safetensors.numpy import save

    arrays: dict[str, np.ndarray] = {}
    skeleton = json.dumps(_flatten(value, arrays)).encode()
    blob = save(arrays) if arrays else b""
    return len(skeleton).to_bytes(8, "little") + skeleton + blob


def decode(data: bytes):
    from safetensors.numpy import load

    n = int.from_bytes(data[:8], "little")
    skeleton = json.loads(data[8 : 8 + n].decode())
    arrays = load(data[8 + n :]) if len(data) > 8 + n else {}
    return _rebuild(skeleton, arrays)


def _flatten(value, arrays: dict):
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, torch.dtype):
        return {_DTYPE: str(value).removeprefix("torch.")}
    if isinstance(value, torch.Tensor):
        name = str(len(arrays))
        t = value.detach().to("cpu").contiguous()
        arrays[name] = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()
        return {_TENSOR: name, "dtype": str(t.dtype).removeprefix("torch.")}
    if isinstance(value, np.ndarray | np.generic):
        name = str(len(arrays))
        arrays[name] = np.ascontiguousarray(value)
        return {_ARRAY: name, "scalar": isinstance(value, np.generic)}
    if isinstance(value, list | tuple):
        return [_flatten(v, arrays) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: _flatten(v, arrays) for k, v in value.items()}}
    raise TypeError(f"gather cannot carry a {type(value).__name__} across ranks")


def _rebuild(node, arrays: dict):
    if isinstance(node, list):
        return [_rebuild(v, arrays) for v in node]
    if not isinstance(node, dict):
        return node
    if "__dict__" in node:
        return {k: _rebuild(v, arrays) for k, v in node["__dict__"].items()}
    if _DTYPE in node:
        return getattr(torch, node[_DTYPE])
    if _TENSOR in node:
        t = torch.from_numpy(arrays[node[_TENSOR]].copy())
        return t.view(torch.bfloat16) if node["dtype"] == "bfloat16" else t
    a = arrays[node[_ARRAY]]
    return a[()] if node["scalar"] else a


__all__ = ["decode", "encode", "gather", "gather_bytes"]
