"""One base for every refusal of bad input, so callers (the CLI above all) catch one class.

    InputError(ValueError)                 a value, shape, path or option attnroute will not accept
    InputTypeError(InputError, TypeError)  the same, for an argument of the wrong type
    Interrupted(Exception)                 the user stopped a long read (Ctrl-C); not bad input

Messages say what was expected, what came and what to do, and name *fields* (``max_tokens``),
never command-line flags: the CLI maps a field to its flag once, when it prints the one line.
``field`` carries the name for it.

This module imports nothing (no torch): the command line refuses a bad flag without loading torch.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input: one line naming the field, what was expected and what came."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field


class InputTypeError(InputError, TypeError):
    """An argument of the wrong type (still an InputError, and a TypeError for plain Python habits)."""


class Interrupted(Exception):
    """A long read stopped on request (Ctrl-C, or a stop event): where it stopped and how to resume.

    Not an InputError: nothing the user gave was wrong. The CLI prints it and exits 130."""

    def __init__(self, message: str, *, resume: str | None = None):
        super().__init__(message)
        self.resume = resume


__all__ = ["InputError", "InputTypeError", "Interrupted"]
