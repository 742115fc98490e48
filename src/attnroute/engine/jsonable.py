"""JSON that strict parsers accept: NaN and ±inf become null (json.dumps would write bare NaN)."""

from __future__ import annotations

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


__all__ = ["strict"]
