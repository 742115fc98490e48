"""JSON that strict parsers accept: NaN and ±inf become null (json.dumps would write bare NaN)."""

from __future__ import annotations

import json
import math
from dataclasses import fields
from typing import get_type_hints


def strict(obj):
    """A copy of ``obj`` (dicts, lists, tuples, numbers, numpy scalars) with non-finite floats as None."""
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    if hasattr(obj, "item") and getattr(obj, "ndim", 1) == 0:  # numpy / torch scalars
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def shape_problem(data, schema, where: str = "") -> str | None:
    """The first way ``data`` (parsed JSON) differs from ``schema`` — a dict of key -> type, nested dict,
    or [item schema] — as a sentence naming the field; None when it fits. ints pass as floats."""
    if isinstance(schema, dict):
        if not isinstance(data, dict):
            return f"{where or 'the result'} is {type(data).__name__}, expected an object"
        for key, sub in schema.items():
            if key not in data:
                return f"the field {where}{key} is missing"
            if problem := shape_problem(data[key], sub, f"{where}{key}."):
                return problem
        return None
    name = where.rstrip(".") or "the result"
    if isinstance(schema, list):
        if not isinstance(data, list):
            return f"the field {name} is {type(data).__name__}, expected a list"
        return next((p for i, x in enumerate(data) if (p := shape_problem(x, schema[0], f"{name}[{i}]."))), None)
    ok = isinstance(data, schema) and not (isinstance(data, bool) and schema is not bool)
    ok = ok or (schema is float and isinstance(data, int) and not isinstance(data, bool))
    return None if ok else f"the field {name} is {type(data).__name__}, expected {schema.__name__}"


class Meta:
    """What a result says about itself beside its arrays — a dataclass whose fields are its JSON's ``meta``
    keys (a new key is a new, typed field). Fields in OPTIONAL are left out of the JSON when None. Read
    access by the JSON's keys too (``meta["metric"]``, ``"tokens" in meta``), so code that reads a written
    JSON and code that reads the object read them alike."""

    OPTIONAL: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v for k, v in out.items() if not (k in self.OPTIONAL and v is None)}

    @classmethod
    def from_dict(cls, data: dict):
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:  # a new key is a new field: typed here, or it does not cross floors
            raise TypeError(f"{cls.__name__} has no field(s) {unknown}")
        return cls(**data)

    def __contains__(self, key: str) -> bool:
        """A key of the JSON's meta: a field, unless it is optional and was not measured."""
        names = {f.name for f in fields(self)}
        return key in names and not (key in self.OPTIONAL and getattr(self, key) is None)

    def __getitem__(self, key: str):
        if key not in self:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default=None):
        return self[key] if key in self else default


FORMAT = 1  # the layout every result's JSON has; ar.load refuses a file of another (docs/results.md)
STAMP = "attnroute"  # the JSON key naming the result's kind and format: {"result": KIND, "format": FORMAT}


class Result:
    """A result that crosses floors: a dataclass whose ``to_dict()`` is its JSON contract, and
    ``SCHEMA`` the part of it that readers of the JSON rely on (checked by ``validate``).

    Subclasses write ``payload()``; ``to_dict()`` adds the stamp (STAMP: kind and format) and names the
    table ``rows`` in every result. A table that had another key before format 1 (TABLE: routes' "routes",
    a circuit's "edges", …) is written under that key too, for one release (to be dropped in 0.3)."""

    SCHEMA: dict = {}
    KIND = ""  # the name ar.load knows the result by: "patch", "circuit", …
    TABLE: str | None = None  # the key its table had before format 1, kept one release as an alias of rows
    partial: dict | None = None  # a result written before its verb finished: {"done": […], "pending": […]}

    @classmethod
    def validate(cls, data) -> str | None:
        """Why ``data`` is not this result's JSON (the field missing or of the wrong type), or None."""
        return shape_problem(data, cls.SCHEMA)

    def payload(self) -> dict:
        raise NotImplementedError

    def to_dict(self) -> dict:
        out = {}
        for key, value in self.payload().items():
            if key == self.TABLE:
                out["rows"] = value  # the one name of the table (the old key right after it)
            out[key] = value
        if self.partial is not None:  # marked until the verb ends: what is done, what is pending
            out["partial"] = self.partial
        return {**out, STAMP: {"result": self.KIND, "format": FORMAT}}

    @classmethod
    def from_dict(cls, data: dict):
        """The typed result back from its JSON (format FORMAT, stamp checked by ar.load). Fields are read by
        name; a Meta field through its own from_dict; the table from ``rows``. Results whose JSON is shaped
        otherwise override this."""
        hints = get_type_hints(cls)
        kwargs = {}
        for f in fields(cls):
            key = "rows" if f.name == cls.TABLE else f.name
            if key not in data:
                continue
            kind = hints.get(f.name)
            meta = isinstance(kind, type) and issubclass(kind, Meta)
            kwargs[f.name] = kind.from_dict(data[key]) if meta else data[key]
        return cls(**kwargs)

    def to_json(self, indent: int | None = 2) -> str:
        """Strict JSON (NaN and inf as null) of ``to_dict()``."""
        return json.dumps(strict(self.to_dict()), indent=indent, allow_nan=False)

    ROWS = "rows"  # the to_dict() key of the table a notebook display shows the first rows of

    def __repr__(self) -> str:  # one line (subclasses are @dataclass(repr=False)): never every array
        from .display import summary_line

        return summary_line(self.to_dict())

    def _repr_html_(self) -> str:  # Jupyter: a card without a script, every text escaped
        from .display import result_html

        return result_html(strict(self.to_dict()), self.ROWS)


__all__ = ["FORMAT", "STAMP", "Meta", "Result", "shape_problem", "strict"]
