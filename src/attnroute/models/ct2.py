"""A reader of CTranslate2's model file (``model.bin``), written here so that Whisper loads without the
ctranslate2 package (a compiled runtime attnroute does not need: it only wants the weights).

The format (CTranslate2's python/ctranslate2/specs/model_spec.py, ``_serialize``; binary version 6),
little-endian throughout:

    uint32 binary_version          6
    string spec_name               "WhisperSpec"   (string = uint16 byte length incl. a NUL, then the bytes)
    uint32 spec_revision
    uint32 n_variables
    n_variables × { string name, uint8 rank, rank × uint32 dim, uint8 dtype, uint32 n_bytes, n_bytes raw }
    uint32 n_aliases
    n_aliases × { string alias, string target }    (tied weights: the output projection → the embeddings)

dtype codes: 0 float32, 1 int8, 2 int16, 3 int32, 4 float16 (and 5 bfloat16 in newer writers).
Every length is checked against the bytes left, so a truncated or foreign file is named in one line.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError

DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
BINARY_VERSION = 6


class CT2Error(InputError):
    """A CTranslate2 file that cannot be read as one."""

    def __init__(self, message: str):
        super().__init__(message, field="model")


@dataclass
class CT2Model:
    binary_version: int
    spec: str
    revision: int
    variables: dict[str, np.ndarray]  # name -> array (scalars have shape ())
    aliases: dict[str, str]  # alias -> the variable it shares

    def get(self, name: str) -> np.ndarray:
        """A variable by name, following an alias; a missing name is a CT2Error naming it."""
        name = self.aliases.get(name, name)
        if name not in self.variables:
            raise CT2Error(f"the CTranslate2 file has no variable {name!r}")
        return self.variables[name]


class _Cursor:
    """Reads the file's fields in order; any read past the end names the field and the offset."""

    def __init__(self, data: bytes, path: Path):
        self.data, self.at, self.path = data, 0, path

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise CT2Error(
                f"{self.path}: truncated CTranslate2 file ({what} needs {n} bytes at offset {self.at}, "
                f"{len(self.data) - self.at} left)"
            )
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def unpack(self, fmt: str, what: str):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))

    def string(self, what: str) -> str:
        (n,) = self.unpack("H", what)
        raw = self.take(n, what)
        try:
            return raw.rstrip(b"\0").decode("utf-8")
        except UnicodeDecodeError:
            raise CT2Error(f"{self.path}: {what} at offset {self.at - n} is not text: not a CTranslate2 file") from None


def read_ct2(path: Path, expect_spec: str | None = None) -> CT2Model:
    """Every variable of a CTranslate2 ``model.bin`` as numpy arrays (copies: the file is closed after)."""
    path = Path(path)
    cur = _Cursor(path.read_bytes(), path)
    (version,) = cur.unpack("I", "the binary version")
    if version != BINARY_VERSION:
        raise CT2Error(
            f"{path}: CTranslate2 binary version {version}; attnroute reads version {BINARY_VERSION} "
            "(re-convert the model with a current ctranslate2, or check that this is a CTranslate2 file)"
        )
    spec = cur.string("the spec name")
    if expect_spec and spec != expect_spec:
        raise CT2Error(f"{path}: the CTranslate2 spec is {spec!r}; expected {expect_spec!r}")
    (revision,) = cur.unpack("I", "the spec revision")
    (n,) = cur.unpack("I", "the variable count")
    variables = dict(_variable(cur) for _ in range(n))
    (n_alias,) = cur.unpack("I", "the alias count")
    aliases = {cur.string("an alias"): cur.string("an alias target") for _ in range(n_alias)}
    if cur.at != len(cur.data):
        raise CT2Error(f"{path}: {len(cur.data) - cur.at} bytes follow the last alias: not a file this reader knows")
    return CT2Model(version, spec, revision, variables, aliases)


def _variable(cur: _Cursor) -> tuple[str, np.ndarray]:
    name = cur.string("a variable name")
    (rank,) = cur.unpack("B", f"{name}'s rank")
    dims = cur.unpack("I" * rank, f"{name}'s shape") if rank else ()
    (code,) = cur.unpack("B", f"{name}'s dtype")
    (nbytes,) = cur.unpack("I", f"{name}'s size")
    if code not in DTYPES:
        raise CT2Error(f"{cur.path}: {name} has dtype code {code}; this reader knows {sorted(DTYPES)}")
    dtype = np.dtype(DTYPES[code]).newbyteorder("<")
    count = int(np.prod(dims)) if dims else 1
    if count * dtype.itemsize != nbytes:
        raise CT2Error(f"{cur.path}: {name} says shape {list(dims)} of {dtype} but holds {nbytes} bytes")
    raw = cur.take(nbytes, name)
    return name, np.frombuffer(raw, dtype=dtype).reshape(dims).copy()


__all__ = ["CT2Error", "CT2Model", "read_ct2"]
