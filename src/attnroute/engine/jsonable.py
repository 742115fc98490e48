"""JSON that strict parsers accept: NaN and ±inf become null (json.dumps would write bare NaN)."""

from __future__ import annotations

import json
import math


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


class Result:
    """A result that crosses floors: a dataclass whose ``to_dict()`` is its JSON contract."""

    def to_dict(self) -> dict:
        raise NotImplementedError

    def to_json(self, indent: int | None = 2) -> str:
        """Strict JSON (NaN and inf as null) of ``to_dict()``."""
        return json.dumps(strict(self.to_dict()), indent=indent, allow_nan=False)


__all__ = ["Result", "strict"]
