"""The one byte formatter. Binary units (GiB = 2³⁰ B) unless asked for both; GB is 10⁹ B.

fmt_bytes(1536)               -> '1.50 KiB'
fmt_bytes(1536, exact=True)   -> '1,536 B = 1.5 kB = 1.5 KiB'   (the KV-card form: no unit mix-up)
"""

from __future__ import annotations

BINARY = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
DECIMAL = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3))


def _scaled(n, units, digits: int) -> str:
    for unit, size in units:
        if abs(n) >= size:
            return f"{n / size:.{digits}f} {unit}"
    return f"{n} B" if digits == 2 else f"{n:.{digits}f} B"


def fmt_bytes(n: int | None, *, exact: bool = False) -> str:
    """Bytes for people; ``exact`` spells the integer and both unit systems."""
    if n is None:
        return "n/a"
    if not exact:
        return _scaled(n, BINARY, 2)
    return f"{n:,} B = {_scaled(n, DECIMAL, 1)} = {_scaled(n, BINARY, 1)}"


__all__ = ["fmt_bytes"]
