"""Float32 arithmetic on a model held in bfloat16 or float16, with no float32 copy of the model.

    with float32_arithmetic(loaded):
        out = loaded.model(**batch)   # every module computes in float32 from its own bf16 weights

Why. A route's effect is a small difference of a deep model's metric. Read in bf16 arithmetic, SmolLM2's IOI
routes were off by 17 % (estimates) and 33 % (exact knockouts) of the largest; read in float32 arithmetic from the
same bf16-rounded weights, by 0.6 % and 3.3 % (benchmarks/routes_precision.py, docs/precision.md). The error is
the arithmetic's, not the weights'.
So `routes` computes in float32 whatever dtype the model is held in, and this is how, without 4 bytes a weight.

How. While the block runs, each module that holds a bf16 or fp16 parameter or buffer of its own computes with
float32 casts of them, made when it is called and dropped when it returns; its floating-point inputs are cast to
float32 too, so float32 flows from the embedding to the logits. A cast is a differentiable ``.float()`` of the
parameter, so gradients flow as they would through the float32 model. What autograd saves of a cast for the
backward (a Linear's weight, for its input's gradient) is not held: a saved-tensor hook keeps the parameter
itself, and the backward casts it again (torch.autograd.graph.saved_tensors_hooks). The float32 copies alive at
any time are those of the module that runs, so memory stays that of the held model plus its float32 activations.
Two modules are read without a whole cast, where the output head's would be the largest (Gemma 3's 262k × 640
table: 0.63 GiB, and a second time for the backward; Llama-3-8B's: 2.0 GiB). An embedding looks its rows up in
its own dtype and casts the rows, which is exact (a lookup copies them). A Linear of more than CHUNK weights is
multiplied a block of output rows at a time, each block cast when it is used.

The module's own forward is wrapped as an instance attribute and given back on exit (models/forwards.py; an
accelerate-dispatched module's ``_old_forward``, which accelerate calls after it has loaded the offloaded
weights, so the casts are of real weights; such a module's casts are held for the backward instead, since its
weights go back to disk after the forward). Nothing else of the model changes: the parameters, buffers, their
dtype, device and ``requires_grad`` are the user's throughout, outside the module that runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from itertools import chain

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .forwards import attributes_replaced, called_forward
from .loaded import dtype_names

LOW = (torch.bfloat16, torch.float16)
CHUNK = 1 << 24  # weights of a Linear cast at once (64 MB in float32)


def low_precision(loaded) -> bool:
    """Whether the model computes below float32 (bf16 or fp16) as it is held."""
    return loaded.dtype in LOW


@contextlib.contextmanager
def float32_arithmetic(loaded) -> Iterator[Float32Arithmetic | None]:
    """Inside the block, ``loaded.model`` computes in float32 and ``loaded.dtype`` says float32; a model held in
    float32 or float64 is read as it is (None). Whatever ends the block, the model is as it was."""
    if not low_precision(loaded):
        yield None
        return
    upcast = Float32Arithmetic(loaded.model)
    loaded.computes_in = torch.float32
    try:
        with upcast:
            yield upcast
    finally:
        loaded.computes_in = None


def arithmetic_of(loaded) -> dict | None:
    """What a result says of its arithmetic when the model was read in float32 from lower-precision weights."""
    if loaded.computes_in is None:
        return None
    return {
        "weights": "+".join(dtype_names(loaded.model)),
        "computes_in": str(loaded.computes_in).removeprefix("torch."),
    }


def arithmetic_said(arithmetic: dict | None) -> str | None:
    if not arithmetic:
        return None
    return (
        f"read in {arithmetic['computes_in']} arithmetic from the model's {arithmetic['weights']} weights (in "
        f"{arithmetic['weights']} arithmetic a route's effect is off by up to 33 % of the largest: docs/precision.md)"
    )


class _Recast:
    """What a saved cast is kept as: its parameter, and the view of the cast that was saved."""

    __slots__ = ("source", "size", "stride", "offset")

    def __init__(self, source: torch.Tensor, saved: torch.Tensor):
        self.source, self.size, self.stride, self.offset = source, saved.size(), saved.stride(), saved.storage_offset()

    def make(self) -> torch.Tensor:
        return self.source.detach().float().as_strided(self.size, self.stride, self.offset)


class Float32Arithmetic:
    """Every module of ``model`` that holds a low-precision tensor of its own computes in float32 inside ``with``.
    ``casts``: how many casts were made; ``recast``: how many saved ones the backward made again."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.casts = self.recast = 0
        self._live: dict[int, torch.Tensor] = {}  # a live cast's storage pointer -> its parameter
        self._held = contextlib.ExitStack()

    def __enter__(self) -> Float32Arithmetic:
        wrapped = {}
        for m in self.model.modules():
            names = [n for n, t in chain(m._parameters.items(), m._buffers.items()) if _low(t)]
            if names:
                wrapped.update(self._wrapped(m, names))
        with contextlib.ExitStack() as held:  # what raises here unwinds what was entered before it
            held.enter_context(attributes_replaced(wrapped))
            held.enter_context(torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack))
            self._held = held.pop_all()
        return self

    def __exit__(self, *exc) -> None:
        self._held.__exit__(*exc)

    def _wrapped(self, m: torch.nn.Module, names: list[str]) -> dict:
        """{(m, the attribute its forward is run through): the float32 forward}."""
        attr = called_forward(m)  # accelerate: wrap what it calls
        inner, recast = getattr(m, attr), attr == "forward"
        if isinstance(m, torch.nn.Embedding) and "weight" in names:  # a lookup copies rows: cast them, not the table
            lookup = [n for n in names if n != "weight"]
            run = lambda *a, **k: self._run(m, _Lookups(m.weight).around(inner), lookup, recast, a, k)  # noqa: E731
        elif (
            type(m) is torch.nn.Linear
            and m.weight.numel() > CHUNK
            and names == ["weight"] + ["bias"] * (m.bias is not None)
        ):
            run = lambda x: self._linear_in_chunks(m, recast, x)  # noqa: E731
        else:
            run = lambda *a, **k: self._run(m, inner, names, recast, a, k)  # noqa: E731
        return {(m, attr): run}

    def _run(self, m: torch.nn.Module, inner, names: list[str], recast: bool, args: tuple, kwargs: dict):
        """``inner(*args, **kwargs)`` with ``m``'s low-precision tensors and the inputs in float32."""
        held, made = [], []
        try:
            for n in names:
                table = m._parameters if n in m._parameters else m._buffers
                held.append((table, n, table[n]))
                table[n] = self._cast(table[n], recast, made)
            return inner(*_to_float32(args), **_to_float32(kwargs))
        finally:
            for table, n, tensor in reversed(held):
                table[n] = tensor
            self._forget(made)

    def _linear_in_chunks(self, m: torch.nn.Linear, recast: bool, x: torch.Tensor) -> torch.Tensor:
        """``m(x)`` in float32, CHUNK weights (whole output rows) cast at a time: [..., in] -> [..., out]."""
        W, b, made = m.weight, m.bias, []
        rows = max(1, CHUNK // W.shape[1])
        try:
            parts = []
            for i in range(0, W.shape[0], rows):
                bias = None if b is None else self._cast(b[i : i + rows], recast, made)
                parts.append(F.linear(x.float(), self._cast(W[i : i + rows], recast, made), bias))
            return torch.cat(parts, -1)
        finally:
            self._forget(made)

    def _cast(self, t: torch.Tensor, recast: bool, made: list) -> torch.Tensor:
        """``t`` in float32; with ``recast``, kept as ``t`` where autograd saves it (see _pack)."""
        cast = t.float()
        self.casts += 1
        if recast:
            key = cast.untyped_storage().data_ptr()
            self._live[key] = t
            made.append(key)
        return cast

    def _forget(self, made: list) -> None:
        for key in made:
            self._live.pop(key, None)

    def _pack(self, saved: torch.Tensor):
        """A cast saved for the backward is kept as its parameter; anything else as it is."""
        if not self._live or saved.dtype != torch.float32 or saved.layout != torch.strided:
            return saved
        try:
            source = self._live.get(saved.untyped_storage().data_ptr())
        except (RuntimeError, NotImplementedError):  # a tensor without storage (a tensor subclass)
            return saved
        return saved if source is None else _Recast(source, saved)

    def _unpack(self, packed):
        if isinstance(packed, _Recast):
            self.recast += 1
            return packed.make()
        return packed


class _Lookups(TorchFunctionMode):
    """While an embedding's own forward runs: a lookup of its low-precision ``table`` (F.embedding, indexing) is
    made in the table's dtype and the rows cast after; any other use of the table casts it whole."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = table

    def around(self, inner):
        def run(*args, **kwargs):
            with self:
                return inner(*args, **kwargs)

        return run

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        used = [i for i, a in enumerate(args) if a is self.table]
        if used and (func is F.embedding or func is torch.Tensor.__getitem__):
            return func(*args, **kwargs).float()
        if used and getattr(func, "__name__", "") != "__get__":  # reading .dtype or .shape is no use of it
            args = tuple(a.float() if a is self.table else a for a in args)
        return func(*args, **kwargs)


def _low(t) -> bool:
    return t is not None and t.is_floating_point() and t.dtype in LOW


def _to_float32(x):
    """``x`` with every low-precision tensor in it (through tuples, lists and dicts) cast to float32."""
    if isinstance(x, torch.Tensor):
        return x.float() if x.dtype in LOW else x
    if isinstance(x, tuple | list):
        return type(x)(_to_float32(v) for v in x) if not hasattr(x, "_fields") else type(x)(*map(_to_float32, x))
    if isinstance(x, dict):
        return {k: _to_float32(v) for k, v in x.items()}
    return x


__all__ = ["Float32Arithmetic", "arithmetic_of", "arithmetic_said", "float32_arithmetic", "low_precision"]
