"""What every verb's settings share: the validators, the base class, fields that carry their meaning,
and the verb signature that shows them.

    @dataclass(frozen=True)
    class KnockoutSettings(Settings):
        window: int = opt(5, "layers per window, slid over the depth")

    @verb(KnockoutSettings)
    def knockout(model=None, text=None, *, settings=None, progress=None, **fields): ...

``help(knockout)`` then shows every field with its default and its one line of meaning; the command
line reads the same line for its --help and the same default (argparse defaults are None: a flag left
out keeps the settings' own). Like the rest of the ground floor, this imports no torch.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import os
import re
import sys
from collections.abc import Sequence  # noqa: F401  (named in PromptsArg)
from dataclasses import MISSING, field, fields
from typing import Union

from ..errors import InputError, InputTypeError, readable_text

SEED_MAX = 2**32 - 1  # numpy's and torch's seed range
# what a verb's ``model`` takes: a bundled name, a directory, a .gguf file, a hub id, or an already loaded model
# (attnroute.models.LoadedModel, named here as a string: this floor imports no model code)
ModelArg = Union[str, "os.PathLike[str]", "LoadedModel"]  # noqa: UP007, F821
# what a verb's ``prompts`` takes: a .jsonl path or the pairs themselves
PromptsArg = Union[str, "os.PathLike[str]", "Sequence[PromptPair | dict]"]  # noqa: UP007, F821


def opt(default, doc: str, **kw):
    """A settings field with its one line of meaning (help(), the CLI's --help and docs read it)."""
    if isinstance(default, list | dict | set):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"doc": doc}, **kw)
    return field(default=default, metadata={"doc": doc}, **kw)


def integer(value, name: str, lo: int, hi: int | None = None, *, optional: bool = False) -> int | None:
    """``value`` as an int in [lo, hi]; None passes when ``optional``. Bools are not integers here."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputTypeError(f"{name} must be an integer, got {value!r}", field=name)
    if value < lo or (hi is not None and value > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise InputError(f"{name} must be {bound}, got {value}", field=name)
    return value


def integers(values, name: str, lo: int, hi: int | None = None) -> tuple[int, ...]:
    """A non-empty tuple of integers in [lo, hi] (an empty list is refused: it would mean nothing)."""
    if isinstance(values, str | bytes):
        raise InputTypeError(f"{name} must be a list of integers, got {values!r}", field=name)
    values = tuple(values)
    if not values:
        raise InputError(f"{name} is empty: give at least one value", field=name)
    return tuple(integer(v, name, lo, hi) for v in values)


def number(value, name: str, lo: float, hi: float, *, optional: bool = False) -> float | None:
    """A real number in (lo, hi]; bools and NaN refused."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not (lo < value <= hi):
        raise InputError(f"{name} must be a number in ({lo:g}, {hi:g}], got {value!r}", field=name)
    return float(value)


def names(values, name: str, choices: tuple[str, ...], what: str | None = None) -> tuple[str, ...]:
    """A non-empty tuple of choices, duplicates dropped (a string is one name, never its letters); ``what``
    calls one of them in the message (an "ablation mode")."""
    values = (values,) if isinstance(values, str) else tuple(values)
    bad = [x for x in values if x not in choices] or ([] if values else ["(none)"])
    if bad:
        raise InputError(f"unknown {what or name} {bad[0]!r}: expected some of {', '.join(choices)}", field=name)
    return tuple(dict.fromkeys(values))


def exact_count(value, what: str = "heads", settle: bool = False) -> int | str:
    """How many ``what`` to measure exactly: an integer ≥ 0, or "all" (or "settle", where the verb settles)."""
    if value == "all" or (settle and value == "settle"):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    choices = f"settle, all or a number of {what} (≥ 0)" if settle else f"a number of {what} (≥ 0) or 'all'"
    raise InputError(f"exact must be {choices}, got {value!r}", field="exact")


