"""One base for every refusal of bad input, so callers (the CLI above all) catch one class.

    InputError(ValueError)                 a value, shape, path or option attnroute will not accept
    InputTypeError(InputError, TypeError)  the same, for an argument of the wrong type
    Interrupted(Exception)                 the user stopped a long read (Ctrl-C); not bad input

Messages say what was expected, what came and what to do, and name *fields* (``max_tokens``),
never command-line flags: the CLI maps a field to its flag once, when it prints the one line.
``field`` carries the name for it.

This module imports nothing heavy (no torch): the command line refuses a bad flag without loading torch.
``deferred_interrupt()`` is the one place Ctrl-C waits: a section that must not be cut in half (an
accumulator's update and the checkpoint of it) finishes first, then the interrupt is raised.
"""

from __future__ import annotations

import contextlib
import signal
import threading


class InputError(ValueError):
    """Bad input: one line naming the field, what was expected and what came."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field


class InputTypeError(InputError, TypeError):
    """An argument of the wrong type (still an InputError, and a TypeError for plain Python habits)."""


def readable_text(value: str, field: str, said: str | None = None) -> str:
    """``value`` when a tokenizer can read it: a lone surrogate ('\\ud800' — valid in JSON and in a Python
    string, not in UTF-8) is refused naming ``field`` (it raised inside the tokenizer)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(
            f"{said or field} holds a lone surrogate ({value[e.start]!r} at character {e.start + 1}), which is not "
            "text a tokenizer reads: fix the text's encoding",
            field=field,
        ) from None
    return value


class Interrupted(Exception):
    """A long read stopped on request (Ctrl-C, or a stop event): where it stopped and how to resume.

    Not an InputError: nothing the user gave was wrong. The CLI prints it and exits 130."""

    def __init__(self, message: str, *, resume: str | None = None):
        super().__init__(message)
        self.resume = resume


SEEN: list[int] = []  # every Ctrl-C the program has received (the CLI's handler appends; see was_interrupted)


def was_interrupted() -> bool:
    """Has the user pressed Ctrl-C? A library that catches the KeyboardInterrupt mid-import and raises its own
    error (transformers' lazy modules say "Could not import module 'BertModel'") must not turn it into a
    refusal of the user's input, nor into "the cache is damaged, rebuild it"."""
    return bool(SEEN)


@contextlib.contextmanager
def deferred_interrupt():
    """Ctrl-C inside the block is held until the block ends, then raised as KeyboardInterrupt (in the main
    thread; elsewhere the block runs as it is: signals only reach the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda sig, frame: caught.append(sig))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def _nothing(sig, frame) -> None:
    """What a Ctrl-C after the first does."""


def ignore_interrupts() -> None:
    """Every further Ctrl-C does nothing (main thread only; elsewhere nothing changes). A Python handler that
    does nothing, not SIG_IGN: CPython runs pending handlers before it swaps one, and a SIGINT landing between
    that check and the swap is found later, still pending, with SIG_IGN installed; CPython then prints
    "OSError: Signal 2 ignored due to race condition" with a traceback (seen in CI under a burst of Ctrl-Cs).
    With a handler installed, the late one just runs it. The process still cannot die of SIGINT: at the OS
    level the handler stays CPython's, which only marks the signal."""
    with contextlib.suppress(ValueError):  # not the main thread
        signal.signal(signal.SIGINT, _nothing)


def exit_now(code: int) -> None:
    """End the process with ``code`` at once, stdout and stderr flushed first, the interpreter's own shutdown
    skipped (os._exit): after a Ctrl-C, when what the command had to write or refuse is settled (or nothing is
    open yet), a shutdown that runs Python code can still be cut by the next Ctrl-C."""
    import os
    import sys

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more can be said
            stream.flush()
    os._exit(code)


__all__ = [
    "ignore_interrupts",
    "readable_text",
    "InputError",
    "InputTypeError",
    "Interrupted",
    "SEEN",
    "deferred_interrupt",
    "exit_now",
    "was_interrupted",
]
