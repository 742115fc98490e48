"""One base for every refusal of bad input, so callers (the CLI above all) catch one class.

    InputError(ValueError)            a value, shape, path or option attnroute will not accept
    InputTypeError(InputError, TypeError)  the same, for an argument of the wrong type

Messages say what was expected, what came and what to do, and name *fields* (``max_tokens``),
never command-line flags: the CLI adds the flag names when it prints the one line. ``field``
carries the name for it.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input: one line naming the field, what was expected and what came."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field


class InputTypeError(InputError, TypeError):
    """An argument of the wrong type (still an InputError, and a TypeError for plain Python habits)."""


__all__ = ["InputError", "InputTypeError"]
