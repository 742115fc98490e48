"""Progress of a long read, as typed events: the terminal renders them, the explorer will stream them.

A verb takes ``progress``: any callable of one :class:`Event` (or None). Inside, ``say =
reporter(progress)`` gives the short form ``say(stage, message, done=…, total=…, eta=…)``.

    stage     what it is about: load, stage, warn, layer, ablate, corpus, checkpoint, rank
    message   one line a person can read (empty for pure counters)
    done, total, eta   a counter and the seconds left, where the sender can tell

Like errors.py, this module imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace


@dataclass(frozen=True)
class Event:
    stage: str
    message: str = ""
    done: int | None = None
    total: int | None = None
    eta: float | None = None  # seconds left
    detail: dict = field(default_factory=dict)  # numbers behind the message (tokens/s, rank, …)
    result: object = field(default=None, repr=False, compare=False)  # stage "partial": the result so far

    def to_dict(self) -> dict:  # what a stream carries: never the partial result itself (it is written whole)
        return {k: v for k, v in asdict(replace(self, result=None)).items() if k != "result"}


Progress = Callable[[Event], None]


def reporter(progress: Progress | None | bool) -> Callable[..., None]:
    """``say(stage, message="", *, done=None, total=None, eta=None, **detail)`` sending Events to
    ``progress``; when it is None, to a bar in the notebook cell where the call runs (NotebookBar), or, in a
    plain script, to lines on stderr (StderrLines: a six-minute ``ar.patch`` no longer runs silent);
    ``progress=False``: nowhere."""
    if progress is False:
        return lambda *a, **k: None
    if progress is None or progress is True:
        progress = NotebookBar.here() or StderrLines()

    def say(stage: str, message: str = "", *, done=None, total=None, eta=None, result=None, **detail) -> None:
        progress(Event(stage, str(message), done, total, eta, detail, result))

    return say


class NotebookBar:
    """Progress in the running notebook cell: one HTML line (a bar where a count is known, the stage's
    message, the time so far) updated in place through IPython's display handle — no widget library, so
    nothing warns on import; updates at most every 0.3 s. Text is escaped."""

    EVERY = 0.3

    def __init__(self):
        import time

        from IPython.display import HTML, display

        self._html, self._time, self._t0, self._last = HTML, time.monotonic, time.monotonic(), 0.0
        self._handle = display(HTML(""), display_id=True)

    @classmethod
    def here(cls) -> NotebookBar | None:
        """A bar when this process is a Jupyter kernel, else None."""
        import sys

        shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
        return cls() if shell is not None and type(shell).__name__ == "ZMQInteractiveShell" else None

    def __call__(self, e: Event) -> None:
        now = self._time()
        if now - self._last < self.EVERY and (e.done is None or e.done != e.total):
            return
        self._last = now
        self._handle.update(self._html(bar_html(e, now - self._t0)))


class StderrLines:
    """Progress of a Python call outside a notebook: one line on stderr per stage, note or finished count
    (``attnroute [12 s] stage: …``), counts in between at most every EVERY seconds — plain lines, so that
    nested calls and logs read in order (the command line draws its own bars, show/progress.py)."""

    EVERY = 5.0

    def __init__(self):
        import time

        self._time, self._t0, self._last = time.monotonic, time.monotonic(), 0.0

    def __call__(self, e: Event) -> None:
        import sys

        now = self._time()
        counting = e.total is not None and e.done is not None
        if counting and e.done != e.total and now - self._last < self.EVERY:
            return
        self._last = now
        count = f" {e.done}/{e.total}" if counting else ""
        print(f"attnroute [{now - self._t0:.0f} s] {e.stage}: {e.message}{count}", file=sys.stderr, flush=True)


def bar_html(e: Event, elapsed: float) -> str:
    from html import escape

    width = "" if not e.total else f"{100 * (e.done or 0) / e.total:.0f}%"
    bar = (
        f"<span style='display:inline-block;width:160px;height:8px;background:#eee;margin-right:8px'>"
        f"<span style='display:block;height:8px;width:{width};background:#1f77b4'></span></span>"
        if width
        else ""
    )
    count = f" {e.done}/{e.total}" if e.total else ""
    said = f"{escape(e.stage)}: {escape(e.message)}{count} · {elapsed:.0f} s"
    return f"<div style='font:12px system-ui,sans-serif;color:#444'>{bar}{said}</div>"


def eta(started: float, now: float, done: int, total: int) -> float:
    """Seconds left at the rate so far."""
    return (now - started) / max(done, 1) * max(total - done, 0)


_CHECKS = threading.local()  # this thread's cancellation check (the explorer's worker: its job's)


@contextlib.contextmanager
def cancellable(check: Callable[[], None]) -> Iterator[None]:
    """Inside the block, every attention call a verb routes (read/adapter.py) first calls ``check()``, which
    raises to stop the work: a request cancelled mid-forward stops within one layer, not at the verb's next
    progress event (SmolLM2's prompt-pair patch ran 5 s past the server's grace between two events).
    The check belongs to the calling thread alone."""
    before = getattr(_CHECKS, "check", None)
    _CHECKS.check = check
    try:
        yield
    finally:
        _CHECKS.check = before


def checkpoint() -> None:
    """The calling thread's cancellation check (cancellable), if it has one."""
    check = getattr(_CHECKS, "check", None)
    if check is not None:
        check()


__all__ = [
    "Event",
    "NotebookBar",
    "Progress",
    "StderrLines",
    "bar_html",
    "cancellable",
    "checkpoint",
    "eta",
    "reporter",
]