def position_spec(value, name: str, *, optional: bool = False) -> str | None:
    """A position as the resolvers read it: a word of the text or indices '3,4'. From Python an index (3) or a
    list of them ([3, 4]) is the same request; anything else is refused naming the field."""
    if value is None and optional:
        return None
    index = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0  # noqa: E731
    if index(value):
        return str(value)
    if isinstance(value, list | tuple) and value and all(index(v) for v in value):
        return ",".join(map(str, value))
    if isinstance(value, str) and value.strip():
        return value
    raise InputTypeError(
        f"{name} must be a word of the text or token indices ('3,4', 3 or [3, 4]), got {value!r}", field=name
    )


def nonempty_text(value, name: str, *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{name} is empty: give a non-empty text", field=name)
    return readable_text(value, name)


def one_of(value, name: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InputError(f"{name} {value!r} is not one of {', '.join(choices)}", field=name)
    return value


def set_field(obj, name: str, value) -> None:
    object.__setattr__(obj, name, value)  # frozen dataclasses normalise their own fields


class Settings:
    """Named presets (gpt-fast's ``ModelArgs.from_name``): ``PRESETS`` maps a name to field values."""

    PRESETS: dict[str, dict] = {}
    # the dtype the verb computes in whatever dtype the model is held in (routes: float32, from bf16 or fp16
    # weights one module at a time: models/arithmetic.py); None: the model's own
    ARITHMETIC: str | None = None

    @classmethod
    def from_name(cls, name: str, **overrides):
        if name not in cls.PRESETS:
            raise InputError(f"preset {name!r} is not one of {', '.join(cls.PRESETS)}", field="preset")
        return cls(**{**cls.PRESETS[name], **overrides})

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def default(cls, name: str):
        f = next(f for f in fields(cls) if f.name == name)
        return f.default_factory() if f.default is MISSING else f.default

    @classmethod
    def doc(cls, name: str) -> str:
        return next(f for f in fields(cls) if f.name == name).metadata.get("doc", "")

    @classmethod
    def described(cls) -> str:
        """Every field with its default and its meaning, one line each (a verb's help() ends with it)."""
        rows = [f"    {f.name} = {cls.default(f.name)!r}: {f.metadata.get('doc', '')}" for f in fields(cls)]
        return f"Fields ({cls.__name__}; give them as keywords, or settings={cls.__name__}(...)):\n" + "\n".join(rows)

    @classmethod
    def of(cls, settings=None, model=None, fields: dict | None = None, **given):
        """A verb's settings: ``settings`` as given, or built from the model, the verb's positional inputs
        (``given``, None = left out) and keyword ``fields`` — never both, so nothing is dropped."""
        fields = fields or {}
        if settings is not None:
            if model is not None or fields or any(v is not None for v in given.values()):
                raise InputError("give settings, or the model, inputs and fields, not both", field="settings")
            if not isinstance(settings, cls):
                raise InputTypeError(
                    f"settings must be {cls.__name__}, got {type(settings).__name__}", field="settings"
                )
            return settings
        unknown = sorted(set(fields) - set(cls.field_names()))
        if unknown:  # never drop an argument we do not understand
            raise InputTypeError(
                f"{unknown[0]} is not a field of {cls.__name__}: expected some of {', '.join(cls.field_names())}",
                field=unknown[0],
            )
        given = {k: v for k, v in given.items() if v is not None} | ({} if model is None else {"model": model})
        twice = sorted(set(given) & set(fields))
        if twice:
            raise InputError(
                f"{twice[0]} was given twice (as an argument and as a keyword); give it once", field=twice[0]
            )
        return cls(**given, **fields)


def verb(settings_cls):
    """A verb's honest signature: its own parameters, then every field of ``settings_cls`` as a keyword with
    its default (``help()`` and ``inspect.signature`` show them), and its docstring ending with each
    field's meaning. The function itself still takes them as ``**fields`` (Settings.of checks them). It runs
    in a verb scope (``scoped``)."""

    def wrap(fn):
        sig = inspect.signature(fn)
        own = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        taken = {p.name for p in own}
        more = [
            inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=settings_cls.default(f.name))
            for f in fields(settings_cls)
            if f.name not in taken
        ]
        run = scoped(fn)
        run.__signature__ = sig.replace(parameters=own + more)
        run.__doc__ = f"{inspect.cleandoc(fn.__doc__ or '')}\n\n{settings_cls.described()}"
        run.settings = settings_cls
        return run

    return wrap


# ---------------------------------------------------------------- the verb scope

# What a verb holds on the user's model until it returns, raises or is interrupted (a PEFT model's merged
# adapters: models/adapters.py). The outermost verb owns the scope; a verb called inside it (report's) shares it.
_SCOPE: contextvars.ContextVar = contextvars.ContextVar("attnroute_verb_scope", default=None)


def scoped(fn):
    """``fn`` run in a verb scope: what ``hold`` enters while it runs is exited when it ends, however it ends."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        if _SCOPE.get() is not None:
            return fn(*args, **kwargs)
        with contextlib.ExitStack() as stack:
            token = _SCOPE.set((stack, set()))
            _normal_mode(stack)
            try:
                return fn(*args, **kwargs)
            finally:
                _SCOPE.reset(token)

    return run


def _normal_mode(stack: contextlib.ExitStack) -> None:
    """A verb called inside the user's ``torch.inference_mode()`` (a notebook's or a server's) runs outside it:
    its gradient passes would otherwise fail in autograd (raw RuntimeErrors from patch, circuit, routes and heads'
    estimate). The user's mode is back when the verb ends. torch is not imported for this: where it is not
    loaded yet, no inference mode can be on."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.is_inference_mode_enabled():
        stack.enter_context(torch.inference_mode(False))


def hold(key, enter) -> bool:
    """Enter the context ``enter()`` makes until the running verb ends, once per ``key`` in that verb; False
    when no verb is running (nothing entered: the caller refuses what it cannot read without it)."""
    scope = _SCOPE.get()
    if scope is None:
        return False
    stack, held = scope
    if key not in held:
        stack.enter_context(enter())
        held.add(key)
    return True


__all__ = [
    "checkpoint_fields",
    "path_arg",
    "memory_field",
    "size",
    "SEED_MAX",
    "ModelArg",
    "PromptsArg",
    "Settings",
    "exact_count",
    "integer",
    "integers",
    "names",
    "nonempty_text",
    "number",
    "one_of",
    "opt",
    "set_field",
    "verb",
    "scoped",
    "hold",
]


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def size(value, field: str) -> int | None:
    """Bytes from 4G, 3.5GiB, 2500M, 4GB or a number of bytes (None stays None). K, M, G and T are powers of
    1,024, as `free -h` and `time -v` count."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", value.lower()) if isinstance(value, str) else None
    if m is None or float(m.group(1)) <= 0:
        raise InputError(f"{field} must be a size such as 4G, 3.5GiB or 2500M, got {value!r}", field=field)
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def memory_field(s) -> None:
    """``max_memory`` as bytes (given as 4G, 3.5GiB, … or bytes), checked before any work."""
    set_field(s, "max_memory", size(s.max_memory, "max_memory"))


def path_arg(value, name: str, what: str = "a file's path", hint: str = "") -> None:
    """A path field holds a str or os.PathLike (None where it is optional): anything else is refused naming the
    field, before open() would raise a TypeError deep in the work."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, str | os.PathLike)):
        raise InputTypeError(f"{name} must be {what} or None, got {value!r}{hint}", field=name)


def checkpoint_fields(s) -> None:
    """``checkpoint`` (a file) and ``no_checkpoint`` (keep none) cannot both be asked."""
    off, named = getattr(s, "no_checkpoint", False), getattr(s, "checkpoint", None)
    path_arg(named, "checkpoint", hint=": to keep none, pass no_checkpoint=True" if named is False else "")
    if not isinstance(off, bool):
        raise InputTypeError(f"no_checkpoint must be True or False, got {off!r}", field="no_checkpoint")
    if off and getattr(s, "checkpoint", None) is not None:
        raise InputError(
            f"checkpoint {s.checkpoint} and no_checkpoint both given: name a file to resume from, or keep none",
            field="no_checkpoint",
        )
