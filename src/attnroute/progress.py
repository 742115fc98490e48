"""Progress of a long read, as typed events: the terminal renders them, the explorer will stream them.

A verb takes ``progress``: any callable of one :class:`Event` (or None). Inside, ``say =
reporter(progress)`` gives the short form ``say(stage, message, done=…, total=…, eta=…)``.

    stage     what it is about: load, stage, warn, layer, ablate, corpus, checkpoint, rank
    message   one line a person can read (empty for pure counters)
    done, total, eta   a counter and the seconds left, where the sender can tell

Like errors.py, this module imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Event:
    stage: str
    message: str = ""
    done: int | None = None
    total: int | None = None
    eta: float | None = None  # seconds left
    detail: dict = field(default_factory=dict)  # numbers behind the message (tokens/s, rank, …)

    def to_dict(self) -> dict:
        return asdict(self)


Progress = Callable[[Event], None]


def reporter(progress: Progress | None) -> Callable[..., None]:
    """``say(stage, message="", *, done=None, total=None, eta=None, **detail)`` sending Events to
    ``progress`` (nothing when it is None)."""
    if progress is None:
        return lambda *a, **k: None

    def say(stage: str, message: str = "", *, done=None, total=None, eta=None, **detail) -> None:
        progress(Event(stage, str(message), done, total, eta, detail))

    return say


def eta(started: float, now: float, done: int, total: int) -> float:
    """Seconds left at the rate so far."""
    return (now - started) / max(done, 1) * max(total - done, 0)


__all__ = ["Event", "Progress", "eta", "reporter"]
