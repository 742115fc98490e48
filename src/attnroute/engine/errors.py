"""The engine's refusals: the classes live in attnroute/errors.py (importable without torch, so the
command line can refuse a bad flag before torch loads); re-exported here for the engine's modules."""

from ..errors import InputError, InputTypeError

__all__ = ["InputError", "InputTypeError"]
