"""The one matplotlib set-up of show/: headless (Agg), and user text drawn as it is.

``text.parse_math`` is off, so a word such as ``$ { $`` from a prompt is drawn literally instead of
being parsed as mathtext (which raises on unbalanced dollars and would lose the figure).
"""

from __future__ import annotations


def pyplot():
    """matplotlib.pyplot, set up once for files (no display, no mathtext)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt


def png(draw) -> bytes:
    """A figure as PNG bytes: ``draw(file)`` writes it to an in-memory file (the caller writes the bytes
    atomically, or embeds them in a page)."""
    import io

    buf = io.BytesIO()
    draw(buf)
    return buf.getvalue()


__all__ = ["png", "pyplot"]
